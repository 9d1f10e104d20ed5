# SPDX-License-Identifier: MIT
"""stoker.Loader: batches of decoded images as torch tensors that share the
C loader's buffers, locally or with Dask workers (cluster=); and
stoker.verify."""
import hashlib
import logging
import math
import os
import threading
import warnings

import torch

from .._ext._stoker import BusyError, DataError, OptionError, PlanError, ReadError
from .._ext import _stoker
from .._ext._stoker import verify as _verify
from .._ext._stoker import Loader as _CLoader
from . import (elastic as _elastic, index as _index, metrics as _metrics, pinned as _pinned,
               scope as _scope)
from ..base import ranks as _ranks
from ..cluster import hooks as _cluster_hooks, trainer as _cluster
from ..hooks import batches as _hook_batches, report as _hook_report
from .classes import find_classes
from ..base.fields import _Fields, mix_of, targets
from .metrics import prometheus_text
from .options_doc import _options_doc
from ..base.urls import _as_list

_DTYPES = {
    torch.uint8: "uint8", torch.float32: "float32", torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}
_TORCH_DTYPES = {name: dtype for dtype, name in _DTYPES.items()}
_rank_and_world = _ranks.rank_and_world
_default_threads = _ranks.default_threads
log = logging.getLogger("stoker")
_LOG_LEVELS = {"error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO}


def _pinned_buffer(nbytes):
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy()


# Options that change how fast or from where bytes come, never which batches
# (the C option table's speed_only): a saved loader state stays valid across them.
_SPEED_ONLY_OPTIONS = frozenset(o["name"] for o in _stoker.options() if o["speed_only"])
# The hook processes' decode (transform=None) applies the C decoder's limit.
_MAX_IMAGE_PIXELS = int(next(o["default"] for o in _stoker.options()
                             if o["name"] == "max_image_pixels"))


def verify(urls, images=True, labels=True, threads=None, **options):
    """Read every sample of the shards once, as a Loader would, and return
    {"samples", "bad_samples", "shards", "shards_failed", "shards_empty",
    "images_decoded", "problems"}: problems lists one message per bad sample
    or shard (or shard without samples), naming the shard and the key or
    offset. Never stops at bad data. images=False
    checks tar structure and grouping only; labels=False accepts samples
    without a label; other options as for Loader (label_exts,
    label_json_field, max_image_pixels, io_*) and require_members="txt,json?"
    to check the members a Loader's fields= would need. Same as
    `stoker verify`."""
    _scope.refuse_unused("verify", options, _scope.VERIFY_USES, _scope.VERIFY_WHY)
    if not images:
        _scope.refuse("verify(images=False)", options, _scope.VERIFY_IMAGES,
                      "it checks tar structure and grouping only; images, labels and members "
                      "are checked with images=True")
    if not labels:
        _scope.refuse("verify(labels=False)", options, _scope.VERIFY_LABELS,
                      "it accepts samples without a label")
    if images:
        options["transform"] = "eval"
    if not labels:
        options["label_exts"] = ""
    options["threads"] = threads or _default_threads()
    return _verify(_as_list(urls), **options)


class Loader:
    """Batches of decoded, augmented images as (images, labels) tensors.

    image_size: the output side, or (height, width) for non-square
    images (torchvision's RandomResizedCrop(size=(h, w)) for "train",
    Resize(int(min(h, w) / 0.875)) + CenterCrop((h, w)) for "eval",
    black where the resized image is narrower than the output, as
    CenterCrop pads). Labels come from the sample's .cls member
    (label_exts="cls"; a .txt caption is a label only when named, e.g.
    label_exts="cls,txt"; label_json_field= takes an integer field of the
    .json member); a sample without its label is bad input, and
    label_exts="" means unlabelled data: every label -1.

    fields: a tuple of names, e.g. ("jpg", "txt", "json", "__key__"), to
    get each batch as a tuple in that order instead of (images, labels):
    the image name (jpg, jpeg or png) is the images tensor; "__key__" and
    "__url__" lists of str; "__label__" the labels tensor, or with Mixup/CutMix
    the mixed targets as the (images, labels) batch has them (needed then;
    without it no label is looked for, unless label_exts or
    label_json_field is given);
    any other name the sample's member of that extension,
    parsed by the last part of the extension as WebDataset does: cls, cls2,
    class, count, index, inx, id an int64 tensor; txt, text, transcript a
    list of str (UTF-8); json, jsn a list of json.loads values; anything
    else a list of bytes. A sample that lacks a named member, or whose
    member does not parse, is bad input like a corrupt image (DataError,
    or under on_error="skip" replaced by a copy of its batch's first good
    sample, every field and the key included); a name ending in "?" may be
    missing: None there (an optional int field is then a list, not a
    tensor). A name may list alternatives as WebDataset does, "jpg;png" or
    "txt;json": the first of those members the sample has, each parsed by
    its own extension. require_members= asks for members beyond fields=
    (both are required). Only the members named are copied; images stay zero-copy.

    transform: "train" (RandomResizedCrop + flip) or "eval" (resize +
    center crop), or None with map= (the hook gets the whole decoded
    image and does its own crop, see map below); dtype: torch.uint8 (default; normalize on the GPU),
    torch.float32/float16/bfloat16 (normalized with mean/std); layout:
    "nchw" or "nhwc". threads: reader and decode threads; threads=None or 0
    (the default) is this rank's share of the cores it may run on (those
    of its CPU affinity over the ranks on this node). samples_per_rank makes every rank yield the same
    number of batches. uneven=True is for evaluation under DDP, as
    DistributedSampler(shuffle=False) is: every sample of the dataset is
    delivered exactly once across the ranks (each rank reads its own
    shards once), so ranks may yield different numbers of batches; sum the
    metrics over ranks after the loop (torch.distributed.all_reduce), with
    no collective inside it. index names a dataset index written by
    `stoker index` for the same URLs (built there on first use when the
    file does not exist; len() builds and remembers one itself when no
    index is given): with it len() is known, ranks get
    equal shares by default, and load_state_dict() resumes by re-reading
    at most one shuffle window. pin_memory=True puts the batch ring in CUDA-pinned
    host memory (torch allocates it), so images.cuda(non_blocking=True) is a
    true asynchronous copy: the loader keeps a batch's buffer until the GPU
    has passed the point of the current stream where the loop asked for the
    next batch (queue the copy on the current stream before that);
    batch_allocator(nbytes) may supply any other writable buffer. Every other
    keyword option is listed under
    "Options" below (shards_in_flight, shuffle_buffer, on_error,
    max_batches, cache_dir and cache_size for the node-local shard cache,
    ...). A wrong value raises stoker.OptionError (a ValueError; a
    TypeError too for a wrong type or an unknown name) naming the option
    and what it accepts.

    cluster: the address of a Dask scheduler ("tcp://host:8786") or a
    distributed.Client. Dask workers then decode batch ranges too, and the
    loader's own threads keep decoding alongside them; the batches are
    exactly those of a local run, each once, whatever workers join, die or
    lag (lost tasks are made again, and the loader decodes a range itself
    when the cluster is late with it). Needs index= (workers jump to their
    ranges through it); the shards must be reachable under the same URLs
    from every worker. batches_per_task sets a task's size in batches;
    left out (or "auto"), each range is sized as it is claimed: from the
    batches left, the workers and this process's measured time per batch
    (ranges shrink towards the epoch's end, so both sides finish together)
    and the samples a task reads again (its shuffle window; about none in
    the global order), at most two shuffle windows' worth.

    classes: the class names, label order (what torchvision's datasets
    call dataset.classes): a file of one name per line, a sequence of str,
    or by default the classes.txt beside the first local shard, as `stoker
    pack --classes DIR/classes.txt` writes it (None when there is none;
    remote shards: give classes=). The classes attribute holds them.
    map: fn(sample, rng) run on every sample after stoker's decode and
    crop (sample: the crop as a tensor; with fields= a dict of the named
    fields), in hook_processes processes (default: threads); its results
    are stacked into the batch in order. batch_map: fn(batch, rng) on each
    assembled batch. rng.torch / rng.numpy / rng.key are keyed by the
    sample (by the batch index for batch_map), and the global torch, numpy
    and random generators are re-seeded from the key before each call, so
    batches are the same with any number of processes or threads. A hook's
    failure is a stoker.HookError naming the hook and sample (under
    on_error="skip" the sample is replaced and counted); hook_timeout=S
    limits each call. With transform=None, map= gets the whole image
    instead of stoker's crop: a uint8 tensor of any size, CHW (HWC with
    layout="nhwc"), decoded in the hook process; every result must have
    one shape, declared by map_shape=(3, 224, 224) or else that of the
    first sample; labels come from label_exts. See docs/hooks.md,
    "Your own preprocessing: hooks".

    prometheus_port: serve stats() as Prometheus metrics at
    http://prometheus_host:PORT/metrics (names: docs/metrics.md) until
    close(); 0 takes a free port (the prometheus_port attribute says
    which). prometheus_host is 127.0.0.1 by default: set "0.0.0.0" for a
    scraper on another host. With cache_dir the node cache's size on disk
    is served too.
    """

    def __init__(self, urls, batch_size=64, image_size=224, transform="train",
                 dtype=torch.uint8, layout="nchw", threads=None, seed=0, shuffle=True,
                 rank=None, world_size=None, samples_per_rank=None, drop_last=False,
                 pin_memory=False, index=None, cluster=None, batches_per_task=None,
                 fields=None, prometheus_port=None, prometheus_host=None, classes=None,
                 map=None, batch_map=None, hook_processes=None, hook_timeout=None,
                 map_shape=None, **options):
        # for close() if this fails
        self._c = self._offload = self._prometheus = self._in_flight = self._hooks = None
        self._pid = os.getpid()
        if pin_memory and not torch.cuda.is_available():
            # As torch's DataLoader does: the same script runs on a CPU box.
            warnings.warn("pin_memory=True, but torch finds no CUDA device: batches stay in "
                          "ordinary memory", stacklevel=2)
        elif pin_memory:
            options["batch_allocator"] = _pinned_buffer
        raw = transform is None  # map= gets the whole decoded image (hooks.decode)
        if transform not in ("train", "eval") and not raw:
            raise OptionError(f"transform must be 'train', 'eval' or None (with map=: the hook "
                              f"gets the whole image; for raw samples use stoker.Samples), not "
                              f"{transform!r}")
        if raw:
            if map is None:
                raise OptionError("transform=None needs map=: the hook gets the whole decoded "
                                  "image and makes each sample of the batch (for raw samples "
                                  "without a hook use stoker.Samples)")
            if "label_json_field" in options:
                raise OptionError("label_json_field does not work with transform=None yet: "
                                  "labels come from the label_exts members")
            if dtype not in (torch.uint8, "uint8"):
                raise OptionError(f"dtype={dtype!r} is what stoker's own transform outputs; "
                                  "with transform=None the batch is what map= returns: convert "
                                  "there")
        # Options that act only beside another are refused, not ignored:
        # these keywords here, the option table's by the C loader.
        _scope.refuse_alone("stoker.Loader", dict(
            batches_per_task=batches_per_task, cluster=cluster, prometheus_host=prometheus_host,
            prometheus_port=prometheus_port, hook_processes=hook_processes,
            hook_timeout=hook_timeout, map_shape=map_shape, map=map, batch_map=batch_map))
        name = _DTYPES.get(dtype, dtype)
        if name not in _TORCH_DTYPES:
            raise OptionError(f"dtype must be one of {', '.join(str(t) for t in _DTYPES)} (or their "
                              f"names {', '.join(_TORCH_DTYPES)}), not {dtype!r}")
        self._dtype = _TORCH_DTYPES[name]
        self._layout = layout
        if not isinstance(image_size, int) and isinstance(image_size, (tuple, list)) and \
                len(image_size) == 2 and image_size[0] == image_size[1]:
            image_size = image_size[0]  # (s, s) is s: the same batches, the same saved state
        elif isinstance(image_size, list):
            image_size = tuple(image_size)
        self._fields = None if fields is None else _Fields(fields, options.get("num_classes", 0))
        if self._fields is not None:
            mixes = transform == "train" and any(
                options.get(k) for k in ("mixup_alpha", "cutmix_alpha", "recipe"))
            if mixes and not self._fields.wants_label:
                raise OptionError(
                    f"fields={tuple(fields)!r} has no '__label__', but Mixup/CutMix "
                    "(mixup_alpha, cutmix_alpha, recipe) mix each image with another: the "
                    "mixed targets (partner labels and weights) come in the '__label__' "
                    "field; add it")
            # The members fields= needs and those the caller asks for besides,
            # checked by the C loader where it decodes (with transform=None
            # it does not, and refuses a require_members given there).
            if not raw:
                options["require_members"] = ",".join(
                    r for r in (options.get("require_members"), self._fields.require_members)
                    if r)
            if not self._fields.wants_label and "label_json_field" not in options:
                options.setdefault("label_exts", "")  # labels are not asked for: not needed
        rank, world_size = _rank_and_world(rank, world_size)
        urls = _as_list(urls)
        uneven = options.get("uneven", False)
        if uneven and cluster is not None:
            raise OptionError("uneven=True does not work with cluster= yet: Dask workers make "
                              "batch ranges of equal shares")
        allocator = options.pop("batch_allocator", None)
        config = dict(batch_size=batch_size, image_size=image_size,
                      transform="none" if raw else transform,
                      dtype=name, layout=layout, seed=seed, shuffle=int(bool(shuffle)),
                      rank=rank, world_size=world_size, samples_per_rank=samples_per_rank or 0,
                      drop_last=int(drop_last), **options)
        if raw:  # the hook's decode uses layout here; the C loader makes no images
            del config["dtype"], config["layout"]
        c_config = config
        if cluster is not None:
            if index is None:
                raise OptionError("cluster= needs a dataset index (index=, from `stoker index`): "
                                 "workers jump to their batch ranges through it")
            auto_tasks = _cluster.is_auto(batches_per_task)
            batches_per_task = _cluster.batches_per_task(config, batches_per_task)
            # Batches made here wait for the loop: the local thread keeps at
            # most two ranges ahead of it, plus one it takes back from a
            # late task, and the loop holds its own few (_cluster.Run).
            c_config = dict(config, max_batches=_cluster.LOCAL_RANGES * batches_per_task +
                            config.get("max_batches", 4))
        threads = threads or _default_threads()
        if map is not None or batch_map is not None:
            if options.get("mixup_alpha") or options.get("cutmix_alpha") or options.get("recipe"):
                raise OptionError("map= sees samples after stoker's own augmentations and "
                                  "before batches exist: Mixup/CutMix in C (mixup_alpha, "
                                  "cutmix_alpha, recipe) would mix before the hook; mix in "
                                  "batch_map= instead")
            self._hooks = _hook_batches.make(
                map, batch_map,
                hook_processes if hook_processes is not None else threads,
                hook_timeout,
                seed, rank, options.get("on_error") == "skip",
                config.get("max_batches", 4), map_shape,
                (self._fields and self._fields.image_name, layout == "nhwc",
                 options.get("max_image_pixels", _MAX_IMAGE_PIXELS)) if raw else None)
        # transform=None: labels from these members, checked in Python
        # (the C loader does not read labels without a transform).
        self._raw_labels = (config.get("label_exts", "cls") if raw else None)
        self._raw_skipped = 0
        if index is not None and not os.path.exists(index):
            _index.build(os.fspath(index), urls, c_config, threads)  # once; then remembered
        self._c = _CLoader(urls, threads=threads,
                           batch_allocator=allocator,
                           index_path=None if index is None else os.fspath(index), **c_config)
        info = self._c.info()
        self._hw = (info["image_height"], info["image_width"])
        self._num_classes = options.get("num_classes", 0)
        if self._hooks is not None:
            # Now, not at the first batch: their imports overlap the
            # connection to the Dask scheduler and whatever the caller
            # does before iterating.
            self._hooks.pool.start()
        if cluster is not None:
            image_bytes = 3 * self._hw[0] * self._hw[1] * torch.empty((), dtype=self._dtype).element_size()
            try:
                # The workers' hook processes load the bytes the trainer's
                # do (with transform=None, map= wrapped to decode first).
                # Workers plan the epochs as this loader resolved node
                # affinity here, not as their own environment would.
                affinity = {k: v for k, v in config.items() if k != "ranks_per_node"}
                affinity["node_affinity"] = 1 if info["ranks_per_node"] else 0
                if info["ranks_per_node"]:
                    affinity["ranks_per_node"] = info["ranks_per_node"]
                self._offload = _cluster.Offload(
                    cluster, urls, affinity, os.fspath(index), image_bytes, batches_per_task,
                    fields=fields, hook_pool=self._hooks and self._hooks.pool,
                    raw_labels=self._raw_labels, map_shape=map_shape, auto=auto_tasks)
            except BaseException:  # the scheduler is out of reach: no process left behind
                if self._hooks is not None:
                    self._hooks.pool.close()
                raise
        # Everything that shapes the sequence of batches (not threads, which
        # only change speed; not the index's path, only what it implies): a
        # saved state only fits the same values. With a node cache (a
        # speed-only option otherwise) the order's kind too: the cache gives
        # remote shards the global order where it holds the node's shards.
        # (Without one the options decide it, and states saved before it
        # was counted stay valid.)
        order = {k: v for k, v in config.items() if k not in _SPEED_ONLY_OPTIONS}
        kind = (info["global_order"],) if config.get("cache_dir") else ()
        text = repr((urls, sorted(order.items()), info["samples_per_rank"], *kind))
        self._fingerprint = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        # The same without what differs between the ranks of a run and
        # between world sizes: a state saved at another world size fits
        # this loader when these agree (elastic resume). The order's kind
        # stays in: a window's positions and a global order's are of two
        # different sequences.
        dataset = {k: v for k, v in order.items()
                   if k not in ("rank", "world_size", "batch_size", "node_affinity",
                                "ranks_per_node")}
        text = repr((urls, sorted(dataset.items()), *kind))
        self._dataset = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        self._uneven = bool(uneven)
        self._world = world_size
        # (epoch, ranges, nodes) of an elastic resume, or None; nodes: the
        # ranges are of so many old nodes' sequences (1: of the one sequence)
        self._remaining = None
        self._ranks_per_node = info["ranks_per_node"]  # node affinity as resolved; 0: off
        self._global_order = bool(info["global_order"])
        self._seed = seed
        self._urls = urls
        self.classes = find_classes(urls, classes)
        self._batch = 0      # batches of the current epoch already yielded
        self._resume_at = 0  # first batch of the next iteration
        self._restored = False  # load_state_dict() set _resume_at for its epoch
        self._batch_size = batch_size
        self._max_batches = c_config.get("max_batches", 4)
        if allocator is _pinned_buffer:
            self._in_flight = _pinned.InFlight(self._max_batches)
        self._epoch_samples = info["epoch_samples"]
        self._counting = (c_config, threads, rank, world_size)  # for len() without an index
        self._lengths = {}  # len() by epoch, from the remembered index
        self._drop_last = drop_last
        self._epoch = int(options.get("epoch", 0))  # as set_epoch() before the first iteration
        # Held by the one open iterator: the C loader has one epoch in
        # flight, so a second iterator would take every other batch of it.
        self._iterating = threading.Lock()
        self._agree = None
        self._agreement_cut, self._agreement_warned = 0, False
        self._last_warning = None
        self._indexed = index is not None
        self._eval_order = transform == "eval" and not shuffle  # an evaluation pass
        self._rank = rank
        if world_size > 1 and not self._epoch_samples and not uneven:
            # Ranks may hold different numbers of samples: make them agree
            # on each step, or refuse rather than let DDP hang.
            if not _ranks.distributed():
                raise PlanError(
                    f"rank {rank} of {world_size}: ranks may get different numbers of batches "
                    "(shards hold different numbers of samples) and DDP would hang. Initialise "
                    "torch.distributed before creating the Loader (its ranks then agree on every "
                    "step), or pass index= (`stoker index`: equal shares) or samples_per_rank=")
            self._agree = _ranks.StepAgreement()
        self.prometheus_port = None
        if prometheus_port is not None:
            cache = (options.get("cache_dir"), options.get("cache_size", 0))
            self._prometheus = _metrics.PrometheusServer(
                lambda: prometheus_text(self.stats(), f'rank="{rank}"', *cache),
                prometheus_port, prometheus_host or "127.0.0.1")
            self.prometheus_port = self._prometheus.port

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        shards = f"{len(self._urls)} URL pattern(s)" if len(self._urls) != 1 else repr(self._urls[0])
        where = f", cluster={self._offload.client.scheduler.address!r}" if self._offload else ""
        h, w = self._hw
        # transform=None: the batch is what map= makes, of no size or dtype of ours
        images = "transform=None" if self._raw_labels is not None else \
            f"image_size={h if h == w else (h, w)}, dtype={self._dtype}"
        fields = f", fields={self._fields.names!r}" if self._fields else ""
        hooks = "".join(f", {k}={name}" for k, name in (
            ("map", self._hooks and self._hooks.map_name),
            ("batch_map", self._hooks and self._hooks.batch_name)) if name)
        return (f"stoker.Loader({shards}, batch_size={self._batch_size}, {images}{fields}{hooks}, "
                f"epoch={self._epoch}, batch={self._batch}{where})")

    def set_epoch(self, epoch):
        """Use epoch `epoch` for the next iteration (reshuffles). Right after
        load_state_dict(), setting the saved epoch keeps the saved batch, so
        the usual loop `for e in range(state["epoch"], E): set_epoch(e)`
        resumes where it stopped."""
        epoch = int(epoch)
        if not (self._restored and epoch == self._epoch):
            self._resume_at = 0
        if self._remaining is not None and self._remaining[0] != epoch:
            self._remaining = None
        self._epoch = epoch
        self._restored = False

    def start_prefetch(self):
        """Start reading and decoding the batches the next iteration
        delivers, now, in the loader's threads, and return at once: the
        epoch set_epoch() chose (after a finished loop, the next one), from
        the batch load_state_dict() restored. Call it before building or
        compiling the model, while a checkpoint loads, or after an epoch's
        loop before evaluating: the loop then finds its first batch ready
        instead of waiting for the first shuffle window to be read (Grain's
        start_prefetch). The iteration continues these threads: nothing is
        read twice and the batches are the same. set_epoch() or
        load_state_dict() to another place afterwards drops what was read.
        Not while a loop over this loader is open."""
        self._refuse_after_fork()
        if self._iterating.locked():
            raise RuntimeError("start_prefetch() while this Loader is being iterated: call it "
                               "after the loop (it reads the next iteration's batches)")
        self._c.seek_range(self._epoch, self._resume_at, 0)
        try:
            self._c.start()
        finally:
            self._forward_log()

    def state_dict(self):
        """Where the loader stands, in a few integers: save it with the model
        (each rank its own).

        A loader restored from it continues with exactly the batches an
        uninterrupted run would have delivered next. The states of all
        ranks together also resume a run at another world size (see
        load_state_dict()).
        """
        remaining, nodes = self._remaining[1:] if self._remaining is not None and \
            self._remaining[0] == self._epoch else (None, 1)
        return {"epoch": self._epoch, "batch": self._batch, "seed": self._seed,
                "fingerprint": self._fingerprint, "rank": self._rank,
                "world_size": self._world, "dataset": self._dataset,
                "batch_size": self._batch_size, "remaining": remaining,
                "remaining_nodes": nodes, "ranks_per_node": self._ranks_per_node,
                "global_order": self._global_order}

    def load_state_dict(self, state):
        """Continue from state_dict() of a loader with the same URLs and
        options (threads may differ). The next iteration starts at the saved
        batch. With an index the readers jump to the shuffle window of that
        batch (at most 2 x shuffle_buffer samples are read again); without
        one they do the same over local uncompressed shards, after reading
        the tar headers of the shards up to it to count their samples, and
        over remote or compressed shards the batches before it are read
        again. Nothing before it is decoded.

        At another world size (elastic resume) give every new rank the
        list of all old ranks' state_dict()s, or stoker.merge_states() of
        it: the samples no old rank delivered in the interrupted epoch are
        then delivered once across the new ranks, in equal steps (padding
        counted in samples_padded), and the epochs after it are those of a
        fresh run at this world size. batch_size, threads, hook_processes
        and cluster= may differ too. It needs index= (the global order over
        local uncompressed shards or through a node cache, shuffle=False,
        or the shuffle window over uncompressed shards: the samples the
        window held are read again by offset). Either run may use node
        affinity (not the old one under the shuffle window): the resumed
        epoch (under affinity, the rest of every old node's own sequence)
        is split over all new ranks, the next ones by node. An incomplete
        or mixed set of states is refused, naming what is wrong."""
        if _elastic.is_merged(state) or (state.get("world_size") == 1 and self._world != 1):
            return self._load_states(_elastic.merge_states(state))
        if state.get("fingerprint") != self._fingerprint:
            if state.get("dataset") == self._dataset and state.get("world_size") != self._world:
                raise ValueError(
                    f"this loader state is rank {state.get('rank')}'s of "
                    f"{state.get('world_size')} ranks, this loader is one of {self._world}: to "
                    f"resume at another world size load the list of all "
                    f"{state.get('world_size')} ranks' state_dict()s (or "
                    f"stoker.merge_states() of it) on every new rank")
            raise ValueError("this loader state was saved by a loader with other URLs or "
                             "options (batch size, seed, shuffle, rank/world size, transform, "
                             "samples_per_rank ...); it cannot resume this one")
        self._epoch = int(state["epoch"])
        self._batch = self._resume_at = int(state["batch"])
        remaining = state.get("remaining")
        self._remaining = None if remaining is None else \
            (self._epoch, _elastic.ranges(remaining), int(state.get("remaining_nodes", 1)))
        self._restored = True

    def _load_states(self, merged):
        """Elastic resume from merge_states()'s state: what no old rank
        delivered is this epoch's, split over this loader's ranks."""
        _elastic.check(merged, self._dataset, self._seed, self._global_order)
        epoch = merged["epoch"]
        left = self._c.remainder(epoch, merged["delivered"], merged["remaining"],
                                 merged["ranks_per_node"])
        self._batch = self._resume_at = 0
        if left:
            self._epoch, self._remaining = epoch, (epoch, left, _elastic.nodes(merged))
        else:  # every sample of it was delivered: the next epoch, whole
            self._epoch, self._remaining = epoch + 1, None
        self._restored = True

    def __len__(self):
        """Batches of the epoch on this rank. Without samples_per_rank or
        index= the first call builds the dataset index (a header scan of
        local shards; a whole read of remote ones) and remembers it in
        $STOKER_INDEX_DIR or ~/.cache/stoker/index for every later process
        on these shards and options. Where it cannot be remembered (a
        read-only or full disk, a directory others may write to) the count
        serves this process, with a RuntimeWarning once per directory."""
        n = self._epoch_samples
        if self._remaining is not None and self._remaining[0] == self._epoch:
            n = _elastic.share(self._remaining[1], self._rank, self._world, self._uneven)
        elif not n:
            if self._epoch not in self._lengths:
                config, threads, rank, world = self._counting
                path = self._remembered_index(config, threads)
                self._lengths[self._epoch] = _index.batches(
                    self._urls, config, path, self._epoch, rank, world, self._batch_size,
                    self._drop_last, self._agree is not None)
            return self._lengths[self._epoch]
        if self._drop_last:
            return n // self._batch_size
        return math.ceil(n / self._batch_size)

    def _remembered_index(self, config, threads):
        if any(_index.remote(u) for u in self._urls):
            raise TypeError("len() of remote shards needs a dataset index: pass index=PATH "
                            "(built there once, reading every byte of every shard once, then "
                            "reused by every process) or samples_per_rank=")
        try:
            return _index.ensure(self._urls, config, threads)
        except (_stoker.Error, OSError) as e:
            # TypeError, as len() of an object without one: list(loader) goes
            # on and the iteration reports the bad input itself.
            raise TypeError(f"len() needs the dataset index, and counting the samples "
                            f"failed: {e}") from e

    def _shape(self, n):
        h, w = self._hw
        return (n, 3, h, w) if self._layout == "nchw" else (n, h, w, 3)

    def _images(self, images, n):
        """The images tensor of n images: it shares the buffer's memory (zero copy)."""
        return torch.frombuffer(images, dtype=self._dtype).view(self._shape(n))

    def _tensors(self, images, labels, n, mix=None):
        """The images share the buffer's memory (zero copy); the labels are
        copied, as _fields.targets() says (mix: of a batch Mixup/CutMix
        mixed)."""
        return self._images(images, n), targets(labels, mix, self._num_classes)

    def _local_batches(self, first):
        for batch in self._c_batches(first):
            if self._fields is None:
                out = self._tensors(batch.images, batch.labels, batch.size, mix_of(batch))
            else:
                out = self._fields.batch(batch, self._images(batch.images, batch.size))
            held = batch.images if self._in_flight is not None else None
            del batch  # the tensors keep the buffer alive
            yield out
            del out  # hold nothing while fetching the next batch
            if held is not None:
                self._in_flight.asked_next(held)  # until the GPU has copied it
                del held

    def _c_batches(self, first):
        c = self._c
        # Continues threads already at this batch (start_prefetch(), or a loop
        # that broke out right before it) instead of reading again.
        c.seek_range(self._epoch, first, 0)
        while True:
            try:
                batch = c.next()
            except BusyError:
                raise BusyError(
                    f"the loop still holds the images of the last {self._max_batches} batches "
                    "(max_batches): each batch's images tensor is a view of the loader's memory. "
                    "Drop them (or .clone() what you keep) before taking the next batch, or "
                    "raise max_batches") from None
            finally:
                self._forward_log()
            if batch is None:
                break
            yield batch
            del batch

    def __iter__(self):
        if not self._iterating.acquire(blocking=False):
            raise RuntimeError(
                "this Loader is already being iterated: an earlier iterator of it (in this "
                "thread or another) is still open. Finish that loop, close() the iterator or "
                "drop it before iterating again; for two streams, create two Loaders")
        try:
            yield from self._epoch_batches()
        finally:
            self._iterating.release()

    def _forward_log(self):
        """What the loader's threads logged (skipped samples and shards, ...)
        goes to the `stoker` logger."""
        for level, message in self._c.take_log():
            log.log(_LOG_LEVELS[level], "%s", message)
            if _LOG_LEVELS[level] >= logging.WARNING:
                self._last_warning = message  # what an empty epoch's error names

    def _refuse_after_fork(self):
        """In a child of fork() the loader's threads (the C loader's, the
        Dask client's, the Prometheus server's) do not exist: raise the C
        loader's RuntimeError ("created in process N: make a new Loader
        after fork") before anything waits on one of them."""
        if os.getpid() != self._pid and self._c is not None:
            self._c.close()  # refuses in another process, whatever its state

    def _epoch_batches(self):
        self._refuse_after_fork()
        first = self._resume_at
        self._batch = first
        self._resume_at = 0
        self._restored = False
        remaining, nodes = self._remaining[1:] if self._remaining is not None and \
            self._remaining[0] == self._epoch else (None, 1)
        self._c.set_remainder(self._epoch, remaining, nodes)  # None: the whole epoch
        if self._offload is not None:
            outputs = None
            if self._fields is not None or self._hooks is not None:
                outputs = _cluster_hooks.Outputs(self._fields, self._hooks, self._images,
                                                 raw_labels=self._raw_labels)
            run = _cluster.Run(self._offload, self._c, self._epoch, first, len(self),
                               self._tensors, outputs,
                               None if remaining is None else (remaining, nodes))
            source = run.batches()
        elif self._raw_labels is not None:
            source = self._hooks.batches(
                _hook_batches.raw_samples(self._c_batches(first), self._fields,
                                          self._raw_labels, self._hooks.skip, self._count_skips),
                self._epoch)
        elif self._hooks is not None:
            source = self._hooks.batches(
                _hook_batches.samples(self._c_batches(first), self._images, self._fields),
                self._epoch)
        else:
            source = self._local_batches(first)
        agree = self._agree
        before = self._c.stats()
        try:
            for out in source:
                if agree is not None and not agree(True):
                    self._cut_short(out)
                    break  # another rank has run out: the epoch ends here for all
                self._batch += 1
                yield out
                del out
                # Resumed in a child of fork(): the thread of the hooks (or of
                # the cluster) that makes the next batch is not there.
                self._refuse_after_fork()
            else:
                if agree is not None:
                    agree(False)
                if first == 0 and self._batch == 0:
                    self._nothing_delivered(before)
        except GeneratorExit:
            # The loop broke out: the next iteration continues this epoch.
            self._resume_at = self._batch
            raise
        finally:
            source.close()
            if self._offload is not None:
                self._forward_log()
        self._epoch += 1
        self._batch = 0
        self._remaining = None

    def _nothing_delivered(self, before):
        """An epoch that delivered no batch is an error: under on_error="skip"
        a bucket gone or shards that all fail to read would otherwise give
        every later epoch empty, without an exception (issue 39). A rank the
        index gives no sample (uneven, fewer samples than ranks) is the one
        empty epoch that is right. The C loader ends such an epoch as any
        other (`stoker ls` of bad shards lists nothing and says why)."""
        if self._indexed and not self._c.info()["epoch_samples"]:
            return
        now = self._c.stats()
        failed = now["shards_failed"] - before["shards_failed"]
        skipped = now["samples_skipped"] - before["samples_skipped"] + self._raw_skipped
        last = f" (the last: {self._last_warning})" if self._last_warning else ""
        error = ReadError if failed else DataError
        raise error(f"epoch {self._epoch} delivered no batch: {failed} shard"
                    f"{'' if failed == 1 else 's'} failed and {skipped} sample"
                    f"{'' if skipped == 1 else 's'} were skipped under on_error=skip{last}")

    def _cut_short(self, batch):
        """The ranks' step agreement ended the epoch while this rank still had
        a batch: those samples (and whatever its shards held after them, not
        read) are not delivered this epoch. Said once per loader, naming the
        option that avoids it, since an evaluation that leaves samples out
        without a word reports a wrong accuracy."""
        first = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
        n = first.shape[0] if hasattr(first, "shape") else self._batch_size
        self._agreement_cut += n
        if self._agreement_warned:
            return
        self._agreement_warned = True
        remedy = ("pass uneven=True to evaluate every sample once (each rank its own count "
                  "of batches)" if self._eval_order else
                  "pass index= (`stoker index`): ranks then split every epoch by sample")
        log.warning("stoker: rank %d: another rank ran out of batches first, so epoch %d ended "
                    "here with at least %d samples of this rank's shards not delivered (equal "
                    "steps under DDP); %s. stats()['samples_cut_by_step_agreement'] counts them "
                    "(said once)", self._rank, self._epoch, n, remedy)

    def stats(self):
        """Counters: samples, skipped samples, replaced images, bytes, and the
        time spent per stage (reading, decoding, resampling, converting,
        batching) and by the caller waiting for batches, in ns; the shuffle_*
        counters give the shuffle's quality (stoker.rates(stats) turns them
        into shuffle_k_eff and shuffle_k_perfect). With cluster=,
        the stage times are this process's; samples, batches and the bad
        input counts cover every batch delivered, from wherever it came, and
        "cluster" says how many came from where."""
        stats = self._c.stats()
        stats["samples_skipped"] += self._raw_skipped
        if self._agree is not None:
            stats["samples_cut_by_step_agreement"] = self._agreement_cut
        if self._hooks is not None:
            stats["hook_wait_ns"] = self._hooks.wait_ns
            stats["hook_busy_ns"] = int(self._hooks.pool.busy_s * 1e9)
            stats["hook_start_ns"] = int(self._hooks.pool.start_s * 1e9)
            stats["hook_processes"] = self._hooks.pool.processes
            stats["hook_samples_skipped"] = self._hooks.skipped
            stats["hook_processes_restarted"] = self._hooks.pool.restarts
        if self._offload is not None:
            _cluster.merge_stats(stats, self._offload)
        return stats

    def _count_skips(self, n):
        self._raw_skipped += n

    def report(self):
        """Where the time went, in a few lines: whether the training loop is
        input-bound (it waited for batches 5% of its time or more since the
        first batch was asked for), the busy share of each stage, which
        one limits, and how many shards a batch mixes against a perfect
        shuffle. Print it at the end of an epoch. For figures over time,
        see stoker.rates() and stoker.tensorboard()."""
        if self._offload is not None:
            return _cluster.report(self.stats())
        if self._hooks is not None:
            return _hook_report.report(self.stats(), self._c.report())
        return self._c.report()

    def close(self):
        """Stop the loader's threads now (also done when it is garbage collected).
        May be called from another thread: a next() waiting there for a batch
        raises ValueError, as does any later use of the loader. Also done at
        the end of a `with` block."""
        self._refuse_after_fork()
        if self._prometheus is not None:
            self._prometheus.close()
            self._prometheus = None
        if self._in_flight is not None:
            self._in_flight.drain()
        if self._hooks is not None:
            self._hooks.pool.close()
        if self._c is not None:
            self._c.close()
        if self._offload is not None:
            self._offload.close()


Loader.__doc__ += _options_doc(Loader.__init__)
Loader.stats.__doc__ += "\n\n        Keys:\n\n" + "".join(
    f"        {name}: {doc}\n" for name, doc in _stoker.stats_fields())

