# SPDX-License-Identifier: MIT
"""User hooks (Loader(map=, batch_map=)) in a pool of hook processes.

The C loader's batches come in order; each sample goes to an idle hook
process (its pixels through a shared-memory arena, see _shm), with the
key of its random stream (_rng), and the results are put back in place,
so a batch is the same whatever the number of processes and whichever
finished first. A batch hook then runs on the assembled batch, keyed by
the batch index. The hook is pickled once (cloudpickle when installed:
lambdas and functions of __main__ travel too) and sent to each process
when it starts. A hook process is a fork of the pool's fork server
(_hook_forkserver: a fresh interpreter that has imported torch), never a
fork of the trainer, which already runs the C loader's threads.
"""
import collections
import hashlib
import logging
import os
import pickle
import subprocess
import threading
import time
import weakref

from multiprocessing import connection, reduction

import numpy
import torch

from .._ext._stoker import Error, OptionTypeError, ReadError
from . import arena as _shm
from .processes import ForkServer

try:
    import cloudpickle as _pickler
except ImportError:  # plain pickle: hooks must then be importable module-level functions
    _pickler = pickle

log = logging.getLogger("stoker")
MAX_ATTEMPTS = 3  # a sample whose hook kills its process (or times out) this often is an error
MAX_CHUNK = 16  # samples sent to a hook process at once


class HookError(Error):
    """A user hook (map= or batch_map=) failed on a sample or a batch: the
    message names the hook and the sample (shard URL and key); the hook's
    own exception, with its traceback, is the __cause__. Its code is
    ReadError's (STK_EIO): the sample could not be made."""

    code = ReadError.code


class RemoteTraceback(Exception):
    """The traceback of a hook's exception that could not be pickled back."""


def hook_name(fn):
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def hook_names(hooks):
    """'map=fn, batch_map=fn' of a {which: fn} dict, for messages."""
    return ", ".join(f"{k}={hook_name(fn)}" for k, fn in hooks.items())


def dumps(hooks):
    """The hooks pickled once; refused now, not in a hook process later."""
    try:
        data = _pickler.dumps(hooks)
        pickle.loads(data)
    except Exception as e:
        names = hook_names(hooks)
        how = "cloudpickle" if _pickler is not pickle else \
            "pickle (cloudpickle is not installed: use a module-level function)"
        raise OptionTypeError(f"the hook ({names}) cannot be sent to hook processes: "
                              f"{how} fails with {type(e).__name__}: {e}") from e
    return data


class Task:
    """One call of a hook: hooks[which](arg, rng(key)). into: None, or
    into(packed, arena) that copies the result out of the arena where its
    owner wants it (a sample's into its batch's rows) and returns it.
    dest: None, or (an _shm.Slot, row): the hook process writes the result
    into that row of the slot itself."""
    __slots__ = ("which", "key", "arg", "done", "result", "error", "attempts", "owner", "into",
                 "dest")

    def __init__(self, which, key, arg, owner, into=None, dest=None):
        self.which, self.key, self.arg, self.owner, self.into = which, key, arg, owner, into
        self.dest = dest
        self.done, self.result, self.error, self.attempts = False, None, None, 0


class _Worker:
    """One hook process, forked by the pool's fork server (never a fork of
    the threaded trainer, and it imports no __main__: the user's script
    needs no `if __name__ == "__main__"` guard); one socket to it, whose
    end of file says that it died."""

    def __init__(self, server, hooks_bytes):
        self.process, self.conn = server.fork()
        self.conn.send_bytes(hooks_bytes)
        self.inputs, self.outputs = _shm.Arena(), _shm.Arena()
        self.slots = set()  # keys of the batch slots it maps (those of its chunk)
        self.tasks = []  # sent, not answered yet, in order
        self.since = 0.0  # when it was sent its chunk or last answered
        self.sent = time.monotonic()  # forked, then sent its chunk: its busy time runs from there
        self.ready = False  # it has loaded the hooks: it is sent samples from then on

    def stop(self):
        self.conn.close()
        self.process.kill()
        try:
            self.process.wait(1)
        except subprocess.TimeoutExpired:
            pass  # not reaped yet: SIGKILL cannot be refused, it goes in a moment
        self.inputs.close()
        self.outputs.close()

    def forget(self):
        """In a child of fork(): close this process's copies of the socket,
        pidfd and arenas, touching the process not."""
        self.conn.close()
        self.process.forget()
        self.inputs.close()
        self.outputs.close()


def _stop_all(workers, own_server):
    for w in workers:
        w.stop()
    workers.clear()
    if own_server is not None:
        own_server.close()


