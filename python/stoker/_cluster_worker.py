# SPDX-License-Identifier: MIT
"""The part of Loader(cluster=...) that runs inside Dask worker processes:
make_range, the task that makes a run of batches with a stoker loader kept
per worker process (_cluster.py has the design)."""
import hashlib
import os
import stat
import struct
import tempfile
import threading
import time
import traceback
import zlib

import numpy as np

from . import _ranks, _stoker
from ._cluster_hooks import digest as object_digest, worker_outputs
from ._hook_processes import ForkServer
from ._hooks import Pool
from ._hook_env import compare, fingerprint

_cache_lock = threading.Lock()
_idle = {}     # spec key -> [C loaders not in use], most recently used last
_MAX_SPECS = 4  # loaders kept per worker process: one per trainer rank in use
_started = {}  # spec key -> hook Pool started by warm_hooks, not used by a task yet
# The fork server of every hook process of this worker process, shared by
# the jobs' pools: started with the worker by dask_setup (--preload stoker),
# it has imported torch before the first job comes.
_server = ForkServer()
# For the tests only: every task takes this much longer, so that a test can
# kill a worker while it holds tasks.
_TEST_TASK_DELAY_S = int(os.environ.get("STOKER_TEST_TASK_DELAY_MS", "0")) / 1000


class WorkerMismatch(RuntimeError):
    """A worker's identity differs from the trainer's (another stoker build,
    or for hooks another environment): the trainer refuses that worker.
    address: the worker's."""

    def __init__(self, message, address):
        super().__init__(message, address)
        self.address = address

    def __str__(self):
        return self.args[0]


def build_identity(hooks=None):
    """What must be equal in the trainer and a Dask worker for their batches
    of one range to be equal, as a dict compared whole: the C library's
    build identity (version, commit, libjpeg-turbo, libspng and zlib
    versions: _stoker.build_id), and with hooks (their pickled bytes) the
    environment fingerprint of _hook_env (torch, torchvision, numpy
    versions, the hooks' digest, the CPU capability torch dispatches to)."""
    identity = {}
    if hooks is not None:
        identity.update(fingerprint(hashlib.sha256(hooks).hexdigest()[:32]))
    identity["stoker"] = _stoker.build_id  # the build covers the version
    return identity


def batch_digest(images, labels, mix_labels=None, mix_weight=None):
    """CRC-32 of a batch's image and label bytes (and its Mixup/CutMix
    partner labels and weight, when mixed), taken by the worker from
    the C loader's buffers and checked by the trainer: it catches bytes
    changed after the loader made them (in Python, in serialisation, in
    transit), not a worker whose loader itself is patched (that one can
    compute the digest of what it sends). An integrity check, not a
    signature. zlib's CRC-32 is the fastest checksum at hand: 2.5 ms for a
    9.6 MB batch (64 images at 224), 0.26 CPU-s per GB, best of 7 on one
    loaded core here (median 7.8 ms; adler32 was slower, 3.7 ms), against
    0.35 CPU-s per GB to receive the batch and ~450 ms to decode it."""
    crc = zlib.crc32(labels, zlib.crc32(images))
    if mix_labels is not None:
        crc = zlib.crc32(struct.pack("<d", mix_weight), zlib.crc32(mix_labels, crc))
    return crc


