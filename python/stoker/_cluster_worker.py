"""The part of Loader(cluster=...) that runs inside Dask worker processes:
make_range, the task that makes a run of batches with a stoker loader kept
per worker process (_cluster.py has the design)."""
import os
import tempfile
import threading
import time

import numpy as np

from . import _stoker

_cache_lock = threading.Lock()
_idle = {}     # spec key -> [C loaders not in use], most recently used last
_MAX_SPECS = 4  # loaders kept per worker process: one per trainer rank in use
# For the tests only: every task takes this much longer, so that a test can
# kill a worker while it holds tasks.
_TEST_TASK_DELAY_S = int(os.environ.get("STOKER_TEST_TASK_DELAY_MS", "0")) / 1000


class WorkerMismatch(RuntimeError):
    """A worker runs another stoker version than the trainer."""


def _read(path):
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return None


def _cpu_quota(root="/sys/fs/cgroup"):
    """CPUs the cgroup quota allows (a container's CPU limit), or None: the
    affinity mask of a pod limited to 32 CPUs still lists all the host's."""
    v2 = _read(os.path.join(root, "cpu.max"))  # "QUOTA PERIOD" or "max PERIOD"
    v1 = [_read(os.path.join(root, "cpu", name)) for name in ("cpu.cfs_quota_us",
                                                              "cpu.cfs_period_us")]
    quota, period = v2 if v2 else (v1[0][0], v1[1][0]) if all(v1) else (None, None)
    if quota is None or quota in ("max", "-1"):
        return None
    return max(1, -(-int(quota) // int(period)))


def _worker_threads():
    """Decode threads of a task: $STOKER_WORKER_THREADS, else the cores this
    worker process may use shared among the tasks it runs at once."""
    if os.environ.get("STOKER_WORKER_THREADS"):
        return int(os.environ["STOKER_WORKER_THREADS"])
    cores = len(os.sched_getaffinity(0))
    quota = _cpu_quota()
    if quota is not None:
        cores = min(cores, quota)
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


def _index_file(digest, data):
    """The dataset index as a file on this host, written once per digest."""
    path = os.path.join(tempfile.gettempdir(), f"stoker-index-{os.getuid()}-{digest}.json")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".stoker-index-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return path


def _checkout(spec, index_data):
    with _cache_lock:
        loaders = _idle.get(spec["key"])
        if loaders:
            return loaders.pop()
    options = dict(spec["options"])
    if index_data is not None:
        options["index_path"] = _index_file(spec["index_digest"], index_data)
    return _stoker.Loader(spec["urls"], threads=_worker_threads(), **options)


def _checkin(spec, loader):
    with _cache_lock:
        _idle.setdefault(spec["key"], []).append(loader)
        _idle[spec["key"]] = _idle.pop(spec["key"])  # most recently used last
        while len(_idle) > _MAX_SPECS:
            for old in _idle.pop(next(iter(_idle))):
                old.close()


def make_range(spec, index_data, epoch, first, count):
    """Dask task: batches [first, first + count) of `epoch` for the loader
    described by spec. Returns the images and labels of every batch as two
    arrays (and the Mixup/CutMix partner labels and weights), the sizes and
    bad-input counts per batch, and, when the data
    was bad under on_error="fail", the error that ended the range (the
    batches before it are kept, as a local loader delivers them)."""
    if spec["version"] != _stoker.version:
        raise WorkerMismatch(f"worker {_worker_address()} runs stoker {_stoker.version} and the "
                             f"trainer {spec['version']}: their batches could differ")
    loader = _checkout(spec, index_data)
    try:
        before = loader.stats()
        loader.seek_range(epoch, first, count)
        images = np.empty(count * spec["batch_bytes"], np.uint8)
        labels = np.empty(count * spec["batch_size"], np.int64)
        partners = np.empty(count * spec["batch_size"], np.int64)  # Mixup/CutMix
        sizes, skips, weights, error = [], [], [], None
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
                sizes.append(n)
                skips.append(b.skips)
                del b, data
        except _stoker.Error as e:
            error = (type(e).__name__, str(e))
        after = loader.stats()
    finally:
        _checkin(spec, loader)
    if _TEST_TASK_DELAY_S:
        time.sleep(_TEST_TASK_DELAY_S)
    return {
        "first": first, "sizes": sizes, "skips": skips, "error": error,
        "images": images[:image_end], "labels": labels[:label_end],
        "mix_labels": partners[:label_end], "mix_weights": weights,
        "samples_read": after["samples_read"] - before["samples_read"],
        "worker": _worker_address(),
    }