class Pool:
    """N hook processes and the tasks waiting for them."""

    def __init__(self, hooks_bytes, processes, timeout, server=None, names=None):
        """server: the ForkServer of a Dask worker process, shared by its
        pools; by default the pool starts its own, stopped with it.
        names: the hooks as messages name them (hook_names), if known."""
        self.hooks_bytes = hooks_bytes  # what each process unpickles
        self.named = f"the hook ({names})" if names else "the hooks"  # for messages
        self._server = server if server is not None else ForkServer()
        self.digest = hashlib.sha256(hooks_bytes).hexdigest()
        self.processes = processes
        self.timeout = timeout
        self._workers = []
        self._queue = collections.deque()
        self.restarts = 0
        self.busy_s = 0.0  # wall time processes spent on chunks of samples (report())
        self.start_s = 0.0  # ... and starting (forked until the hooks were loaded)
        # step() is called by the thread making batches; run_aside() (the
        # cluster's canary) by another. The lock is held for one step, a
        # fraction of a second; what one finishes for the other waits here.
        self._lock = threading.Lock()
        self._settled = []
        self._closed = False  # then no step starts a process again
        self._unloadable = None  # why the hook processes cannot load the hooks: each step says so
        self._start_deaths = 0  # processes dead before loading the hooks, since one did
        # Stop the processes at exit or when the loader is dropped, not later.
        self._finalizer = weakref.finalize(self, _stop_all, self._workers,
                                           self._server if server is None else None)
        _pools.add(self)

    def start(self):
        """Start the processes now (a new fork server imports torch, a
        second of a core) while the caller goes on."""
        self._server.start()
        self.step(0)

    @property
    def closed(self):
        return self._closed

    def pids(self):
        return [w.process.pid for w in self._workers]

    def close(self):
        # Set before taking the lock: a thread in run_aside, which takes it
        # again at once each time round, sees it and lets go.
        self._closed = True
        with self._lock:
            self._finalizer()
            self._queue.clear()

    def _forget(self):
        """In a child of fork() (a DataLoader worker, a checkpoint writer):
        the processes are the parent's. Nothing here kills them, reads
        their replies or waits on a lock that a thread of the parent held
        at the fork; the pool is closed, and its finalizer with it."""
        self._lock = threading.Lock()
        self._closed = True
        self._finalizer.detach()
        for w in self._workers:
            w.forget()
        self._workers.clear()
        self._queue.clear()
        self._settled = []

    def submit(self, task):
        with self._lock:
            self._queue.append(task)

    def _replace(self, worker):
        worker.stop()
        self._workers[self._workers.index(worker)] = _Worker(self._server, self.hooks_bytes)
        self.restarts += 1

    def step(self, timeout):
        """Hand queued tasks to idle processes and wait up to `timeout`
        seconds for results; returns the tasks finished (results copied out
        of the arenas), not those of run_aside()."""
        with self._lock:
            if not self._closed:
                finished = self._settled + self._step(timeout)
                self._settled = []
                return [t for t in finished if t.owner is not None]
        time.sleep(timeout)  # a thread still stepping while the loader closes, not holding the lock
        return []

    def discard(self, owners):
        """Forget the queued tasks of these owners (batches no one waits for
        any more); those already sent to a process finish there, unread."""
        with self._lock:
            self._queue = collections.deque(t for t in self._queue if t.owner not in owners)

    def run_aside(self, task, timeout):
        """Run task (its owner None) ahead of the queued ones, from a thread
        other than the one making batches, whether or not that one steps
        the pool meanwhile; whether it finished within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._queue.appendleft(task)
        while True:
            with self._lock:
                left = deadline - time.monotonic()
                if task.done or left <= 0 or self._closed:
                    if not task.done and task in self._queue:
                        self._queue.remove(task)
                    return task.done
                self._settled += self._step(min(left, 0.1))

    def _step(self, timeout):
        """step() or run_aside() of an open pool, holding the lock."""
        if self._unloadable is not None:
            raise OptionTypeError(self._unloadable)
        while len(self._workers) < self.processes:
            self._workers.append(_Worker(self._server, self.hooks_bytes))
        idle = [w for w in self._workers if not w.tasks]  # a share each, starting ones too
        for w in idle:
            if not self._queue:
                break
            if not w.ready:
                continue  # loading the hooks: hook_timeout must not count that
            # Several samples per message: one wake-up of each side per
            # chunk, not per sample, which matters on a loaded machine.
            chunk = min(MAX_CHUNK, -(-len(self._queue) // len(idle)))
            self._send(w, [self._queue.popleft() for _ in range(min(chunk, len(self._queue)))])
        # A process is heard while it starts (its "ready", or its end) and while it has samples.
        waiting = {w.conn: w for w in self._workers if w.tasks or not w.ready}
        if not waiting:
            return []
        busy = [w for w in waiting.values() if w.tasks]
        if self.timeout and busy:
            timeout = min(timeout, max(0.0, min(w.since for w in busy) + self.timeout -
                                       time.monotonic()))
        for w in busy:  # a process it forked may hold its socket open: watch it too
            pidfd = w.process.watch_fd()
            if pidfd is not None:
                waiting[pidfd] = w
        finished = []
        for ready in connection.wait(list(waiting), timeout):
            w = waiting[ready]
            while (w.tasks or not w.ready) and w.conn.poll():
                if not self._receive(w, finished):
                    self._died(w, finished)
                    break
            if w.tasks and ready is not w.conn:  # exited; what it sent before is read
                self._died(w, finished)
        now = time.monotonic()
        for w in busy:
            if w.tasks and self.timeout and now - w.since >= self.timeout and w in self._workers:
                self._charge(w, finished, f"did not return within hook_timeout={self.timeout:g} "
                             f"s, {MAX_ATTEMPTS} times (its process was killed each time)",
                             f"a hook did not return within hook_timeout={self.timeout:g} s: its "
                             "process was killed")
        return finished

    def _send(self, w, tasks):
        args = [t.arg for t in tasks]
        if w.inputs.ensure(_shm.packed_size(args)):
            w.conn.send(("arena", w.inputs.size))
            reduction.send_handle(w.conn, w.inputs.fd, None)  # the pid: Windows only
        packed, _ = _shm.pack(args, w.inputs)
        # hook_timeout counts from here: w has loaded the hooks, its start is not the hook's work
        w.tasks, w.since = tasks, time.monotonic()
        w.sent = w.since
        try:
            # The slots its results go to; it lets go of the others (_hook_worker).
            dests = [t.dest for t in tasks]  # read once: run_aside's thread may send these
            slots = {d[0].key: d[0] for d in dests if d is not None}
            for key, slot in slots.items():
                if key not in w.slots:
                    w.conn.send(("slot", key, slot.arena.size))
                    reduction.send_handle(w.conn, slot.arena.fd, None)
            w.slots = set(slots)
            w.conn.send(("task", [(t.which, t.key, d and d[0].row_dest(d[1]))
                                  for t, d in zip(tasks, dests)], packed))
        except OSError:
            pass  # the process died: the end of its socket says so next

    def _receive(self, w, finished):
        """Read one message of w; False when it is gone."""
        try:
            message = w.conn.recv()
            while message[0] == "arena":  # a new one, or none (size 0): its results go to slots
                w.outputs.close()
                w.outputs = _shm.Arena(reduction.recv_handle(w.conn), message[1]) \
                    if message[1] else _shm.Arena()
                message = w.conn.recv()
        except (EOFError, OSError):
            return False
        if message[0] == "ready":
            w.ready, self._start_deaths = True, 0
            self.start_s += time.monotonic() - w.sent  # starting: busy, not waiting for samples
            return True
        if message[0] == "unloadable":  # every hook process would fail the same way
            self._unloadable = unloadable(self.named, message[1])
            raise OptionTypeError(self._unloadable)
        task = w.tasks.pop(0)
        w.since = time.monotonic()  # hook_timeout counts per sample
        if not w.tasks:  # its chunk is done: busy since it was sent (report())
            self.busy_s += w.since - w.sent
        if message[0] == "ok" and message[1] is None:
            task.error = (None, None, "returned None: a hook returns its result (a tensor or "
                          "array, or tuples, lists and dicts of them)")
        elif message[0] == "ok":
            task.result = _shm.unpack(message[1], w.outputs, copy=True) if task.into is None \
                else task.into(message[1], w.outputs)
        elif message[0] == "unsendable":
            task.error = (None, None, unsendable(*message[1:]))
        else:
            task.error = (message[1], message[2], None)
        task.done = True
        finished.append(task)
        return True

    def _died(self, w, finished):
        """w's process is gone: the sample it was on is charged with it."""
        try:
            code = w.process.wait(1)
        except subprocess.TimeoutExpired:
            code = None  # closed its socket but lives on: stopped all the same
        if w.tasks:
            self._charge(w, finished, f"killed its hook process {MAX_ATTEMPTS} times "
                         f"(last exit code {code})", f"a hook process died (exit code {code})")
            return
        # Before its first sample: nothing to charge, but a start that
        # fails every time must end too.
        self._replace(w)
        self._start_deaths += 1
        if self._start_deaths >= MAX_ATTEMPTS:
            raise HookError(f"the hook processes of {self.named} died {self._start_deaths} times "
                            f"in a row before their first sample (last exit code {code}), while "
                            "loading the hooks (importing their modules)")
        log.warning("stoker: a hook process died while it started (exit code %s); a new one "
                    "starts", code)

    def _charge(self, w, finished, error, warning):
        """w's process is gone or killed: the sample it was on is charged
        with it (error once it was MAX_ATTEMPTS times, else computed again in
        a new process, warning logged), the rest of its chunk goes back to
        the queue."""
        task = w.tasks.pop(0)
        self._queue.extendleft(reversed(w.tasks))
        w.tasks = []
        self._replace(w)
        task.attempts += 1
        if task.attempts >= MAX_ATTEMPTS:
            task.error = (None, None, error)
            task.done = True
            finished.append(task)
        else:
            log.warning("stoker: %s; its samples are computed again in a new process", warning)
            self._queue.appendleft(task)


