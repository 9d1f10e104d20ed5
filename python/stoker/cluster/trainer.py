# SPDX-License-Identifier: MIT
"""Decoding on CPU-only hosts through Dask distributed: Loader(cluster=...).

DESIGN. An epoch of one rank is a fixed sequence of batches. A task makes
a run of it, batches [first, first + count), with a stoker loader on a Dask
worker: stk_loader_seek_range gives the bytes an uninterrupted local run
gives there, whichever process makes them, and the bad input each batch
accounts for. The epoch is cut into ranges (sized as they are claimed,
from the epoch's length, the re-read cost and the measured speeds:
claims.TaskSizes; or batches_per_task each), and each range is claimed
by one side: the cluster, which makes it as a few
chunk tasks pinned to one worker (each continues the previous one's
pipeline there), or the trainer's own C loader. The trainer takes a range
back when the loop waits for it and the cluster is late, lost, or slower
than doing it here. Batches are kept by index, the first made of each;
the training loop reads them in order. So training sees exactly a local
run's batches, each once, whatever the workers do.

Dask places, retries and rebalances tasks, and re-runs those of a lost
worker; nothing here talks to a worker except through it. Bounds: at most
two ranges per worker thread are submitted at once, none more than three
ranges past them is claimed, and a future is released as soon as its
result is taken, so results never pile up on workers or here.

Threads in the trainer: the training loop (consumer), one thread driving
the local C loader (it waits in C with the GIL released), and Dask's
callback thread, which fetches each finished task's result straight from
its worker (direct=True: the data does not pass through the scheduler).
One condition variable guards a run's state; nothing blocks while holding
it: no call under it waits for the scheduler (submit and release only queue
a message on the client's event loop).

The scheduler. Every round trip to it has a time limit (SCHEDULER_TIMEOUT_S)
and none is made under a Run's lock: one thread per Offload
("stoker-scheduler") asks it for its workers once a second and keeps the
answer; the claims read that copy. A scheduler that has not answered for
SCHEDULER_TIMEOUT_S (paused, overloaded, behind a partition that sends no
reset) is treated as a dead one: nothing is submitted, the local thread
takes back what was in flight, and a warning says so once. close() does
not wait for it either.

Files: this one is the trainer's side (the client, the tasks, the local
thread, the counters); claims.py decides which side makes which range,
with no threads and no Dask; worker.py is what runs inside the
Dask workers.
"""
import hashlib
import logging
import os
import threading
import time
import weakref

import numpy as np

from .._ext import _stoker
from .claims import PENDING, Claims, TaskSizes
from ..hooks.pool import HookError, RemoteTraceback
from .hooks import Canary, digest as object_digest, nbytes as object_nbytes
from ..base.fields import mix_of
from .worker import (WorkerMismatch, batch_digest, build_identity, make_range,
                              warm_hooks)

log = logging.getLogger("stoker.cluster")

# The longest any call to the scheduler may take; one that has not answered
# for this long is treated as gone until it answers again.
SCHEDULER_TIMEOUT_S = 5.0
# How often the scheduler is asked for its workers.
POLL_S = 1.0
# Fetching one task's result (at most CHUNK_BYTES) from its worker; the
# client asks the scheduler where the result is first.
GATHER_TIMEOUT_S = 60.0

# A worker whose tasks fail this many times in a row (raise, or time out)
# is refused: its ranges would otherwise be submitted again and again, as
# fast as they fail.
MAX_FAILED_TASKS = 3

# Above this many samples read per sample delivered, report() says how to
# read less.
READ_AMPLIFICATION_ADVICE = 1.2

# Ranges of batches made by the local thread that may wait for the loop at
# once: one read while the thread makes the next, and one taken back from a
# late task. The local C loader's max_batches is sized for it.
LOCAL_RANGES = 3


_DEFAULTS = {o["name"]: o["default"] for o in _stoker.options()}


def is_auto(requested):
    """Whether batches_per_task is left to stoker (None or "auto")."""
    return requested is None or requested == "auto"


