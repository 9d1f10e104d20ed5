# SPDX-License-Identifier: MIT
"""The part of Loader(cluster=...) that runs inside Dask worker processes:
make_range, the task that makes a run of batches with a stoker loader kept
per worker process and job, and warm_hooks, which starts a job's hook
processes ahead of its first task (trainer.py has the design). What a job
keeps here lasts as long as the data its trainer scattered (_Job)."""
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

from .._ext import _stoker
from ..base import ranks as _ranks
from ..hooks import code as _hook_code
from .hooks import digest as object_digest, worker_outputs
from ..hooks.processes import ForkServer
from ..hooks.pool import Pool
from ..hooks.env import compare, fingerprint

# What this worker process keeps per job (the spec key of one trainer's
# Loader), under _cache_lock: the jobs most recently used last.
_cache_lock = threading.Lock()
_jobs = {}     # spec key -> _Job
_MAX_SPECS = 4  # jobs whose idle loaders are kept: one per trainer rank in use
# How often the jobs' scattered data is looked for (_reap_ended_jobs).
_REAP_S = 1.0
_reaper = None  # the thread that lets go of ended jobs, started with the first job
# The fork server of every hook process of this worker process, shared by
# the jobs' pools: started when a job first needs it (its warm_hooks task,
# sent as the trainer's Loader starts, has it import torch while the
# trainer starts its own hook processes), stopped when no job is left.
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
    of one range to be equal, as a dict compared whole, and the hooks
    unpickled (None without hooks): the C library's build identity
    (version, commit, libjpeg-turbo, libspng and zlib versions:
    _stoker.build_id), and with hooks (their pickled bytes) the
    environment fingerprint of hooks.env (torch, torchvision, numpy
    versions, the hooks' digest, the CPU capability torch dispatches to)
    and the digest of each module file they run here (_hook_code). Raises
    what unpickling the hooks raises."""
    identity, loaded = {}, None
    if hooks is not None:
        loaded, code = _hook_code.load(hooks)
        identity.update(fingerprint(hashlib.sha256(hooks).hexdigest()[:32]), **code)
    identity["stoker"] = _stoker.build_id  # the build covers the version
    return identity, loaded


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


class _Job:
    """What this worker process keeps of one job: its hooks, loaded and
    checked against the trainer's identity once; the C loaders (and their
    hook pools) idle between its tasks; the hook pool warm_hooks started;
    its tasks running; and the Dask keys of the data the trainer scattered
    for it (the dataset index, the pickled hooks). The scheduler releases
    those when the trainer closes its Loader or its client goes away
    (killed, or lost without closing): the job has ended, and
    _reap_ended_jobs lets go of what it kept here."""

    def __init__(self):
        self.hooks = None     # unpickled, or None without hooks
        self.hooks_data = None  # pickled, what its hook processes load
        self.refusal = None   # why this worker may not serve it, once checked
        self.checked = False
        self.idle = []        # [(C loader, its Outputs or None)], most recently used last
        self.started = None   # the hook Pool warm_hooks started, not used by a task yet
        self.busy = 0         # its tasks running here
        self.keys = ()

    def close(self):
        """Close what it keeps (not in use: busy is 0)."""
        for kept in self.idle:
            _close(kept)
        self.idle = []
        if self.started is not None:
            self.started.close()
            self.started = None


def _job(spec, keys, hooks_data, worker):
    """spec's _Job, busy with the caller's task until it calls _checkin,
    with keys (the Dask keys of its scattered data, separated by spaces:
    Dask would replace a task argument equal to a key with its data) noted
    and, the first
    time, its hooks loaded and its identity checked; raises WorkerMismatch
    when this worker may not serve it (then not busy)."""
    global _reaper
    with _cache_lock:
        job = _jobs.pop(spec["key"], None) or _Job()
        _jobs[spec["key"]] = job  # most recently used last
        job.keys = tuple(keys.split())
        job.busy += 1
        if _reaper is None and worker is not None:
            _reaper = threading.Thread(target=_reap_ended_jobs, args=(worker,),
                                       name="stoker-jobs", daemon=True)
            _reaper.start()
        checked = job.checked
    try:
        if not checked:  # outside the lock: unpickling imports the hooks' modules
            hooks, refusal = _check_identity(spec, hooks_data)
            with _cache_lock:
                job.hooks, job.hooks_data, job.refusal = hooks, hooks_data, refusal
                job.checked = True
        if job.refusal is not None:
            raise WorkerMismatch(job.refusal, _worker_address())
    except BaseException:
        _checkin(job, None)
        raise
    return job


def _check_identity(spec, hooks_data):
    """(the hooks unpickled or None, why this worker differs from the
    trainer or None)."""
    address = _worker_address()
    if hooks_data is not None and hashlib.sha256(hooks_data).hexdigest() != spec["hooks_digest"]:
        raise ValueError(f"the hooks received do not have digest {spec['hooks_digest']}")
    try:
        mine, hooks = build_identity(hooks_data)
    except Exception as e:  # the hooks' modules are missing here, or another version
        return None, (f"worker {address} cannot load the hooks ({type(e).__name__}: {e}): "
                      "install their modules there")
    differ = compare(spec["identity"], mine)
    if differ:
        return None, (f"worker {address} differs from the trainer ({differ}): its batches "
                      "could differ")
    return hooks, None


def _reap_ended_jobs(worker):
    """The stoker-jobs thread: every _REAP_S, close what the jobs whose
    scattered data this worker no longer holds kept here; when no job is
    left, stop the fork server (and so every hook process) too. Nothing
    else would: a trainer that ends, or dies, sends nothing here."""
    while True:
        time.sleep(_REAP_S)
        with _cache_lock:
            ended = [key for key, job in _jobs.items()
                     if job.busy == 0 and not any(k in worker.data for k in job.keys)]
            for key in ended:
                _jobs.pop(key).close()
            if ended and not _jobs:
                _server.close()


def _checkout(spec, job, index_data):
    """(C loader, its hooks.Outputs or None) for spec: one kept
    from an earlier task, else new ones (the hooks' processes with them)."""
    with _cache_lock:
        if job.idle:
            return job.idle.pop()
        pool, job.started = job.started, None
    loader = None
    try:
        options = dict(spec["options"])
        if index_data is not None:
            options["index_path"] = _index_file(spec["index_digest"], index_data)
        threads = _worker_threads()
        loader = _stoker.Loader(spec["urls"], threads=threads, **options)
        if pool is None and job.hooks is not None:
            pool = _new_pool(spec, job)
        return loader, worker_outputs(dict(spec, hook_processes=threads), job.hooks,
                                      loader.info(), pool)
    except BaseException:
        if loader is not None:
            loader.close()
        if pool is not None:
            pool.close()
        raise


def _new_pool(spec, job):
    """The hook processes of a task for spec: one per decode thread, forked
    by this worker process's server."""
    return Pool(job.hooks_data, _worker_threads(), spec["hook_timeout"], server=_server)


def warm_hooks(spec, keys, hooks_data):
    """Dask task, sent by the trainer when it first sees this worker: start
    the hook processes that spec's first task will use (each is forked by
    the fork server, started now if it is not running, which imports torch:
    seconds of a core), while the trainer is starting its own. Nothing when
    they run already or this worker would be refused."""
    try:
        job = _job(spec, keys, hooks_data, _this_worker())
    except WorkerMismatch:  # its first task says so to the trainer
        return
    try:
        with _cache_lock:
            if job.idle or job.started is not None or job.busy > 1:
                return
            job.started = pool = _new_pool(spec, job)
        pool.start()
    finally:
        _checkin(job, None)


def _this_worker():
    try:
        from distributed import get_worker
        return get_worker()
    except (ImportError, ValueError):
        return None


def _close(kept):
    loader, outputs = kept
    loader.close()
    if outputs is not None and outputs.hooked is not None:
        outputs.hooked.pool.close()


def _checkin(job, kept):
    """A task of job is done, with kept (C loader, Outputs) or None."""
    with _cache_lock:
        job.busy -= 1
        if kept is not None:
            job.idle.append(kept)
        old = [key for key in list(_jobs)[:-_MAX_SPECS] if _jobs[key].busy == 0]
        for key in old:  # the least recently used beyond _MAX_SPECS
            _jobs.pop(key).close()


def make_range(spec, keys, index_data, hooks_data, epoch, first, count, canary=False,
               remaining=None):
    """Dask task: batches [first, first + count) of `epoch` for the loader
    described by spec; keys: the Dask keys of index_data and hooks_data
    (_job), the dataset index and the pickled hooks (None without), which the
    trainer scattered to the workers once. Returns the images and labels of
    every batch as two arrays (and the Mixup/CutMix partner labels and
    weights), or with fields= or hooks the batch objects themselves
    ("outputs", and with canary the hooks' canary samples); the sizes and
    bad-input counts per batch, and, when the data was bad under
    on_error="fail" (or a hook failed), the error that ended the range (the
    batches before it are kept, as a local loader delivers them).
    remaining: the ranges of the epoch an elastic resume left and the old
    nodes whose sequences they are of (stoker.Loader), or None."""
    began = time.monotonic()  # the trainer sizes later tasks by it
    job = _job(spec, keys, hooks_data, _this_worker())
    kept = None
    try:
        loader, outputs = kept = _checkout(spec, job, index_data)
        # The epoch's part an elastic resume left (None: all of it), as the
        # trainer's loader has it: a kept loader may have had another.
        loader.set_remainder(epoch, *(remaining or (None,)))
        before = loader.stats()
        if outputs is None:
            result = _arrays(loader, spec, epoch, first, count)
        else:
            result = _objects(loader, outputs, epoch, first, count, canary)
        after = loader.stats()
    finally:
        _checkin(job, kept)
    if _TEST_TASK_DELAY_S:
        time.sleep(_TEST_TASK_DELAY_S)
    result.update(first=first, samples_read=after["samples_read"] - before["samples_read"],
                  bytes_read=after["bytes_read"] - before["bytes_read"],
                  busy_s=time.monotonic() - began, worker=_worker_address())
    return result


def _error(e):
    """(class name, message, its cause's traceback as text or ''): for a
    HookError the hook's own, from its hook process."""
    cause = e.__cause__
    return (type(e).__name__, str(e),
            "".join(traceback.format_exception(cause)) if cause is not None else "")


def _objects(loader, outputs, epoch, first, count, canary):
    """make_range's result with fields= or hooks: each batch's object (and
    with canary, the first call of each hook)."""
    recording = outputs.hooked.pool if outputs.hooked is not None else None
    if recording is not None:
        recording.reset(canary)
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
            "canary": recording.canaries() if recording is not None and canary else None,
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
