"""stoker: WebDataset tar shards to PyTorch batches, decoded in C.

Three lines in a training script::

    loader = stoker.Loader("/data/train-{000000..001023}.tar", batch_size=256,
                           transform="train", samples_per_rank=1_281_167 // world)
    for images, labels in loader:          # uint8 NCHW tensors, zero copy
        ...

`Loader` yields (images, labels) torch tensors that share memory with the
C loader's batch buffers: a buffer goes back to the loader only when no
tensor uses it any more, so holding a batch is always safe. `Samples`
yields raw samples as dicts for any modality and splits shards across
DataLoader workers by itself.
"""
import hashlib
import math
import os

import torch

from ._stoker import BusyError, DataError, Error, PlanError, ShardWriter, version
from ._stoker import verify as _verify
from ._stoker import Loader as _CLoader

__all__ = ["Loader", "Samples", "ShardWriter", "verify", "Error", "DataError", "PlanError",
           "BusyError", "version"]

_DTYPES = {
    torch.uint8: "uint8", torch.float32: "float32", torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}
_TORCH_DTYPES = {name: dtype for dtype, name in _DTYPES.items()}
_ENV_RANKS = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"),
              ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))


def _rank_and_world(rank, world_size):
    """Explicit values, else torch.distributed when initialised, else the
    launcher's environment (torchrun, Slurm, Open MPI), else 0 of 1."""
    if rank is not None and world_size is not None:
        return int(rank), int(world_size)
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    for r, w in _ENV_RANKS:
        if r in os.environ and w in os.environ:
            return int(os.environ[r]), int(os.environ[w])
    return 0, 1


def _default_threads():
    return len(os.sched_getaffinity(0))


def _pinned_buffer(nbytes):
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy()


def _as_list(urls):
    return [urls] if isinstance(urls, (str, os.PathLike)) else [os.fspath(u) for u in urls]


# Options that change how fast or from where bytes come, never which batches:
# a saved loader state stays valid across them.
_SPEED_ONLY_OPTIONS = frozenset({
    "cache_dir", "cache_size", "max_batches", "prefetch_bytes_per_shard", "read_buffer_bytes",
    "io_timeout_ms", "io_retries", "io_backoff_ms", "ca_bundle", "shuffle_buffer_bytes"})


def verify(urls, images=True, labels=True, threads=None, **options):
    """Read every sample of the shards once, as a Loader would, and return
    {"samples", "bad_samples", "shards", "shards_failed", "shards_empty",
    "images_decoded", "problems"}: problems lists one message per bad sample
    or shard (or shard without samples), naming the shard and the key or
    offset. Never stops at bad data. images=False
    checks tar structure and grouping only; labels=False accepts samples
    without a label; other options as for Loader (label_exts,
    label_json_field, max_image_pixels, io_*). Same as `stoker verify`."""
    if images:
        options["transform"] = "eval"
    if not labels:
        options["label_exts"] = ""
    options["threads"] = threads or _default_threads()
    return _verify(_as_list(urls), **options)


