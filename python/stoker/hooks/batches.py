# SPDX-License-Identifier: MIT
"""The batches of a Loader with hooks: the C loader's batches, each sample
through map= in the hook processes, reassembled in order, then batch_map=;
made by a thread of their own so the hook processes keep working while
the training loop runs."""
import collections
import contextlib
import functools
import json
import logging
import math
import queue
import threading
import time

import numpy
import torch

from . import arena as _shm, decode as _hook_decode
from ..base import rng as _rng
from .pool import (HookError, Pool, RemoteTraceback, Task, collate, describe, dumps, hook_name,
                     hook_names, signature)
from .._ext._stoker import DataError, OptionError, OptionTypeError

log = logging.getLogger("stoker")
_STEP_S = 0.1  # how often the thread looks at its stop flag while hooks run


class _Job:
    """One batch on its way through the hooks."""

    def __init__(self, index, tasks, labels, names, direct):
        self.index, self.tasks, self.labels, self.names = index, tasks, labels, names
        self.direct = direct  # the batch as it stands when map= is not given
        self.remaining = len(tasks)
        self.skipped = 0  # its samples map= failed on, replaced (on_error="skip")
        self.batch_task = None
        self.out = None
        self.ready = False
        # The batch map= results go to: a Slot the hook processes write
        # into, laid out as the first result back (until then nothing).
        self.slot = self.rows = None

    def give_slot(self, template):
        """Lay the batch out as template (the first result, packed) in a
        Slot: the samples not sent yet are written there by the hook
        processes; those sent already are copied into their rows."""
        self.slot = _shm.Slot(template, len(self.tasks))
        self.rows = self.slot.rows
        if self.slot.layout:  # arrays to write; else Python values only, pickled back
            for i, task in enumerate(self.tasks):
                task.dest = (self.slot, i)

    def release(self):
        """The hook processes have written every row: the batch keeps the
        slot's memory mapped, not its fd."""
        if self.slot is not None:
            self.slot.arena.close_fd()