def batches_per_task(options, requested=None):
    """The most batches a task makes: requested, or when it is left to
    stoker (each range then sized by _claims.TaskSizes) two shuffle
    windows' worth and at least 256 samples: a range read from scratch
    then reads at most twice what it delivers. The local C loader's
    buffers are sized for it."""
    if not is_auto(requested):
        # int() took 2.5 as 2 and failed on nan without naming the option.
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise _stoker.OptionError("batches_per_task must be an int >= 1 or \"auto\", "
                                      f"not {requested!r}")
        return requested
    window = _reach(options) or 1
    return max(1, -(-max(2 * window, 256) // options["batch_size"]))


def _reach(options):
    """The shuffle's reach in samples (0 without a shuffle)."""
    if not options.get("shuffle", 1):
        return 0
    return int(options.get("shuffle_buffer", _DEFAULTS["shuffle_buffer"]))


def _reread(options):
    """Samples a range read from scratch is expected to read beyond its
    own before any is measured: the reach it fills first under the
    sliding window, about none in the global order (an index over local
    shards reads by offset); measured from the first tasks on."""
    window = options.get("window_shuffle", int(_DEFAULTS["window_shuffle"]))
    return _reach(options) if window else 0


class ClusterError(_stoker.Error, ConnectionError):
    """The Dask scheduler cannot be reached, or the workers refuse the job."""

    # Like a shard that cannot be read (STK_EIO), input is out of reach: the
    # code of stoker.ReadError, from the C table rather than a copy of it.
    code = _stoker.ReadError.code


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
    job description sent with every task, the dataset index and the pickled
    hooks (scattered to the workers once: a task refers to them, so a hook
    that holds a large object does not travel through the scheduler with
    every task), the workers refused and the counters. fields: the names of
    Loader(fields=), or None; hook_pool: the trainer's hook processes
    (_hooks.Pool) with map= and batch_map=, or None: the workers run the
    same pickled hooks in hook processes of their own, and these check
    each worker's canary samples; raw_labels:
    with transform=None, the label members (map= gets the undecoded image);
    map_shape: as Loader's."""

    def __init__(self, cluster, urls, options, index_path, image_bytes, batches_per_task,
                 fields=None, hook_pool=None, raw_labels=None, map_shape=None, auto=False):
        self.client, self._owns_client = _connect(cluster)
        hooks = None if hook_pool is None else hook_pool.hooks_bytes
        self.image_bytes = image_bytes
        with open(index_path, "rb") as f:
            index_data = f.read()
        digest = hashlib.sha256(index_data).hexdigest()[:32]
        batch_size = options["batch_size"]
        self.batches_per_task = batches_per_task
        # With auto: range sizes from the measured speeds, kept across epochs.
        self.sizes = TaskSizes(batch_size, batches_per_task, _reread(options)) if auto else None
        worker_options = {k: v for k, v in options.items() if k != "threads"}
        # Hooks keep two batches in flight (hooks.batches), each holding a
        # C buffer while its samples are in the hook processes.
        worker_options["max_batches"] = 2 if hooks is None else 3
        fields = None if fields is None else tuple(fields)
        hooks_digest = None if hooks is None else hashlib.sha256(hooks).hexdigest()
        key = hashlib.sha256(repr((urls, sorted(worker_options.items()), digest, fields,
                                   hooks_digest)).encode())
        identity, loaded = build_identity(hooks)
        self.spec = {
            "key": key.hexdigest()[:32], "identity": identity, "urls": list(urls),
            "options": worker_options, "index_digest": digest,
            "batch_bytes": image_bytes * batch_size, "batch_size": batch_size,
            "fields": fields, "hooks_digest": hooks_digest,
            "hook_timeout": hook_pool and hook_pool.timeout,
            "raw_labels": raw_labels, "map_shape": map_shape,
        }
        # Workers whose canary samples passed for every hook (and the hooks
        # checked so far of the others), and those refused: address -> why.
        self.canary = None if hooks is None else Canary(hook_pool)
        self._hook_names = frozenset(loaded or ())
        self.verified, self._canaries_passed, self.refused = set(), {}, {}
        self._warmed = set()  # workers sent warm_hooks
        self._failed_in_a_row = {}  # worker address -> its tasks failed since its last success
        self._shared_data = [index_data] + ([] if hooks is None else [hooks])
        self._shared = None  # their futures on the workers, scattered when there are some
        self._scattering, self._scatter_after = False, 0.0
        self.tag = key.hexdigest()[:8]
        self.counters = dict(
            batches_cluster=0, batches_local=0, tasks_submitted=0, tasks_done=0,
            tasks_failed=0, tasks_dropped=0, ranges_taken_back=0, samples_read_cluster=0,
            bytes_read_cluster=0, ranges_cluster=0,
            bytes_received=0, cluster_wait_ns=0, local_wait_ns=0, samples_skipped=0,
            images_replaced=0, shards_failed=0, samples=0,
            hook_samples_skipped=0, hook_restarts_cluster=0,
            samples_cluster=0, samples_local=0,
            first_batch_ns=0)
        self.per_worker = {}  # worker address -> batches it made that were used
        self.lock = threading.Lock()  # counters, per_worker and the index's scatter state
        self.warned = set()
        self.started_ns = 0  # when the loop first asked for a batch
        # What the scheduler said last (under lock): worker address ->
        # threads, and when it answered (connecting was an answer).
        self._worker_threads, self._answered_at = {}, time.monotonic()
        self._stop = threading.Event()
        # The thread holds the Offload weakly: a Loader dropped without
        # close() is still collected, and the thread then ends.
        threading.Thread(target=_poll_scheduler, args=(weakref.ref(self), self._stop),
                         name="stoker-scheduler", daemon=True).start()

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

    def ask_scheduler(self):
        """Ask the scheduler for its workers (stoker-scheduler thread)."""
        if self.client.status != "running":
            return  # closed, or reconnecting by itself
        try:
            # Address -> threads of the running workers: the scheduler's
            # cheapest answer (identity() would describe each worker whole,
            # a tenth of a second of the scheduler's core per ask).
            workers = self.client.sync(self.client.scheduler.ncores_running,
                                       callback_timeout=SCHEDULER_TIMEOUT_S)
        except Exception as e:  # no answer in time, or the connection is gone
            if time.monotonic() - self._answered_at >= SCHEDULER_TIMEOUT_S:
                self.warn_once("scheduler", "stoker: the Dask scheduler has not answered for "
                               f"{SCHEDULER_TIMEOUT_S:.0f} s ({e!r}); decoding batches here "
                               "until it does")
            return
        with self.lock:
            self._worker_threads, self._answered_at = workers, time.monotonic()
        if self.canary is not None:
            shared = self.shared()  # the hooks reach the workers first (then _scatter warms)
            if shared is not None:
                self._warm(shared)

    def _warm(self, shared):
        """Have each new worker start the hook processes of this job now
        (warm_hooks): their interpreters start while the trainer starts its
        own, not when the worker's first task comes. Nothing waits for it."""
        keys, _, hooks = shared
        with self.lock:  # the stoker-scheduler and stoker-scatter threads both call it
            addresses = [w for w in self._worker_threads if w not in self._warmed]
            self._warmed.update(addresses)
        for address in addresses:
            try:
                fut = self.client.submit(warm_hooks, self.spec, keys, hooks,
                                         key=f"stoker-{self.tag}-warm-{os.urandom(4).hex()}",
                                         pure=False, workers=[address],
                                         allow_other_workers=False, priority=1)
            except Exception:  # the client is closing or lost its scheduler
                return
            fut.add_done_callback(lambda f: f.release())

    def workers(self):
        """Threads of the workers not refused that the scheduler knew of
        when it last answered (0 while it does not answer)."""
        if not self.usable():
            return 0
        return sum(n for w, n in self._worker_threads.items() if w not in self.refused)

    def worker_addresses(self):
        return [w for w in self._worker_threads if w not in self.refused] if self.usable() else []

    def refuse(self, address, why):
        """Submit nothing more to the worker at address, and say why once."""
        with self.lock:
            new = address not in self.refused
            self.refused[address] = why
        if new:
            log.warning("stoker: Dask worker %s refused: %s; its batches are made by the other "
                        "workers or here", address, why)

    def task_ended(self, address, failure=None):
        """A task submitted to the worker at address gave a result (failure
        None) or failed with the exception failure: refuse the worker when
        its last MAX_FAILED_TASKS tasks all failed."""
        with self.lock:
            n = self._failed_in_a_row[address] = \
                0 if failure is None else self._failed_in_a_row.get(address, 0) + 1
        if n >= MAX_FAILED_TASKS:
            self.refuse(address, f"its last {n} tasks failed (the last with {failure!r})")

    def wants_canary(self):
        """Whether tasks should bring canary samples: some worker neither
        refused nor verified has not passed them for every hook yet."""
        if self.canary is None:
            return False
        with self.lock:
            return any(w not in self.verified and w not in self.refused
                       for w in self._worker_threads)

    def check_canary(self, result):
        """Whether the batches of a result made with hooks may be used: its
        worker's canary samples passed already for every hook, or pass now
        (then the worker is refused when one fails)."""
        worker = result["worker"]
        if self.canary is None or worker in self.verified or not result["outputs"]:
            return True  # (no batch: only the error that ended the range, raised as here)
        canaries = result.get("canary")
        if canaries is None:  # not asked for: it was verified, or the task went elsewhere
            return False
        why = self.canary.check(canaries)
        if why:
            self.refuse(worker, f"its canary sample differs from the trainer's: {why}")
            return False
        with self.lock:
            passed = self._canaries_passed.setdefault(worker, set())
            passed.update(c["which"] for c in canaries)
            if passed >= self._hook_names:
                self.verified.add(worker)
        return True

    def shared(self):
        """(their keys (one string: cluster.worker._job says why), the
        dataset index, the pickled hooks or None) as futures held by the
        workers, or None while they are being (re)sent.
        They are scattered to every worker when first needed, and again when
        the workers that held them are all gone (workers that join later
        fetch them from the others). Scattering waits for a worker, so it
        runs on a thread of its own, never under a Run's lock."""
        with self.lock:
            futures = self._shared
            if futures is not None and all(f.status == "finished" for f in futures):
                return _shared(futures)
            if self._scattering or self._stop.is_set() or \
                    time.monotonic() < self._scatter_after:
                return None
            self._scattering = True
        threading.Thread(target=self._scatter, name="stoker-scatter", daemon=True).start()
        return None

    def _scatter(self):
        try:
            futures = self.client.scatter(self._shared_data, broadcast=True, hash=False,
                                          timeout=10)
        except Exception:  # no worker, or the scheduler is gone: try again later
            futures = None
        with self.lock:
            closed = self._stop.is_set()  # close() ran meanwhile: nothing may keep the job
            self._shared, self._scattering = None if closed else futures, False
            if futures is None:
                self._scatter_after = time.monotonic() + 2.0
                return
        if closed:
            _release(futures)
        elif self.canary is not None:  # now, not at the next poll of the scheduler
            self._warm(_shared(futures))

    def usable(self):
        """The client is connected and the scheduler answered lately."""
        with self.lock:
            answered = self._answered_at
        return (self.client.status == "running" and
                time.monotonic() - answered < SCHEDULER_TIMEOUT_S)

    def close(self):
        """Stop asking the scheduler; let go of the data scattered to the
        workers (releasing it ends the job there: cluster.worker lets go
        of its loaders and hook processes); close the client if it is ours,
        in at most SCHEDULER_TIMEOUT_S whatever the scheduler does."""
        with self.lock:
            self._stop.set()
            futures, self._shared = self._shared or [], None
        _release(futures)
        if self._owns_client:
            try:
                self.client.close(timeout=SCHEDULER_TIMEOUT_S)
            except Exception:  # timed out: the scheduler does not answer
                pass


def _shared(futures):
    """Offload.shared()'s answer for the scattered futures."""
    return " ".join(f.key for f in futures), futures[0], futures[1] if len(futures) > 1 else None


def _release(futures):
    """Let go of futures (Run._drop_chunks says why release())."""
    for future in futures:
        try:  # queues a message; does not wait for the scheduler
            future.release()
        except Exception:  # the client is gone
            pass


def _poll_scheduler(offload_ref, stop):
    """The stoker-scheduler thread: the workers, once a second, each ask
    bounded by SCHEDULER_TIMEOUT_S, until close() or the Offload is gone."""
    while not stop.is_set():
        offload = offload_ref()
        if offload is None:
            return
        offload.ask_scheduler()
        del offload
        stop.wait(POLL_S)


# A task's result crosses the network as one message, which Dask receives
# into one new buffer: glibc serves buffers up to 32 MiB from memory it
# reuses, larger ones from fresh pages the kernel zeroes (measured here:
# 0.77 CPU-s per GB received in 154 MB messages, 0.35 in 29 MB ones). So a
# range goes to its worker as tasks ("chunks") of at most this much.
CHUNK_BYTES = 30 << 20


class BadResult(ValueError):
    """A task's result does not have the structure of what it was asked for."""


def check_result(result, first, count, batch_size, image_bytes, n):
    """Raise BadResult unless result is make_range's answer for batches
    [first, first + count) of an epoch of n batches: at most count batches,
    each of 1..batch_size samples (fewer only in the epoch's last batch),
    image and label arrays of exactly the bytes the sizes say, labels of -1
    or more, and each batch's bytes matching the digest the worker took
    from its loader (cluster.worker.batch_digest says what that catches).
    With fields= or hooks, one object per batch instead of the arrays, each
    matching its digest (cluster.hooks.digest)."""
    def need(ok, what):
        if not ok:
            raise BadResult(f"batches {first}..{first + count - 1}: {what}")

    need(isinstance(result, dict), f"a {type(result).__name__}, not a dict")
    need(result.get("first") == first, f"it says it starts at batch {result.get('first')!r}")
    sizes, skips, digests = (result.get(k) for k in ("sizes", "skips", "digests"))
    need(all(isinstance(v, list) for v in (sizes, skips, digests)) and
         len(sizes) == len(skips) == len(digests) <= count,
         "sizes, skips and digests are not lists of one entry per batch, at most "
         f"{count}")
    for k, size in enumerate(sizes):
        full = first + k < n - 1
        need(isinstance(size, int) and 0 < size <= batch_size and (size == batch_size or not full),
             f"batch {first + k} holds {size!r} samples (batch_size {batch_size})")
        need(isinstance(skips[k], (tuple, list)) and len(skips[k]) == 4 and
             all(isinstance(v, int) and v >= 0 for v in skips[k]),
             f"batch {first + k} has bad-input counts {skips[k]!r}")
    error = result.get("error")
    need(error is None or (isinstance(error, (tuple, list)) and len(error) == 3 and
                           all(isinstance(v, str) for v in error)), f"error {error!r}")
    need(isinstance(result.get("hook_restarts", 0), int) and result.get("hook_restarts", 0) >= 0,
         f"hook_restarts {result.get('hook_restarts')!r}")
    for key in ("samples_read", "bytes_read"):
        need(isinstance(result.get(key), int) and result[key] >= 0, f"{key} {result.get(key)!r}")
    need(isinstance(result.get("busy_s"), float) and 0.0 <= result["busy_s"] < float("inf"),
         f"busy_s {result.get('busy_s')!r}")
    if "outputs" in result:
        outputs = result["outputs"]
        need(isinstance(outputs, list) and len(outputs) == len(sizes),
             f"{len(sizes)} batch sizes for {getattr(outputs, '__len__', lambda: '?')()} batches")
        for k, out in enumerate(outputs):
            need(object_digest(out) == digests[k],
                 f"the bytes of batch {first + k} do not match the digest its worker took")
        return
    images, labels = result.get("images"), result.get("labels")
    total = sum(sizes)
    need(isinstance(images, np.ndarray) and images.dtype == np.uint8 and images.ndim == 1 and
         images.size == total * image_bytes,
         f"{getattr(images, 'nbytes', '?')} image bytes for {total} images of {image_bytes}")
    need(isinstance(labels, np.ndarray) and labels.dtype == np.int64 and labels.ndim == 1 and
         labels.size == total, f"{getattr(labels, 'size', '?')} labels for {total} samples")
    need(total == 0 or int(labels.min()) >= -1, f"a label of {int(labels.min())}")
    mix_labels, mix_weights = result.get("mix_labels"), result.get("mix_weights")
    need(isinstance(mix_labels, np.ndarray) and mix_labels.dtype == np.int64 and
         mix_labels.ndim == 1 and mix_labels.size == total and
         isinstance(mix_weights, list) and len(mix_weights) == len(sizes) and
         all(w is None or (isinstance(w, float) and 0.0 <= w <= 1.0) for w in mix_weights),
         "Mixup/CutMix partner labels or weights that do not fit the batches")
    i = j = 0
    for k, size in enumerate(sizes):
        w = mix_weights[k]
        need(batch_digest(images[i:i + size * image_bytes], labels[j:j + size],
                          None if w is None else mix_labels[j:j + size], w) == digests[k],
             f"the bytes of batch {first + k} do not match the digest its worker took")
        i += size * image_bytes
        j += size


class Run:
    """One iteration over batches [first, n) of an epoch (with remaining, of
    an elastic resume's part of it; the trainer's C loader is set to the
    same): the claims and
    reorder buffer (_claims.Claims), the local thread and the tasks in
    flight. tensors(images, labels, n, mix) makes the training loop's tensors
    out of two buffers (mix: the Mixup/CutMix partner labels and weight, or
    None); with fields= or hooks, outputs (a cluster.hooks.Outputs) makes
    the local thread's batch objects instead, as the workers make theirs.

    Claims are per range (batches_per_task batches); delivery is per batch:
    the claims' `ready` holds the batches made and not read yet by index,
    whoever made them, and the first to arrive is kept. A range the cluster
    makes is submitted as chunk tasks pinned, loosely, to one worker, so
    that they run there in order and each continues the previous one's
    pipeline."""

    def __init__(self, offload, c_loader, epoch, first, n, tensors, outputs=None,
                 remaining=None):
        self.o = offload
        self.c = c_loader
        self.tensors = tensors
        self.outputs = outputs
        self.epoch = epoch
        # an elastic resume's (ranges of the epoch, nodes of their sequence), or None
        self.remaining = remaining
        self.n = n
        self.claims = Claims(first, n, offload.batches_per_task, offload, sizes=offload.sizes)
        self.errors = {}    # batch index -> the error that ended its range there
        self.closing = False
        self.chunk = max(1, CHUNK_BYTES // max(1, offload.spec["batch_bytes"]))
        self.cond = threading.Condition()
        self.local = threading.Thread(target=self._local_main, name="stoker-local", daemon=True)
        # Tests only (STOKER_TEST_LOCAL_WAITS_S): after its first range (the
        # loop's first batches, claimed before any task goes out) the local
        # thread leaves the epoch to the cluster until a task ends or that
        # many seconds pass, so that a test on a loaded machine sees the
        # workers make batches (else the machine's load decides who makes
        # them first).
        self.local_waits_until = time.monotonic() + \
            float(os.environ.get("STOKER_TEST_LOCAL_WAITS_S", "0"))

    # -- tasks (called with cond held) --

    def _submit_more(self):
        claims = self.claims
        while True:
            pick = claims.to_submit(self.o.shared)
            if pick is None:
                return
            r, start, worker, (keys, index, hooks) = pick
            canary = self.o.wants_canary()
            end = claims.ranges[r][1]
            chunks = {}
            try:
                for b in range(start, end, self.chunk):
                    count = min(self.chunk, end - b)
                    key = f"stoker-{self.o.tag}-e{self.epoch}-b{b}-{os.urandom(4).hex()}"
                    # Earlier batches first: Dask runs the higher priority
                    # first, and would otherwise favour the later submission.
                    # Once a worker is refused, Dask may not place a task
                    # elsewhere: it could pick the refused one.
                    fut = self.o.client.submit(make_range, self.o.spec, keys, index, hooks,
                                               self.epoch, b, count, canary,
                                               self.remaining, key=key,
                                               pure=False, workers=[worker],
                                               allow_other_workers=not self.o.refused,
                                               priority=-b)
                    chunks[fut] = worker
                    fut.add_done_callback(lambda f, r=r, b=b, n=count, opens=b == start:
                                          self._on_done(r, f, b, n, opens))
            except Exception as e:  # the client is closed or lost its scheduler
                self.o.warn_once("submit", f"stoker: cannot submit to the Dask cluster ({e}); "
                                 "decoding locally")
                self._drop_chunks(chunks)
                return
            claims.submitted_to_cluster(r, chunks)
            self.o.add(tasks_submitted=len(chunks), ranges_cluster=1)

    @staticmethod
    def _drop_chunks(chunks):
        """Let go of tasks whose result is not wanted: releasing a future
        tells the scheduler without waiting for it (Client.cancel waits, and
        would hang on a scheduler that died), and it forgets the task."""
        _release(chunks)

    def _put(self, index, item):
        """Keep a batch unless it was made already; wake the loop."""
        if self.claims.put(index, item, item[3] == "local"):
            self.cond.notify_all()
            return True
        return False

    # -- the local thread --

    def _local_main(self):
        claims = self.claims
        while True:
            with self.cond:
                pick = None
                while not self.closing and pick is None:
                    pick = None if self._local_waits() else claims.pick_local()
                    if pick is None:
                        self.cond.wait(0.05)
                if self.closing:
                    return
                r, why = pick
                taken_back, dropped = claims.claim_local(r)
                self._drop_chunks(dropped)
                if taken_back:
                    self.o.add(ranges_taken_back=1)
                    if why.startswith("the Dask"):
                        self.o.warn_once(why, f"stoker: {why}; decoding batches here until "
                                         "it is back")
                    else:
                        log.info("stoker: decoding batches %d.. of epoch %d here: %s",
                                 claims.ranges[r][0], self.epoch, why)
                start = claims.missing_from(r)
            if start is not None:
                self._make_local(r, start)
            with self.cond:
                self._drop_chunks(claims.local_done(r))
                self.cond.notify_all()

    def _local_waits(self):
        c = self.o.counters
        return (self.claims.last_local is not None and time.monotonic() < self.local_waits_until
                and not (c["tasks_done"] or c["tasks_failed"]))

    def _local_batches(self, start, count):
        """Yield (batch, samples, bad-input counts) of [start, start + count)."""
        if self.outputs is not None:
            yield from self.outputs.made(self.c, self.epoch, start, count)
            return
        self.c.seek_range(self.epoch, start, count)
        for _ in range(count):
            b = self.c.next()
            if b is None:
                return
            out = self.tensors(b.images, b.labels, b.size, mix_of(b))
            n, skips = b.size, b.skips + (0,)
            del b
            yield out, n, skips
            del out

    def _make_local(self, r, start):
        end = self.claims.ranges[r][1]
        before = self.c.stats()
        began, made = time.monotonic(), 0
        batches = self._local_batches(start, end - start)
        try:
            for index, (out, n, skips) in enumerate(batches, start):
                made += 1
                with self.cond:
                    self._put(index, (out, n, skips, "local"))
                    rest = self.claims.missing_from(r)
                    if self.closing or rest is None or rest > index + 1:
                        break  # stopped, or the cluster made the rest first
                del out
        except _stoker.Error as e:  # a HookError too
            with self.cond:
                self.errors.setdefault(start + made, e)
                self.cond.notify_all()
        finally:
            batches.close()
            after = self.c.stats()
            if made:
                with self.cond:
                    self.claims.timed_local(time.monotonic() - began, made)
                    if self.o.sizes is not None:  # what re-reading a window costs
                        self.o.sizes.timed_read((after["read_ns"] - before["read_ns"]) / 1e9,
                                                after["samples_read"] - before["samples_read"])

    # -- cluster results (Dask's callback thread) --

    def _on_done(self, r, fut, first, count, opens):
        result = failure = None
        client = self.o.client
        try:
            # Straight from the worker (direct=True: the data does not pass
            # through the scheduler), within GATHER_TIMEOUT_S: Client.gather
            # has no time limit of its own, and this is Dask's one callback
            # thread. gather(asynchronous=True) gives the coroutine that
            # sync() runs with the limit.
            result = client.sync(lambda: client.gather(fut, direct=True, asynchronous=True),
                                 callback_timeout=GATHER_TIMEOUT_S)
        except Exception as e:  # lost, cancelled, timed out, or the worker refused
            failure = e
        try:
            fut.release()
        except Exception:  # the client is gone
            pass
        bad = None
        if result is not None:
            try:
                check_result(result, first, count, self.o.spec["batch_size"],
                             self.o.image_bytes, self.n)
            except BadResult as e:
                result, bad = None, e
        refused = None
        if isinstance(failure, WorkerMismatch):
            refused = failure.address
            self.o.refuse(failure.address, str(failure))
        elif result is not None and result["worker"] in self.o.refused:
            refused, result = result["worker"], None  # placed there before it was refused
        elif result is not None and not self.o.check_canary(result):  # may run a hook here
            # refused, or its canary was not asked for: its range is made again
            refused, result = result["worker"], None
        with self.cond:
            worker = self.claims.futures.get(r, {}).get(fut)  # where it was sent
            mine = self.claims.chunk_done(r, fut)
            if self.closing or not mine:
                return  # dropped: the range was taken back or is over
            try:
                if result is not None:
                    self.o.task_ended(worker)
                    self._take_chunk(result, opens)
                elif refused is not None:
                    self.o.add(tasks_failed=1)
                    self._drop_chunks(self.claims.range_failed(r))
                else:
                    self.o.add(tasks_failed=1)
                    if bad is not None:
                        self.o.warn_once("bad", f"stoker: a Dask worker sent a result that is not "
                                         f"valid ({bad}); its batches are made here")
                    else:
                        self.o.warn_once("failed", f"stoker: a Dask task failed ({failure!r}); "
                                         "its batches are made again")
                    self.o.task_ended(worker, bad or failure)
                    # A worker that sends bad data may send it again: the
                    # range is made here.
                    self._drop_chunks(self.claims.range_failed(r, local_only=bad is not None))
            finally:  # nothing leaves the range half claimed
                self.claims.chunks_settled(r)
                self._submit_more()
                self.cond.notify_all()

    def _take_chunk(self, result, opens):
        """Keep a task's batches (opens: it is the first of its submission,
        which may have read a window before its batches)."""
        received = sum(object_nbytes(o) for o in result["outputs"]) if "outputs" in result \
            else result["images"].nbytes + result["labels"].nbytes
        self.o.add(tasks_done=1, samples_read_cluster=result["samples_read"],
                   bytes_read_cluster=result["bytes_read"],
                   bytes_received=received, hook_restarts_cluster=result.get("hook_restarts", 0))
        if self.o.sizes is not None:
            self.o.sizes.timed_worker(result["busy_s"], len(result["sizes"]),
                                      result["samples_read"] - sum(result["sizes"])
                                      if opens else None)
        kept = 0
        for k, (out, n, skips) in enumerate(self._chunk_batches(result)):
            kept += self._put(result["first"] + k, (out, n, skips, "cluster"))
        self.o.add_worker(result["worker"], kept)
        self.o.add(tasks_dropped=int(kept == 0 and len(result["sizes"]) > 0))
        if result["error"] is not None:
            name, message, cause = result["error"]
            at = result["first"] + len(result["sizes"])
            kind = HookError if name == "HookError" else getattr(_stoker, name, _stoker.Error)
            error = kind(message)
            if cause:  # the hook's traceback, as a local loader gives it
                error.__cause__ = RemoteTraceback(f"on Dask worker {result['worker']}:\n{cause}")
            self.errors.setdefault(at, error)

    def _chunk_batches(self, result):
        """(batch, samples, bad-input counts) of each batch of a result."""
        if "outputs" in result:
            yield from zip(result["outputs"], result["sizes"], result["skips"])
            return
        images, labels = result["images"], result["labels"]
        i = j = 0
        for k, (n, skips) in enumerate(zip(result["sizes"], result["skips"])):
            size = n * self.o.image_bytes
            w = result["mix_weights"][k]
            mix = None if w is None else (result["mix_labels"][j:j + n], w)
            yield self.tensors(images[i:i + size], labels[j:j + n], n, mix), n, skips
            i += size
            j += n

    # -- the consumer --

    def batches(self):
        """Yield (images, labels) of every batch in order; raise a range's
        error after its batches, as a local loader does."""
        started = time.perf_counter_ns()
        if not self.o.started_ns:
            self.o.started_ns = started
        claims = self.claims
        if not claims.ranges:
            return
        self.local.start()
        with self.cond:  # the local thread claims range 0 before any task is submitted
            while claims.state[0] == PENDING:
                self.cond.wait(0.05)
        try:
            for index in range(claims.ranges[0][0], self.n):
                with self.cond:
                    claims.next = index
                    self._submit_more()
                    self.cond.notify_all()
                    t0 = time.perf_counter_ns()
                    claims.waiting = True
                    while index not in claims.ready and index not in self.errors:
                        self.cond.wait(0.05)
                        # The dataset index reached the workers, or a new
                        # worker joined: work for them now, not when the
                        # batch waited for comes.
                        self._submit_more()
                    claims.waiting = False
                    if index not in claims.ready:
                        raise self.errors[index]
                    out, n, skips, source = claims.take(index)
                self.o.add(samples=n, samples_skipped=skips[0],
                           images_replaced=skips[1], shards_failed=skips[2],
                           hook_samples_skipped=skips[3],
                           **{source + "_wait_ns": time.perf_counter_ns() - t0,
                              "batches_" + source: 1, "samples_" + source: n})
                if not self.o.counters["first_batch_ns"]:
                    self.o.add(first_batch_ns=time.perf_counter_ns() - started)
                yield out
                del out
        finally:
            self.close()

    def close(self):
        with self.cond:
            self.closing = True
            chunks = self.claims.clear()
            self.cond.notify_all()
        if chunks:
            self._drop_chunks(chunks)
        if self.local.is_alive():
            self.local.join()


def merge_stats(stats, offload):
    """stats() of a Loader with cluster=: whole-run counts over every batch
    delivered, and where they came from."""
    with offload.lock:
        c = dict(offload.counters)
    for key in ("samples", "samples_skipped", "images_replaced", "shards_failed"):
        stats[key] = c[key]
    if "hook_samples_skipped" in stats:  # delivered batches', from wherever they came
        stats["hook_samples_skipped"] = c["hook_samples_skipped"]
        stats["hook_processes_restarted"] += c["hook_restarts_cluster"]
    stats["batches"] = c["batches_cluster"] + c["batches_local"]
    stats["wait_ns"] = c["cluster_wait_ns"] + c["local_wait_ns"]
    stats["wall_ns"] = time.perf_counter_ns() - offload.started_ns if offload.started_ns else 0
    # Read amplification: what the workers' tasks and the local loader read
    # (the local loader's own counters: its readers read ahead of a range,
    # and that counts) per sample delivered.
    c["samples_read_local"], c["bytes_read_local"] = stats["samples_read"], stats["bytes_read"]
    read = c["samples_read_cluster"] + c["samples_read_local"]
    c["samples_read"] = read
    c["bytes_read"] = c["bytes_read_cluster"] + c["bytes_read_local"]
    c["read_per_sample"] = read / c["samples"] if c["samples"] else 0.0
    c["bytes_read_per_sample"] = c["bytes_read"] / c["samples"] if c["samples"] else 0.0
    c["bytes_per_image"] = c["bytes_received"] / c["samples_cluster"] if c["samples_cluster"] else 0
    c["workers"] = offload.workers()
    c["batches_per_task"] = "auto" if offload.sizes is not None else offload.batches_per_task
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
        f"reading: {c['read_per_sample']:.2f} samples read per sample delivered "
        f"({c['bytes_read_per_sample'] / 1e3:.0f} kB per sample), by {c['ranges_cluster']} "
        f"ranges sent to the cluster (batches_per_task={c['batches_per_task']}) and this "
        f"process; {c['bytes_received'] / 1e6:.0f} MB received from workers",
    ]
    if c["read_per_sample"] > READ_AMPLIFICATION_ADVICE:
        lines.append(
            f"reading: each sample was read {c['read_per_sample']:.1f} times: a range started "
            "from scratch first reads what precedes it in the shuffle (under the sliding "
            "window, the window); an index= over local uncompressed shards (the global "
            "order, read by offset) reads least, larger tasks (batches_per_task=N) start "
            "fewer ranges, a smaller shuffle_buffer reads less for each")
    return _stoker.report(stats) + "\n".join(lines) + "\n"