class Loader:
    """Batches of decoded, augmented images as (images, labels) tensors.

    transform: "train" (RandomResizedCrop + flip) or "eval" (resize +
    center crop); dtype: torch.uint8 (default; normalize on the GPU),
    torch.float32/float16/bfloat16 (normalized with mean/std); layout:
    "nchw" or "nhwc". samples_per_rank makes every rank yield the same
    number of batches. index names a dataset index written by
    `stoker index` for the same URLs: with it len() is known, ranks get
    equal shares by default, and load_state_dict() resumes by re-reading
    at most one shuffle window. pin_memory=True puts the batch ring in CUDA-pinned
    host memory (torch allocates it), so images.cuda(non_blocking=True) is a
    true asynchronous copy; batch_allocator(nbytes) may supply any other
    writable buffer. Other keyword options are those of stk_options in
    stoker.h (shards_in_flight, shuffle_buffer, on_error, max_batches,
    cache_dir and cache_size for the node-local shard cache, ...).
    """

    def __init__(self, urls, batch_size=64, image_size=224, transform="train",
                 dtype=torch.uint8, layout="nchw", threads=None, seed=0, shuffle=True,
                 rank=None, world_size=None, samples_per_rank=None, drop_last=False,
                 pin_memory=False, index=None, **options):
        if pin_memory:
            if not torch.cuda.is_available():
                raise ValueError("pin_memory=True needs CUDA, and torch finds no CUDA device")
            options["batch_allocator"] = _pinned_buffer
        if transform not in ("train", "eval"):
            raise ValueError("transform must be 'train' or 'eval'")
        name = _DTYPES.get(dtype, dtype)
        if name not in _TORCH_DTYPES:
            raise ValueError(f"unsupported dtype {dtype!r}")
        self._dtype = _TORCH_DTYPES[name]
        self._layout = layout
        self._size = int(image_size)
        rank, world_size = _rank_and_world(rank, world_size)
        urls = _as_list(urls)
        allocator = options.pop("batch_allocator", None)
        config = dict(batch_size=batch_size, image_size=image_size, transform=transform,
                      dtype=name, layout=layout, seed=seed, shuffle=int(bool(shuffle)),
                      rank=rank, world_size=world_size, samples_per_rank=samples_per_rank or 0,
                      drop_last=int(drop_last), **options)
        self._c = _CLoader(urls, threads=threads or _default_threads(),
                           batch_allocator=allocator,
                           index_path=None if index is None else os.fspath(index), **config)
        info = self._c.info()
        # Everything that shapes the sequence of batches (not threads, which
        # only change speed; not the index's path, only what it implies): a
        # saved state only fits the same values.
        order = {k: v for k, v in config.items() if k not in _SPEED_ONLY_OPTIONS}
        text = repr((urls, sorted(order.items()), info["samples_per_rank"]))
        self._fingerprint = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        self._seed = seed
        self._batch = 0      # batches of the current epoch already yielded
        self._resume_at = 0  # first batch of the next iteration
        self._batch_size = batch_size
        self._epoch_samples = info["epoch_samples"]
        self._drop_last = drop_last
        self._epoch = 0

    def set_epoch(self, epoch):
        """Use epoch `epoch` for the next iteration (reshuffles)."""
        self._epoch = int(epoch)
        self._resume_at = 0

    def state_dict(self):
        """Where the loader stands, in a few integers: save it with the model.

        A loader restored from it continues with exactly the batches an
        uninterrupted run would have delivered next.
        """
        return {"epoch": self._epoch, "batch": self._batch, "seed": self._seed,
                "fingerprint": self._fingerprint}

    def load_state_dict(self, state):
        """Continue from state_dict() of a loader with the same URLs and
        options (threads may differ). The next iteration starts at the saved
        batch. With an index the readers jump to the shuffle window of that
        batch (at most shuffle_buffer samples are read again); without one
        the batches before it are read again. Nothing before it is decoded."""
        if state.get("fingerprint") != self._fingerprint:
            raise ValueError("this loader state was saved by a loader with other URLs or "
                             "options (batch size, seed, shuffle, rank/world size, transform, "
                             "samples_per_rank ...); it cannot resume this one")
        self._epoch = int(state["epoch"])
        self._batch = self._resume_at = int(state["batch"])

    def __len__(self):
        n = self._epoch_samples
        if not n:
            raise TypeError("the number of batches is known only with samples_per_rank or "
                            "a dataset index (index=)")
        if self._drop_last:
            return n // self._batch_size
        return math.ceil(n / self._batch_size)

    def _shape(self, n):
        s = self._size
        return (n, 3, s, s) if self._layout == "nchw" else (n, s, s, 3)

    def __iter__(self):
        c = self._c
        c.seek(self._epoch, self._resume_at)
        self._batch = self._resume_at
        self._resume_at = 0
        while True:
            try:
                batch = c.next()
            except BusyError as e:
                raise BusyError(f"{e}: in Python, drop the tensors of earlier batches (or copy "
                                "them) before asking for more, or raise max_batches") from None
            if batch is None:
                break
            images = torch.frombuffer(batch.images, dtype=self._dtype).view(self._shape(batch.size))
            labels = torch.frombuffer(batch.labels, dtype=torch.int64)
            del batch  # the tensors keep the buffer alive
            self._batch += 1
            yield images, labels
            del images, labels  # hold nothing while fetching the next batch
        self._epoch += 1
        self._batch = 0

    def stats(self):
        """Counters: samples, skipped samples, replaced images, bytes, and the
        time spent per stage (reading, decoding, resampling, converting,
        batching) and by the caller waiting for batches, in ns."""
        return self._c.stats()

    def report(self):
        """Where the time went, in a few lines: whether the training loop is
        input-bound (it waited for batches 5% of its time or more since the
        first batch was asked for), the busy share of each stage, and which
        one limits. Print it at the end of an epoch."""
        return self._c.report()

    def close(self):
        """Stop the loader's threads now (also done when it is garbage collected)."""
        self._c.close()


class Samples(torch.utils.data.IterableDataset):
    """Raw samples as dicts: "__key__", "__url__" and one bytes value per
    member extension, in WebDataset's layout.

    Inside a torch DataLoader with num_workers > 0 each worker reads its own
    share of this rank's shards (no sample twice); with shuffle=False the
    order within a worker is storage order. Workers iterate copies of this
    object, so call set_epoch(e) before each epoch to reshuffle.
    """

    def __init__(self, urls, shuffle=True, seed=0, rank=None, world_size=None, threads=1,
                 **options):
        super().__init__()
        self._urls = _as_list(urls)
        self._rank, self._world = _rank_and_world(rank, world_size)
        self._options = dict(options, shuffle=int(bool(shuffle)), seed=seed, threads=threads)
        self._epoch = 0

    def set_epoch(self, epoch):
        self._epoch = int(epoch)

    def __iter__(self):
        rank, world = self._rank, self._world
        info = torch.utils.data.get_worker_info()
        if info is not None:
            rank, world = rank * info.num_workers + info.id, world * info.num_workers
        # Created here, in the process that iterates: a C loader and its
        # threads do not survive a fork.
        c = _CLoader(self._urls, rank=rank, world_size=world, epoch=self._epoch,
                     batch_size=64, **self._options)
        try:
            while True:
                batch = c.next()
                if batch is None:
                    break
                yield from batch.samples()
        finally:
            c.close()
        self._epoch += 1
