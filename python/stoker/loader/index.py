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
find the winner's file and use it.

What the directory holds is checked, not trusted: it must be this user's
and writable by nobody else (it is made 0700), and a name in it is used
only when it is a regular file of this user, opened without following a
link or waiting on a FIFO; anything else there (a link, a FIFO, another
user's file) is replaced by a new count, and the count is checked against
the shards (every one listed, with its size and time) before it is used.
Where nothing can be remembered (a read-only or full disk, a directory of
someone else, a directory planted at the name) len() still counts: into a
directory of this process, with one warning per directory."""
import atexit
import hashlib
import math
import os
import shutil
import stat
import tempfile
import warnings

from .._ext._stoker import Error, OutputExists, error_codes, index_build
from .._ext._stoker import Loader as _CLoader
from ..base.urls import _has_scheme

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


def _usable_dir(directory):
    """None when directory (made 0700 if missing) can hold remembered
    indexes, else why not."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.stat(directory)
    except OSError as e:
        return f"{e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return "other users may write to it and plant indexes there"
    if not os.access(directory, os.W_OK):  # a read-only mount included (EROFS)
        return "it cannot be written"
    return None


def _found(path):
    """What is at path: None (nothing), "ours" (a regular file of this
    user), or what else is there. Never follows a link (O_NOFOLLOW) nor
    waits for a FIFO's writer (O_NONBLOCK)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        return "a symbolic link" if os.path.islink(path) else "a file that cannot be opened"
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if stat.S_ISDIR(st.st_mode):
        return "a directory"
    if not stat.S_ISREG(st.st_mode):
        return "a FIFO, device or socket"
    return "ours" if st.st_uid == os.geteuid() else "a file of another user"


def build(path, urls, config, threads, replace=False):
    """Write the index at path unless another process has published it."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    options = {k: v for k, v in config.items() if k not in ("rank", "world_size", "epoch")}
    try:
        index_build(path, urls, replace, **dict(options, threads=threads))
    except OutputExists:
        pass  # another process built it first: the same counts


def _serves(path, urls, config):
    """Does the index at path hold every shard of urls, each with the stamp it has now?"""
    try:
        _CLoader(urls, threads=1, index_path=path, **_probe(config, 0)).close()
    except Error as e:
        if e.code != error_codes["EINDEX"]:
            raise
        return False  # a shard changed since, or the file is not this dataset's
    return True


def ensure(urls, config, threads):
    """The remembered index of urls, built if missing, stale or not one this
    user wrote; a private one (with a warning) where it cannot be."""
    directory = index_dir()
    path = remembered_path(urls, config)
    why, found = _unwritable.get(directory) or _usable_dir(directory), None
    if why is None:
        found = _found(path)
        if found == "ours" and _serves(path, urls, config):
            return path
        if found == "a directory":
            why = f"a directory is in the way at {path}: remove it"
    if why is None:
        try:
            build(path, urls, config, threads, replace=found is not None)
            return path
        except Error as e:
            # Writing the file failed (a full disk: the messages of an
            # output name it first), not the count: counted again below.
            if e.code != error_codes["EIO"] or not str(e).startswith(path + ":"):
                raise
            why = _unwritable[directory] = str(e)
    return _private(urls, config, threads, directory, why)


_unwritable = {}  # directory -> why writing there failed, not tried again
_private_indexes = {}  # remembered path -> this process's own index of it
_private_dir = []  # the directory that holds them, once made
_warned = set()


def _private(urls, config, threads, directory, why):
    """The index of urls in a directory of this process (removed at exit),
    built once per process; warns once per directory that it is not remembered."""
    key = remembered_path(urls, config)
    if key not in _private_indexes or not _serves(_private_indexes[key], urls, config):
        if not _private_dir:
            _private_dir.append(tempfile.mkdtemp(prefix="stoker-index-"))  # 0700
            atexit.register(shutil.rmtree, _private_dir[0], ignore_errors=True)
        path = os.path.join(_private_dir[0], os.path.basename(key))
        build(path, urls, config, threads, replace=True)
        _private_indexes[key] = path
    if directory not in _warned:
        _warned.add(directory)
        warnings.warn(f"len() cannot remember dataset indexes in {directory} ({why}): the "
                      "samples were counted for this process only, and other processes will "
                      "count them again; set STOKER_INDEX_DIR to a directory of yours that can "
                      "be written", RuntimeWarning, stacklevel=5)
    return _private_indexes[key]


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