def _worker_threads():
    """Decode threads of a task: $STOKER_WORKER_THREADS, else the cores this
    worker process may use shared among the tasks it runs at once."""
    if os.environ.get("STOKER_WORKER_THREADS"):
        return int(os.environ["STOKER_WORKER_THREADS"])
    cores = _ranks.usable_cores()
    try:
        from distributed import get_worker
        tasks = get_worker().state.nthreads
    except (ImportError, ValueError, AttributeError):
        tasks = 1
    return max(1, cores // max(1, tasks))


def _worker_address():
    try:
        from distributed import get_worker
        return get_worker().address
    except (ImportError, ValueError):
        return None


def _index_digest(data):
    return hashlib.sha256(data).hexdigest()[:32]


def _private_dir():
    """$TMPDIR/stoker-UID, made 0700 and checked to be this user's own
    directory (not a link, not writable by others): nothing another user
    plants can be in it."""
    path = os.path.join(tempfile.gettempdir(), f"stoker-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{path} is not a private directory of user {os.getuid()} (a link, "
                      f"another owner or mode {stat.S_IMODE(st.st_mode):o}): remove it")
    return path


def _read_nofollow(path):
    """The file's bytes, or None when it is missing or a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # missing, or a link (ELOOP)
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _index_file(digest, data):
    """The dataset index as a file on this host, in a private directory,
    written once per digest: a file found there is used only when its
    bytes have that digest (else, or when it is a link, it is replaced)."""
    if _index_digest(data) != digest:
        raise ValueError(f"the dataset index received does not have digest {digest}")
    path = os.path.join(_private_dir(), f"index-{digest}.json")
    found = _read_nofollow(path)
    if found is None or _index_digest(found) != digest:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".index-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # replaces a link itself, never its target
    return path


def _checkout(spec, index_data):
    """(C loader, its _cluster_hooks.Outputs or None) for spec: one kept
    from an earlier task, else new ones (the hooks' processes with them)."""
    with _cache_lock:
        loaders = _idle.get(spec["key"])
        if loaders:
            return loaders.pop()
    options = dict(spec["options"])
    if index_data is not None:
        options["index_path"] = _index_file(spec["index_digest"], index_data)
    threads = _worker_threads()
    loader = _stoker.Loader(spec["urls"], threads=threads, **options)
    with _cache_lock:
        pool = _started.pop(spec["key"], None)
    if pool is None and spec["hooks"] is not None:
        pool = _new_pool(spec)
    try:
        outputs = worker_outputs(dict(spec, hook_processes=threads), loader.info(), pool)
    except Exception as e:  # the hooks' modules are missing here, or another version
        loader.close()
        if pool is not None:
            pool.close()
        address = _worker_address()
        raise WorkerMismatch(f"worker {address} cannot load the hooks ({type(e).__name__}: "
                             f"{e}): install their modules there", address) from None
    return loader, outputs


def _new_pool(spec):
    """The hook processes of a task for spec: one per decode thread, forked
    by this worker process's server."""
    return Pool(spec["hooks"], _worker_threads(), spec["hook_timeout"], server=_server)


def warm_hooks(spec):
    """Dask task, sent by the trainer when it first sees this worker: start
    the hook processes that spec's first task will use (each imports torch,
    seconds of a core), while the trainer is starting its own. Nothing when
    they run already or this worker would be refused."""
    if spec["hooks"] is None:
        return
    try:
        _check_identity(spec)
    except WorkerMismatch:  # its first task says so to the trainer
        return
    with _cache_lock:
        if spec["key"] in _idle or spec["key"] in _started:
            return
        _started[spec["key"]] = pool = _new_pool(spec)
        while len(_started) > _MAX_SPECS:
            _started.pop(next(iter(_started))).close()
    pool.start()


def dask_setup(worker):
    """`dask-worker --preload stoker` calls this as the worker starts: the
    fork server of its hook processes starts importing torch now, not in
    the first job's epoch."""
    _server.start()


def _close(kept):
    loader, outputs = kept
    loader.close()
    if outputs is not None and outputs.hooked is not None:
        outputs.hooked.pool.close()


def _checkin(spec, kept):
    with _cache_lock:
        _idle.setdefault(spec["key"], []).append(kept)
        _idle[spec["key"]] = _idle.pop(spec["key"])  # most recently used last
        while len(_idle) > _MAX_SPECS:
            for old in _idle.pop(next(iter(_idle))):
                _close(old)


def _check_identity(spec):
    mine = build_identity(spec["hooks"])
    differ = compare(spec["identity"], mine)
    if differ:
        address = _worker_address()
        raise WorkerMismatch(f"worker {address} differs from the trainer ({differ}): its "
                             "batches could differ", address)


def make_range(spec, index_data, epoch, first, count):
    """Dask task: batches [first, first + count) of `epoch` for the loader
    described by spec. Returns the images and labels of every batch as two
    arrays (and the Mixup/CutMix partner labels and weights), or with
    fields= or hooks the batch objects themselves ("outputs", and the
    hooks' canary sample); the sizes and bad-input counts per batch, and,
    when the data was bad under on_error="fail" (or a hook failed), the
    error that ended the range (the batches before it are kept, as a local
    loader delivers them)."""
    _check_identity(spec)
    loader, outputs = kept = _checkout(spec, index_data)
    try:
        before = loader.stats()
        if outputs is None:
            result = _arrays(loader, spec, epoch, first, count)
        else:
            result = _objects(loader, outputs, epoch, first, count)
        after = loader.stats()
    finally:
        _checkin(spec, kept)
    if _TEST_TASK_DELAY_S:
        time.sleep(_TEST_TASK_DELAY_S)
    result.update(first=first, samples_read=after["samples_read"] - before["samples_read"],
                  worker=_worker_address())
    return result


def _error(e):
    """(class name, message, its cause's traceback as text or ''): for a
    HookError the hook's own, from its hook process."""
    cause = e.__cause__
    return (type(e).__name__, str(e),
            "".join(traceback.format_exception(cause)) if cause is not None else "")


def _objects(loader, outputs, epoch, first, count):
    """make_range's result with fields= or hooks: each batch's object."""
    recording = outputs.hooked.pool if outputs.hooked is not None else None
    if recording is not None:
        recording.reset()
    restarts = recording.restarts if recording is not None else 0
    objects, sizes, skips, error = [], [], [], None
    made = outputs.made(loader, epoch, first, count)
    try:
        for out, n, bad in made:
            objects.append(out)
            sizes.append(n)
            skips.append(bad)
    except _stoker.Error as e:  # a HookError too
        error = _error(e)
    finally:
        made.close()
    return {"outputs": objects, "sizes": sizes, "skips": skips, "error": error,
            "digests": [object_digest(o) for o in objects],
            "canary": recording.canary if recording is not None else None,
            "hook_restarts": recording.restarts - restarts if recording is not None else 0}


def _arrays(loader, spec, epoch, first, count):
    """make_range's result for (images, labels) batches: two arrays."""
    loader.seek_range(epoch, first, count)
    images = np.empty(count * spec["batch_bytes"], np.uint8)
    labels = np.empty(count * spec["batch_size"], np.int64)
    partners = np.empty(count * spec["batch_size"], np.int64)  # Mixup/CutMix
    sizes, skips, weights, digests, error = [], [], [], [], None
    image_end = label_end = 0
    try:
        while len(sizes) < count:
            b = loader.next()
            if b is None:
                break
            data = np.frombuffer(b.images, np.uint8)
            images[image_end:image_end + data.size] = data
            image_end += data.size
            n = b.size
            labels[label_end:label_end + n] = np.frombuffer(b.labels, np.int64)
            if b.mix_labels is not None:
                partners[label_end:label_end + n] = np.frombuffer(b.mix_labels, np.int64)
            weights.append(None if b.mix_labels is None else b.mix_weight)
            label_end += n
            digests.append(batch_digest(b.images, b.labels, b.mix_labels, b.mix_weight))
            sizes.append(n)
            skips.append(b.skips + (0,))  # no hook
            del b, data
    except _stoker.Error as e:
        error = _error(e)
    return {
        "sizes": sizes, "skips": skips, "digests": digests, "error": error,
        "images": images[:image_end], "labels": labels[:label_end],
        "mix_labels": partners[:label_end], "mix_weights": weights,
    }
