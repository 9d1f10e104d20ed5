# SPDX-License-Identifier: MIT
"""The dataset index without ceremony: len() of a Loader given no index
builds one on first use and remembers it, once per dataset and the options that change counts
(not per process: the next process, rank or run finds the same file), and
Loader(index=PATH) builds PATH when it does not exist yet.

Building is `stoker index`'s count, with the loader's own grouping and
bad-input rules, never decoding: a local shard's tar headers are read and
its member data seeked over (src/dataset_index.c; docs/ddp.md, "The dataset index
scan"), a remote shard is streamed whole, so there it costs one download of
the dataset, which is why len() asks for index=PATH there instead of doing
it unasked. Several processes may build the same index at once:
each writes a temporary file of its own and publishes it by an atomic
rename that never replaces (src/base/atomic_file.c); the ones that lose
find the winner's file and use it."""
import hashlib
import math
import os

from ._stoker import Error, OutputExists, error_codes, index_build
from ._stoker import Loader as _CLoader
from ._urls import _has_scheme

# Options that decide which samples a shard counts: the shard reader's
# grouping limits and bad-input rule (stk__shard_config_init in
# src/tar/shard_reader.c). The others (transform, batching, order, speed,
# augmentations) leave counts alone, so a train and an eval loader, or
# two batch sizes, over the same shards share one remembered index.
_COUNTING = frozenset(("on_error", "max_member_bytes", "max_members_per_sample",
                       "max_key_bytes", "max_samples_per_shard"))


def index_dir():
    """$STOKER_INDEX_DIR, else $XDG_CACHE_HOME/stoker/index, else
    ~/.cache/stoker/index."""
    if os.environ.get("STOKER_INDEX_DIR"):
        return os.environ["STOKER_INDEX_DIR"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "stoker", "index")


def remote(url):
    return not url.startswith("file://") and _has_scheme(url)


def _identity(url):
    """A local shard by the file it is (relative or absolute), a remote one by its URL."""
    if remote(url):
        return url
    return os.path.realpath(url[7:] if url.startswith("file://") else url)


def remembered_path(urls, config):
    """Where the index of these shards, counted under these options, lives."""
    counting = sorted((k, str(v)) for k, v in config.items() if k in _COUNTING)
    text = repr(([_identity(u) for u in urls], counting))
    return os.path.join(index_dir(), hashlib.sha256(text.encode()).hexdigest()[:32] + ".json")


def build(path, urls, config, threads, replace=False):
    """Write the index at path unless another process has published it."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    options = {k: v for k, v in config.items() if k not in ("rank", "world_size", "epoch")}
    try:
        index_build(path, urls, replace, **dict(options, threads=threads))
    except OutputExists:
        pass  # another process built it first: the same counts


def ensure(urls, config, threads):
    """The remembered index of urls, built if missing or stale."""
    path = remembered_path(urls, config)
    if not os.path.exists(path):
        build(path, urls, config, threads)
    try:
        _CLoader(urls, threads=1, index_path=path, **_probe(config, 0)).close()
    except Error as e:
        if e.code != error_codes["EINDEX"]:
            raise
        build(path, urls, config, threads, replace=True)  # a shard changed since
    return path


def _probe(config, rank):
    """A loader that only tells rank's own count: no equal shares, never
    iterated (its transform stays, so the options that need it still act:
    one image of batch memory), split by whole shards as the Loader that
    asks is (it has no index)."""
    return dict(config, uneven=1, rank=rank, samples_per_rank=0, batch_size=1, max_batches=1,
                whole_shards=1)


def batches(urls, config, path, epoch, rank, world, batch_size, drop_last, agree):
    """len() of a Loader without an index: this rank's batches, or with the
    ranks agreeing on every step (agree) the fewest any rank has."""
    def count(r):
        c = _CLoader(urls, threads=1, index_path=path, **dict(_probe(config, r), epoch=epoch))
        try:
            n = c.info()["epoch_samples"]
        finally:
            c.close()
        return n // batch_size if drop_last else math.ceil(n / batch_size)
    return min(count(r) for r in range(world)) if agree else count(rank)