def unloadable(named, error):
    """Why the hook processes cannot unpickle the hooks, for the caller."""
    why = ("Hook processes are fresh interpreters that import what a hook refers to by module "
           "name")
    if "__mp_main__" in error or "__main__" in error:
        why += (" and run no script of yours: a function of a process started by "
                "multiprocessing's spawn lives in __mp_main__, which they cannot import, and one "
                "of __main__ travels only by value, with cloudpickle")
    return f"{named} cannot be loaded in the hook processes: {error}. {why}. Define it in a " \
        "module on their sys.path"


def unsendable(type_name, error):
    """Why a hook's result cannot come back to the trainer."""
    hint = ""
    if "__mp_main__" in error or "__main__" in error:
        hint = (" (a result is pickled in the hook process, which runs no script of yours: "
                "define its classes in a module, not in __main__)")
    return f"returned {type_name}, which cannot be sent back to the trainer: {error}{hint}"


_pools = weakref.WeakSet()


def _forget_in_child():
    for pool in list(_pools):
        pool._forget()


os.register_at_fork(after_in_child=_forget_in_child)


def signature(value):
    """What must stay the same from sample to sample for a batch to stack:
    the shape and dtype of every array, the structure around them."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(signature(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, signature(v)) for k, v in value.items()))
    if hasattr(value, "__array__") and hasattr(value, "dtype"):
        return ("ndarray", tuple(value.shape), str(value.dtype))
    return ("value",)


def describe(sig):
    kind = sig[0]
    if kind in ("tensor", "ndarray"):
        return f"{kind} of shape {list(sig[1])} and dtype {sig[2]}"
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {describe(s)}" for k, s in sig[1]) + "}"
    if kind == "value":
        return "a Python value"
    return f"{kind}(" + ", ".join(describe(s) for s in sig[1]) + ")"  # a tuple, list, namedtuple


# numpy dtypes torch has no tensor of (1.13), and the one that holds each
# of their values without loss.
_WIDER = {numpy.dtype(numpy.uint16): numpy.int32, numpy.dtype(numpy.uint32): numpy.int64}


def _tensor(value):
    """A numpy array (or scalar) as a tensor, widened where torch lacks its
    dtype; TypeError naming the dtype when no tensor holds it."""
    a = numpy.asarray(value)
    if a.dtype in _WIDER:
        a = a.astype(_WIDER[a.dtype])
    try:
        return torch.as_tensor(a)
    except TypeError as e:
        raise TypeError(f"an array of dtype {a.dtype} makes no batch tensor: torch has no "
                        f"{a.dtype}, and no wider dtype of its holds every value of it; "
                        "convert it in the hook") from e


def collate(values, rows=None):
    """One batch from the samples' results: arrays stacked into a tensor
    (numpy arrays become tensors; uint16 and uint32, which torch lacks,
    int32 and int64), the same structure around them, any other value a
    list. rows: the batch built in place (_shm.Slot.rows), each sample's
    arrays a view of their row: its arrays are the batch's, no copy."""
    first = values[0]
    if isinstance(rows, _shm.Rows):
        batch = rows.batch()
        return batch if isinstance(batch, torch.Tensor) else _tensor(batch)
    if isinstance(first, torch.Tensor):
        return torch.stack(values)
    if hasattr(first, "__array__") and hasattr(first, "dtype"):
        return torch.stack([_tensor(v) for v in values])
    if isinstance(first, tuple):
        return _shm.like(first, [collate([v[i] for v in values], rows and rows[i])
                                 for i in range(len(first))])
    if isinstance(first, list):
        return [collate([v[i] for v in values], rows and rows[i]) for i in range(len(first))]
    if isinstance(first, dict):
        return {k: collate([v[k] for v in values], rows and rows[k]) for k in first}
    return list(values)