class HookedBatches:
    """Runs the hooks of one loader; counters survive epochs."""

    def __init__(self, pool, map_fn, batch_fn, seed, rank, skip, depth, map_shape):
        self.pool, self.skip, self.depth = pool, skip, depth
        self.map_name = map_fn and hook_name(map_fn)
        self.batch_name = batch_fn and hook_name(batch_fn)
        self.has_map, self.has_batch = map_fn is not None, batch_fn is not None
        self.seed, self.rank = seed, rank
        self.spec = None  # signature of map='s result, from the first sample
        self.template = None  # the first result back, packed: the layout of every batch's slot
        self._in_flight = ()  # the batches in flight (_run's)
        self.map_shape = map_shape  # declared shape of map='s result, or None
        self.skipped = 0
        self.wait_ns = 0  # the training loop waiting for hooked batches (report())

    def batches(self, source, epoch, with_skips=False):
        """Yield the hooked batches of source's (index, samples, keys, labels,
        names, batch) items, made by a thread; closing the generator stops it.
        with_skips: yield (batch, its samples skipped by map=) pairs."""
        out = queue.Queue(maxsize=self.depth)
        # A slot per batch the thread holds, from its first sample sent
        # until the loop takes it: in flight, queued or waiting to be, at
        # most depth (map= results are built in place, a batch each).
        slots = threading.Semaphore(self.depth)
        stop = threading.Event()
        done = object()

        def put(item):
            """False when the loop has gone (it takes nothing more)."""
            while not stop.is_set():
                try:
                    out.put(item, timeout=_STEP_S)
                    return True
                except queue.Full:
                    pass
            return False

        def produce():
            try:
                with contextlib.closing(self._run(source, epoch, stop, with_skips,
                                                  slots)) as made:
                    for batch in made:
                        if not put((batch, None)):
                            return
                put((done, None))
            except BaseException as e:  # handed to the loop, raised there
                put((done, e))

        thread = threading.Thread(target=produce, name="stoker-hooks", daemon=True)
        thread.start()
        try:
            while True:
                asked = time.monotonic_ns()
                batch, error = out.get()
                self.wait_ns += time.monotonic_ns() - asked
                if batch is done:
                    if error is not None:
                        raise error
                    return
                slots.release()
                yield batch
                del batch
        finally:
            stop.set()
            thread.join()
            # Still executing only in a child of fork() taken while the
            # thread was inside it: the thread is gone and closing would
            # raise; the parent's close() ends it there.
            if not getattr(source, "gi_running", False):
                source.close()

    def _run(self, source, epoch, stop, with_skips, slots):
        jobs = self._in_flight = collections.deque()
        try:
            yield from self._jobs(jobs, source, epoch, stop, with_skips, slots)
        finally:  # stopped early: the hook processes go on to the next batches' samples
            self.pool.discard(set(jobs))
            for job in jobs:
                job.release()

    def _jobs(self, jobs, source, epoch, stop, with_skips, slots):
        exhausted = False
        while not stop.is_set():
            if self.pool.closed:  # by close() from another thread: its samples never come
                raise ValueError("the loader was closed (by another thread) while next() waited "
                                 "for a batch")
            # With none in flight, wait a step for the loop to take a batch.
            while not exhausted and slots.acquire(timeout=0 if jobs else _STEP_S):
                item = next(source, None)
                if item is None:
                    exhausted = True
                    slots.release()
                else:
                    jobs.append(self._start(epoch, *item))
                del item  # its views of the C batch: not held while the next one is fetched
            self._advance(jobs, epoch)
            while jobs and jobs[0].ready:
                job = jobs.popleft()
                out = (job.out, job.skipped) if with_skips else job.out
                # Its tasks point back at it: break the cycle now, so the C
                # loader's buffer goes back without waiting for the collector.
                job.tasks = job.direct = job.batch_task = job.out = None
                yield out
                del out, job
            if exhausted and not jobs:
                return
            for task in self.pool.step(_STEP_S):
                task.arg = None  # drop the view of the C loader's buffer
                job = task.owner
                if job not in jobs:
                    continue  # sent before an earlier run stopped: nobody waits for it
                if task is job.batch_task:
                    if task.error is not None:
                        raise self._error(task, self.batch_name, f"batch {job.index}")
                    job.out, job.ready = task.result, True
                else:
                    job.remaining -= 1

    def _start(self, epoch, index, samples, keys, labels, names, direct):
        tasks = []
        job = _Job(index, tasks, labels, names, direct)
        if self.has_map:
            for i, (sample, key) in enumerate(zip(samples, keys)):
                tasks.append(Task("map", key, sample, job, functools.partial(self._place, job, i)))
            if self.template is not None:
                job.give_slot(self.template)
            for task in tasks:
                self.pool.submit(task)
            job.remaining = len(tasks)
        return job

    def _place(self, job, i, packed, arena):
        """Task.into of sample i of job: its result in row i of the batch,
        written there by the hook process or copied there now. The first
        result back lays out the slots of its batch and every batch after."""
        if self.template is None:
            self.template = packed
            for other in self._in_flight:
                if other.rows is None:
                    other.give_slot(packed)
        return _shm.unpack_into(packed, arena, job.rows, i, job.slot.arena)

    def _advance(self, jobs, epoch):
        """Assemble, in order, each batch whose samples are all back."""
        for job in jobs:
            if job.remaining:
                return  # a later batch waits: errors and the spec go in order
            if job.out is not None or job.batch_task is not None or job.ready:
                continue
            batch = self._assemble(job) if self.has_map else job.direct
            job.release()
            if self.has_batch:
                k = _rng.batch_key(self.seed, epoch, self.rank, job.index)
                job.batch_task = Task("batch_map", k, batch, job)
                self.pool.submit(job.batch_task)
            else:
                job.out, job.ready = batch, True

    def _assemble(self, job):
        results, good = [], None
        for i, task in enumerate(job.tasks):
            url, key = job.names[i]
            if task.error is None:
                sig = signature(task.result)
                if self.map_shape is not None and (sig[0] not in ("tensor", "ndarray") or
                                                   sig[1] != self.map_shape):
                    raise HookError(
                        f"hook map={self.map_name} returned {describe(sig)} for sample {key!r} "
                        f"of {url}, but map_shape= declares shape {list(self.map_shape)}")
                if self.spec is None:
                    self.spec = sig
                elif sig != self.spec:
                    raise HookError(
                        f"hook map={self.map_name} returned {describe(sig)} for sample {key!r} of "
                        f"{url}, but the first sample gave {describe(self.spec)}: every sample "
                        "must give the same shapes and dtypes to make a batch")
                if good is None:
                    good = task.result
                results.append(task.result)
                continue
            error = self._error(task, self.map_name, f"sample {key!r} of {url}")
            if not self.skip:
                raise error
            self.skipped += 1
            job.skipped += 1
            log.warning("%s; skipped (on_error=skip), replaced by its batch's first good sample",
                        error)
            results.append(None)
        if good is None:
            raise HookError(f"hook map={self.map_name} failed on every sample of batch "
                            f"{job.index}: nothing to replace them with")
        results = [good if r is None else r for r in results]
        try:
            # Every result has the same shapes (spec): each is its row of
            # job.rows, unless one was replaced (then they are stacked).
            out = collate(results, None if job.skipped else job.rows)
        except TypeError as e:  # a dtype torch lacks: the same in every sample (spec)
            url, key = job.names[0]
            raise HookError(f"hook map={self.map_name} returned {describe(self.spec)} for "
                            f"sample {key!r} of {url} and the rest of batch {job.index}: "
                            f"{e}") from e
        return out if job.labels is None else (out, job.labels)

    @staticmethod
    def _error(task, name, what):
        exc, text, reason = task.error
        which = "map" if task.which == "map" else "batch_map"
        if reason is not None:
            return HookError(f"hook {which}={name} on {what} (key {task.key}) {reason}")
        if exc is None:
            exc = RemoteTraceback(text)
        else:
            exc.__cause__ = RemoteTraceback(text)
        if isinstance(exc, Exception):
            error = HookError(f"hook {which}={name} failed on {what} (rng key {task.key}): "
                              f"{type(exc).__name__}: {exc}")
        else:  # sys.exit(), KeyboardInterrupt: they end the hook's call, not its process
            error = HookError(f"hook {which}={name} raised {exc!r} on {what} (rng key "
                              f"{task.key})")
        error.__cause__ = exc
        return error


