"""Decoding on CPU-only hosts through Dask distributed: Loader(cluster=...).

DESIGN. An epoch of one rank is a fixed sequence of batches. A task makes
one range of it, batches [first, first + count), with a stoker loader on a
Dask worker: stk_loader_seek_range gives the bytes an uninterrupted local
run gives there, whichever process makes them, and the bad input each
batch accounts for. The trainer keeps decoding too, with its own C loader,
on ranges it claims itself. Each range is claimed by one side, except that
the trainer takes over a range it is waiting for when the task making it is
late or lost; the first result to arrive is kept and any later one dropped.
The training loop gets ranges in order from a reorder buffer. So training
sees exactly a local run's batches, each once, whatever the workers do.

Dask places, retries and rebalances tasks, and re-runs those of a lost
worker; nothing here talks to a worker except through it. Bounds: at most
`in_flight` tasks are submitted at once, no range more than `lookahead`
ranges past the one being consumed is claimed, and a future is released as
soon as its result is taken, so results never pile up on workers or here.

Threads in the trainer: the training loop (consumer), one thread driving
the local C loader (it waits in C with the GIL released), and Dask's
callback thread, which fetches each finished task's result straight from
its worker (direct=True: not through the scheduler). One condition
variable guards a run's state; nothing blocks while holding it.
"""
import collections
import hashlib
import logging
import os
import tempfile
import threading
import time

import numpy as np

from . import _stoker

log = logging.getLogger("stoker.cluster")

PENDING, LOCAL, CLUSTER, DONE = range(4)
# Ranges of batches made by the local thread that may wait for the loop at
# once: one read while the thread makes the next, and one taken back from a
# late task. The local C loader's max_batches is sized for it.
LOCAL_RANGES = 3

# ---- worker side ----

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
    arrays, the sizes and bad-input counts per batch, and, when the data
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
        sizes, skips, error = [], [], None
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
        "sizes": sizes, "skips": skips, "error": error,
        "images": images[:image_end], "labels": labels[:label_end],
        "samples_read": after["samples_read"] - before["samples_read"],
        "worker": _worker_address(),
    }


# ---- trainer side ----

def batches_per_task(options, requested=None):
    """Batches a task makes. A task that does not continue the previous
    one on its worker reads its first and last shuffle window whole: with
    two windows' worth of samples per task it reads at most twice what it
    delivers, and at least 256 samples (a third of a second of decoding on
    one core) keep Dask's ~1 ms per task negligible."""
    if requested is not None:
        if int(requested) < 1:
            raise ValueError("batches_per_task must be at least 1")
        return int(requested)
    window = options.get("shuffle_buffer", 1000) if options.get("shuffle", 1) else 1
    return max(1, -(-max(2 * window, 256) // options["batch_size"]))


class ClusterError(_stoker.Error, ConnectionError):
    """The Dask scheduler cannot be reached, or the workers refuse the job."""


def _connect(cluster):
    """(client, whether we made it). The connect timeout is Dask's own
    (distributed.comm.timeouts.connect, 30 s unless configured)."""
    from distributed import Client
    if isinstance(cluster, Client):
        return cluster, False
    try:
        return Client(cluster, set_as_default=False), True
    except (OSError, TimeoutError) as e:
        raise ClusterError(f"cannot reach the Dask scheduler at {cluster}: {e}") from None


class Offload:
    """What a Loader with cluster= keeps across epochs: the Dask client, the
    job description sent with every task, the dataset index (scattered to
    the workers once) and the counters."""

    def __init__(self, cluster, urls, options, index_path, image_bytes, batches_per_task):
        self.client, self._owns_client = _connect(cluster)
        self.image_bytes = image_bytes
        with open(index_path, "rb") as f:
            index_data = f.read()
        digest = hashlib.sha256(index_data).hexdigest()[:32]
        batch_size = options["batch_size"]
        self.batches_per_task = batches_per_task
        worker_options = {k: v for k, v in options.items() if k != "threads"}
        worker_options["max_batches"] = 2
        key = hashlib.sha256(repr((urls, sorted(worker_options.items()), digest)).encode())
        self.spec = {
            "key": key.hexdigest()[:32], "version": _stoker.version, "urls": list(urls),
            "options": worker_options, "index_digest": digest,
            "batch_bytes": image_bytes * batch_size, "batch_size": batch_size,
        }
        self.index = self.client.scatter(index_data, broadcast=True, hash=False)
        self.tag = key.hexdigest()[:8]
        self.counters = dict(
            batches_cluster=0, batches_local=0, tasks_submitted=0, tasks_done=0,
            tasks_failed=0, tasks_dropped=0, ranges_taken_back=0, samples_read_cluster=0,
            bytes_received=0, cluster_wait_ns=0, local_wait_ns=0, samples_skipped=0,
            images_replaced=0, shards_failed=0, samples=0, samples_read_local=0,
            samples_cluster=0, samples_local=0,
            first_batch_ns=0)
        self.per_worker = {}  # worker address -> batches it made that were used
        self.lock = threading.Lock()  # counters and per_worker
        self.warned = set()
        self._workers, self._workers_at = 0, -1.0
        self.started_ns = 0  # when the loop first asked for a batch

    def add(self, **deltas):
        with self.lock:
            for k, v in deltas.items():
                self.counters[k] += v

    def add_worker(self, address, batches):
        with self.lock:
            self.per_worker[address] = self.per_worker.get(address, 0) + batches

    def warn_once(self, what, message):
        if what not in self.warned:
            self.warned.add(what)
            log.warning("%s", message)

    def workers(self):
        """Worker threads the scheduler knows of. Client.scheduler_info() is a
        round trip to the scheduler, so the count is refreshed at most once a
        second."""
        now = time.monotonic()
        if now - self._workers_at >= 1.0:
            self._workers_at = now
            try:
                info = self.client.scheduler_info()
                self._workers = sum(w.get("nthreads", 1) for w in info.get("workers", {}).values())
            except Exception:  # the client lost its scheduler
                self._workers = 0
        return self._workers

    def usable(self):
        return self.client.status == "running"

    def close(self):
        if self._owns_client:
            self.client.close()


class _Result:
    """What the loop reads of one range: batches (images, labels, skips) in
    order, streamed as the local loader makes them or all at once from a
    task, then done, perhaps with the error that ended the range."""

    def __init__(self, source):
        self.source = source  # "local" or "cluster"
        self.batches = collections.deque()
        self.done = False
        self.error = None
        self.taken = 0        # batches the loop has read


class Run:
    """One iteration over batches [first, n) of an epoch: claims, the
    reorder buffer, the local thread and the tasks in flight. tensors(images,
    labels, n) makes the training loop's tensors out of two buffers."""

    def __init__(self, offload, c_loader, epoch, first, n, tensors):
        self.o = offload
        self.c = c_loader
        self.tensors = tensors
        self.epoch = epoch
        m = offload.batches_per_task
        self.ranges = [(b, min(b + m, n)) for b in range(first, n, m)]
        self.state = [PENDING] * len(self.ranges)
        self.results = {}   # range -> _Result
        self.futures = {}   # range -> (future, submit time)
        self.last_local = None
        self.local_range = None  # the range the local thread is making
        self.front = 0      # range the loop reads
        self.waiting = False
        self.closing = False
        self.turnaround = None  # running mean of a task's time from submission to result
        self.local_batch_s = None  # running mean of the local thread's time per batch
        self.cond = threading.Condition()
        self.local = threading.Thread(target=self._local_main, name="stoker-local", daemon=True)

    # -- claims (called with cond held) --

    def _limits(self):
        """(tasks in flight, ranges claimed ahead of the loop)."""
        # Two tasks per worker thread: one running, one queued behind it.
        # Ahead of them, room for the local thread to work on without
        # waiting for the loop to catch up with the cluster.
        in_flight = 2 * self.o.workers() if self.o.usable() else 0
        return in_flight, in_flight + 3

    def _submit_more(self):
        in_flight, lookahead = self._limits()
        for r in range(self.front, min(len(self.ranges), self.front + lookahead)):
            if len(self.futures) >= in_flight:
                return
            # The range after the local thread's is left to it: its pipeline
            # continues there without reading anything again.
            if self.state[r] != PENDING or (self.local_range is not None and
                                            r == self.local_range + 1):
                continue
            first, end = self.ranges[r]
            key = f"stoker-{self.o.tag}-e{self.epoch}-b{first}-{os.urandom(4).hex()}"
            try:
                fut = self.o.client.submit(make_range, self.o.spec, self.o.index, self.epoch,
                                           first, end - first, key=key, pure=False)
            except Exception as e:  # the client is closed or lost its scheduler
                self.o.warn_once("submit", f"stoker: cannot submit to the Dask cluster ({e}); "
                                 "decoding locally")
                return
            self.state[r] = CLUSTER
            self.futures[r] = (fut, time.monotonic())
            self.o.add(tasks_submitted=1)
            fut.add_done_callback(lambda f, r=r: self._on_done(r, f))

    def _late(self, r):
        """Why the task making range r shows no sign of finishing soon, or
        None: the cluster is gone or has no worker, or the task has taken
        far longer than tasks take (its worker may have died unnoticed)."""
        if not self.o.usable():
            return "the Dask scheduler is unreachable"
        if self.o.workers() == 0:
            return "the Dask cluster has no worker"
        age = time.monotonic() - self.futures[r][1]
        if age > 2 * (self.turnaround or 5.0) + 1.0:
            return f"its task has run for {age:.1f} s"
        return None

    def _sooner_here(self, r):
        """The local thread would make range r before its task is expected
        back (a slow or overloaded worker): a reason, or None."""
        if self.local_batch_s is None or self.turnaround is None or r not in self.futures:
            return None
        first, end = self.ranges[r]
        here = self.local_batch_s * (end - first)
        there = self.futures[r][1] + self.turnaround - time.monotonic()
        return f"made here in {here:.1f} s, due from the cluster in {there:.1f} s" \
            if here < there else None

    def _pick_local(self):
        """(range, reason it is taken back from a task or None), or None."""
        if self.front < len(self.ranges) and self.state[self.front] == PENDING:
            return self.front, None  # first the batches the loop needs next
        front_waits = self.front < len(self.ranges) and self.state[self.front] == CLUSTER \
            and self.waiting
        why = self._late(self.front) if front_waits else None
        if why is not None:
            return self.front, why
        held = sum(len(res.batches) for res in self.results.values() if res.source == "local")
        if held > self.o.batches_per_task:
            return None  # wait for the loop (LOCAL_RANGES)
        _, lookahead = self._limits()
        end = min(len(self.ranges), self.front + lookahead)
        # The range after the previous one continues its pipeline: nothing
        # is read again.
        if self.last_local is not None:
            nxt = self.last_local + 1
            if self.front <= nxt < end and self.state[nxt] == PENDING:
                return nxt, None
        for r in range(self.front, end):
            if self.state[r] == PENDING:
                return r, None
        # Nothing left to claim: rather than idle, make the range the loop
        # waits for if that is quicker than waiting for its task.
        why = self._sooner_here(self.front) if front_waits else None
        return (self.front, why) if why is not None else None

    # -- the local thread --

    def _local_main(self):
        while True:
            with self.cond:
                pick = None
                while not self.closing and pick is None:
                    pick = self._pick_local()
                    if pick is None:
                        self.cond.wait(0.05)
                if self.closing:
                    return
                r, why = pick
                if self.state[r] == CLUSTER:
                    self.o.add(ranges_taken_back=1)
                    if why.startswith("the Dask"):
                        self.o.warn_once(why, f"stoker: {why}; decoding batches here until "
                                         "it is back")
                    else:
                        log.info("stoker: decoding batches %d.. of epoch %d here: %s",
                                 self.ranges[r][0], self.epoch, why)
                self.state[r] = LOCAL
                self.local_range = r
                result = self.results[r] = _Result("local")
                self.cond.notify_all()
            self._make_local(r, result)
            with self.cond:
                self.last_local, self.local_range = r, None
                if self.results.get(r) is result:
                    self.state[r] = DONE
                self.cond.notify_all()

    def _make_local(self, r, result):
        first, end = self.ranges[r]
        read = self.c.stats()["samples_read"]
        started = time.monotonic()
        try:
            self.c.seek_range(self.epoch, first, end - first)
            while True:
                b = self.c.next()
                if b is None:
                    break
                images, labels = self.tensors(b.images, b.labels, b.size)
                with self.cond:
                    if self.closing or self.results.get(r) is not result:
                        break  # stopped, or a task's result replaced this one
                    result.batches.append((images, labels, b.skips))
                    self.cond.notify_all()
                del b, images, labels
        except _stoker.Error as e:
            with self.cond:
                result.error = e
        finally:
            self.o.add(samples_read_local=self.c.stats()["samples_read"] - read)
            with self.cond:
                result.done = True
                if result.batches or result.taken:
                    per_batch = (time.monotonic() - started) / (len(result.batches) + result.taken)
                    self.local_batch_s = per_batch if self.local_batch_s is None else \
                        0.8 * self.local_batch_s + 0.2 * per_batch
                self.cond.notify_all()

    # -- cluster results (Dask's callback thread) --

    def _on_done(self, r, fut):
        result = failure = None
        try:
            result = self.o.client.gather(fut, direct=True)  # not through the scheduler
        except Exception as e:  # lost, cancelled, or the worker refused
            failure = e
        try:
            fut.release()
        except Exception:  # the client is gone
            pass
        with self.cond:
            submitted = None
            if self.futures.get(r, (None,))[0] is fut:
                submitted = self.futures.pop(r)[1]
            if self.closing:
                return
            if result is not None:
                self._take_task_result(r, result, submitted or time.monotonic())
            else:
                self.o.add(tasks_failed=1)
                if isinstance(failure, WorkerMismatch):
                    refused = self.results[r] = _Result("cluster")
                    refused.done, refused.error = True, ClusterError(str(failure))
                    self.state[r] = DONE
                elif self.state[r] == CLUSTER:
                    self.state[r] = PENDING
                    self.o.warn_once("failed", f"stoker: a Dask task failed ({failure!r}); its "
                                     "batches are made again")
            self._submit_more()
            self.cond.notify_all()

    def _take_task_result(self, r, result, submitted):
        s = time.monotonic() - submitted
        self.turnaround = s if self.turnaround is None else 0.8 * self.turnaround + 0.2 * s
        self.o.add(tasks_done=1, samples_read_cluster=result["samples_read"],
                   bytes_received=result["images"].nbytes + result["labels"].nbytes)
        self.o.add_worker(result["worker"], len(result["sizes"]))
        current = self.results.get(r)
        if current is not None and (current.taken > 0 or current.done):
            self.o.add(tasks_dropped=1)  # made here first
            return
        # Taken back but not read yet: the task's result replaces the local
        # one, whose thread stops at its next batch.
        out = self.results[r] = _Result("cluster")
        images, labels = result["images"], result["labels"]
        i = j = 0
        for n, skips in zip(result["sizes"], result["skips"]):
            size = n * self.o.image_bytes
            out.batches.append(self.tensors(images[i:i + size], labels[j:j + n], n) + (skips,))
            i += size
            j += n
        if result["error"] is not None:
            name, message = result["error"]
            out.error = getattr(_stoker, name, _stoker.Error)(message)
        out.done = True
        self.state[r] = DONE

    # -- the consumer --

    def batches(self):
        """Yield (images, labels) of every range in order; raise a range's
        error after its batches, as a local loader does."""
        started = time.perf_counter_ns()
        if not self.o.started_ns:
            self.o.started_ns = started
        if not self.ranges:
            return
        self.local.start()
        with self.cond:  # the local thread claims range 0 before any task is submitted
            while self.state[0] == PENDING:
                self.cond.wait(0.05)
        try:
            for r in range(len(self.ranges)):
                while True:
                    with self.cond:
                        self.front = r
                        self._submit_more()
                        self.cond.notify_all()
                        t0 = time.perf_counter_ns()
                        self.waiting = True
                        while (r not in self.results or
                               not (self.results[r].batches or self.results[r].done)):
                            self.cond.wait(0.05)
                        self.waiting = False
                        result = self.results[r]
                        self.o.add(**{result.source + "_wait_ns": time.perf_counter_ns() - t0})
                        if not result.batches:
                            break
                        images, labels, skips = result.batches.popleft()
                        result.taken += 1
                    self.o.add(samples=len(labels), samples_skipped=skips[0],
                               images_replaced=skips[1], shards_failed=skips[2],
                               **{"batches_" + result.source: 1,
                                  "samples_" + result.source: len(labels)})
                    if not self.o.counters["first_batch_ns"]:
                        self.o.add(first_batch_ns=time.perf_counter_ns() - started)
                    yield images, labels
                    del images, labels
                with self.cond:
                    del self.results[r]
                if result.error is not None:
                    raise result.error
        finally:
            self.close()

    def close(self):
        with self.cond:
            self.closing = True
            futures = [f for f, _ in self.futures.values()]
            self.futures.clear()
            self.results.clear()
            self.cond.notify_all()
        if futures:
            try:
                self.o.client.cancel(futures)
            except Exception:  # the client is gone already
                pass
        if self.local.is_alive():
            self.local.join()


def merge_stats(stats, offload):
    """stats() of a Loader with cluster=: whole-run counts over every batch
    delivered, and where they came from."""
    with offload.lock:
        c = dict(offload.counters)
    for key in ("samples", "samples_skipped", "images_replaced", "shards_failed"):
        stats[key] = c[key]
    stats["batches"] = c["batches_cluster"] + c["batches_local"]
    stats["wait_ns"] = c["cluster_wait_ns"] + c["local_wait_ns"]
    stats["wall_ns"] = time.perf_counter_ns() - offload.started_ns if offload.started_ns else 0
    read = c["samples_read_cluster"] + c["samples_read_local"]
    c["samples_read"] = read
    c["read_per_sample"] = read / c["samples"] if c["samples"] else 0.0
    c["bytes_per_image"] = c["bytes_received"] / c["samples_cluster"] if c["samples_cluster"] else 0
    c["workers"] = offload.workers()
    c["batches_per_task"] = offload.batches_per_task
    stats["cluster"] = c


def report(stats):
    """Loader.report() with cluster=: the input-bound report (the stages
    are this process's), then where the batches came from and what the loop
    waited for."""
    c = stats["cluster"]
    total = c["batches_cluster"] + c["batches_local"]
    share = 100.0 * c["batches_cluster"] / total if total else 0.0
    wall = stats["wall_ns"] or 1
    lines = [
        f"cluster: {c['batches_cluster']} of {total} batches ({share:.0f}%) came from "
        f"{c['workers']} Dask worker thread(s), {c['batches_local']} were decoded here",
        f"waiting: {c['cluster_wait_ns'] / 1e9:.2f} s for cluster batches, "
        f"{c['local_wait_ns'] / 1e9:.2f} s for local ones "
        f"({100.0 * stats['wait_ns'] / wall:.1f}% of the time since the first batch)",
        f"tasks: {c['tasks_done']} done of {c['tasks_submitted']} submitted, "
        f"{c['tasks_failed']} failed or lost, {c['tasks_dropped']} results dropped as "
        f"duplicates, {c['ranges_taken_back']} ranges taken back from late tasks",
        f"reading: {c['read_per_sample']:.2f} samples read per sample delivered; "
        f"{c['bytes_received'] / 1e6:.0f} MB received from workers",
    ]
    return _stoker.report(stats) + "\n".join(lines) + "\n"