def make(map_fn, batch_fn, processes, timeout, seed, rank, skip, max_batches, map_shape=None,
         decode=None, pool=None):
    """The HookedBatches of Loader(map=, batch_map=, hook_processes=,
    hook_timeout=, map_shape=); decode: (image field or None, channels
    last, max_image_pixels) when map= gets the image undecoded
    (transform=None); pool: hook
    processes started already for these hooks, else new ones."""
    for name, fn in (("map", map_fn), ("batch_map", batch_fn)):
        if fn is not None and not callable(fn):
            raise OptionTypeError(f"{name} must be a callable fn(sample, rng), not "
                                  f"{type(fn).__name__} {fn!r}")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise OptionError(f"hook_processes must be an int >= 1, not {processes!r}")
    # nan passed "<= 0" and then polled the hook processes with a zero
    # timeout; inf is a limit that never comes, which None already says.
    if timeout is not None and (isinstance(timeout, bool) or
                                not isinstance(timeout, (int, float)) or
                                not math.isfinite(timeout) or timeout <= 0):
        raise OptionError(f"hook_timeout must be a finite number of seconds > 0 (or None: no "
                          f"limit), not {timeout!r}")
    if map_shape is not None:
        if map_fn is None:
            raise OptionError("map_shape= declares the shape of map='s result: it needs map=")
        if isinstance(map_shape, int):
            map_shape = (map_shape,)
        try:
            map_shape = tuple(map_shape)
            valid = all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                        for d in map_shape)
        except TypeError:
            valid = False
        if not valid:
            raise OptionError(f"map_shape must be a tuple of ints >= 0 (the shape of each "
                              f"sample's result, e.g. (3, 224, 224)), not {map_shape!r}")
    hooks = {k: fn for k, fn in (("map", map_fn), ("batch_map", batch_fn)) if fn is not None}
    names = hook_names(hooks)
    if decode is not None:
        hooks["map"] = _hook_decode.DecodeFirst(map_fn, *decode)
    if pool is None:
        pool = Pool(dumps(hooks), processes, timeout, names=names)
    # Batches in flight: enough to keep every process busy across a batch's
    # end, fewer than the C loader's buffers (the samples are views of them)
    # where it has more than one: with one, each batch's views are let go
    # before the next is fetched, and the loop holds copies.
    depth = max(1, min(2, max_batches - 1))
    return HookedBatches(pool, map_fn, batch_fn, seed, rank, skip, depth, map_shape)


def samples(c_batches, images_of, fields):
    """What the hooks get from each C batch: (index, one sample per image,
    the key of each sample's random stream (the C loader's own), labels or
    None with fields=, (url, key) per sample, the whole batch)."""
    spec = (("__url__", "u"), ("__key__", "k"))
    for batch in c_batches:
        n = batch.size
        images = images_of(batch.images, n)
        urls, keys = batch.columns(spec, json.loads)
        if fields is None:
            labels = torch.frombuffer(batch.labels, dtype=torch.int64).clone()
            whole = (images, labels)
            each = [images[i] for i in range(n)]
        else:
            labels = None
            whole = fields.batch(batch, images)
            each = [{name: _pick(value, i) for name, value in zip(fields.names, whole)}
                    for i in range(n)]
        index = batch.index
        rng_keys = numpy.frombuffer(batch.sample_keys, dtype=numpy.uint64).tolist()
        del batch
        yield index, each, rng_keys, labels, list(zip(urls, keys)), whole
        images = each = whole = None  # no view of the C batch held while the next is fetched


_IMAGES = ("jpg;jpeg;png", "bbb")  # the image member, undecoded
_NAMES = (("__url__", "u"), ("__key__", "k"))


def raw_samples(c_batches, fields, label_exts, skip, on_skip):
    """samples() for transform=None: the C batches hold undecoded samples,
    and each sample's image goes to the hooks as its bytes (a uint8 array,
    decoded in the hook process: _hook_decode). Labels are the first of
    label_exts' members the sample has, as an int (-1 each without
    label_exts). A sample without an image, label or member fields=
    requires is bad input: a
    DataError naming its shard and key, or under on_error="skip" replaced by
    its batch's first good sample (on_skip(n) counts them)."""
    exts = [e for e in label_exts.split(",") if e]
    image = _IMAGES if fields is None else \
        (fields.image_name.lower(), "b" * len(fields.image_name.split(";")))  # as fields= names it
    # The members fields= requires: the C loader checks them where it
    # decodes (require_members), not here, where it does not.
    needed = [] if fields is None else \
        [e for e in fields.require_members.split(",") if e and not e.endswith("?")]
    spec = (image,) + _NAMES + ((((";".join(exts)), "i" * len(exts)),) if exts else ()) + \
        tuple((e, "b" * len(e.split(";"))) for e in needed)
    for batch in c_batches:
        n = batch.size
        images, urls, names, *rest = batch.columns(spec, json.loads)
        labels = rest.pop(0) if exts else [-1] * n
        missing = [next((e for e, column in zip(needed, rest) if column[i] is None), None)
                   for i in range(n)]
        bad = [i for i in range(n) if images[i] is None or labels[i] is None or missing[i]]
        slots = list(range(n))
        if bad:
            good = next((i for i in slots if i not in bad), None)
            if not skip or good is None:
                i = bad[0]
                what = "image (jpg, jpeg or png)" if images[i] is None else \
                    f"label ({', '.join(exts)})" if labels[i] is None else missing[i]
                raise DataError(f"{urls[i]}: sample {names[i]!r} has no {what} member" +
                                (f"; every sample of batch {batch.index} is bad" if skip else ""))
            for i in bad:
                slots[i] = good
            on_skip(len(bad))
            log.warning("%s: %d sample(s) of batch %d without an image, label or required "
                        "member skipped (on_error=skip), replaced by the batch's first good "
                        "sample",
                        urls[bad[0]], len(bad), batch.index)
        encoded = [None if b is None else numpy.frombuffer(b, dtype=numpy.uint8)
                   for b in images]
        keys = numpy.frombuffer(batch.sample_keys, dtype=numpy.uint64).tolist()
        keys = [keys[j] for j in slots]
        if fields is None:
            each = [encoded[j] for j in slots]
            out_labels = torch.tensor([labels[j] for j in slots], dtype=torch.int64)
        else:  # every column as the C batch has it, then each slot's sample
            whole = fields.batch(batch, encoded, labels)
            each = [{name: _pick(value, j) for name, value in zip(fields.names, whole)}
                    for j in slots]
            out_labels = None
        index = batch.index
        del batch
        yield index, each, keys, out_labels, [(urls[j], names[j]) for j in slots], None
        images = encoded = each = whole = None  # as samples() does


def _pick(value, i):
    """Sample i of one field of a batch: an image tensor, a label as int, a value."""
    item = value[i]
    if isinstance(item, torch.Tensor) and item.dim() == 0:
        return item.item()
    return item
