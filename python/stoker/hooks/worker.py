# SPDX-License-Identifier: MIT
"""The loop of one hook process (Loader(map=, batch_map=)), forked by the
fork server (forkserver) of a stoker.hooks.pool.Pool, which talks to it
over conn.

It answers the pickled hooks with ("ready",), or ("unloadable", why) and
ends; each sample of a chunk (its result written into its row of a batch
slot where the trainer says where, _shm.Slot) with ("ok", packed result), ("error",
exception, traceback) when the hook raised, whatever it raised, or
("unsendable", result type, why) when its result cannot be sent back."""
import io
import os
import pickle
import signal
import traceback

from multiprocessing import reduction
from multiprocessing.reduction import ForkingPickler

from . import arena as _shm
from ..base import rng as _rng


def main(conn):
    # Ctrl-C goes to the trainer's process group (this process leads its
    # own): the trainer stops this process itself, so that a half-done hook
    # never prints a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch
    torch.set_num_threads(1)  # one process is one core's share; also keeps results single-threaded
    hooks = _load(conn)
    if hooks is None:
        return
    inputs, outputs = _shm.Arena(), _shm.Arena()
    slots = {}  # key -> Arena: the batch slots this process writes results into
    end = 0
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the trainer is gone or closed the pipe
        if message[0] == "arena":
            fd = reduction.recv_handle(conn)
            inputs = _shm.Arena(fd, message[1])
            continue
        if message[0] == "slot":
            slots[message[1]] = _shm.Arena(reduction.recv_handle(conn), message[2])
            continue
        # A chunk of samples, answered one by one (its results stay in
        # the arena until the trainer has read them: the next chunk comes
        # only after).
        _, calls, packed = message
        args = _shm.unpack(packed, inputs, copy=False)
        # The slots of earlier chunks are written: their memory goes with
        # the trainer's views. An arena the last chunk left unused goes too
        # (results go to slots once the trainer knows their layout).
        used = {dest[0] for _, _, dest in calls if dest is not None}
        for old in [k for k in slots if k not in used]:
            slots.pop(old).close()
        if end == 0 and outputs.size:
            outputs.close()
            conn.send(("arena", 0))
        end = 0
        for (which, key, dest), arg in zip(calls, args):
            try:
                result = hooks[which](arg, _rng.seeded(key))
            except BaseException as e:  # sys.exit() and KeyboardInterrupt too: the hook's, not ours
                conn.send(("error", _picklable(e), traceback.format_exc()))
                continue
            try:
                slot = slots[dest[0]] if dest is not None else None
                size = _shm.packed_size(result, dest)
                if end + size > outputs.size:
                    outputs.ensure(max(size, 2 * outputs.size))
                    conn.send(("arena", outputs.size))
                    reduction.send_handle(conn, outputs.fd, os.getppid())
                    end = 0  # the trainer has copied what the old arena held
                reply, end = _shm.pack(result, outputs, end, "its result", dest, slot)
            except Exception as e:  # an array that cannot cross: the hook's error, and its cause
                conn.send(("error", _picklable(e), traceback.format_exc()))
                continue
            try:
                data = ForkingPickler.dumps(("ok", reply))  # as conn.send would, a failure apart
            except Exception as e:  # the hook did its work; its result cannot travel
                conn.send(("unsendable", _type_name(result), f"{type(e).__name__}: {e}"))
                continue
            conn.send_bytes(data)


def _load(conn):
    """The hooks, unpickled here, or None. What the trainer unpickles may
    not unpickle in this fresh interpreter (a function of a spawn-started
    process's __mp_main__, a module that is not on sys.path): then say so,
    once, to the trainer, and end without a traceback, rather than die as
    every other hook process would."""
    data = conn.recv_bytes()
    try:
        hooks = _Unpickler(io.BytesIO(data)).load()
    except BaseException as e:
        conn.send(("unloadable", f"{type(e).__name__}: {e}"))
        return None
    conn.send(("ready",))  # hook_timeout counts from here on, not the fork server's imports
    return hooks


class _Unpickler(pickle.Unpickler):
    """Names the global that did not import, module and name: here
    __main__ and __mp_main__ are the fork server's own module, which an
    AttributeError would name instead."""

    def find_class(self, module, name):
        try:
            return super().find_class(module, name)
        except Exception as e:
            raise ImportError(f"{module}.{name} cannot be imported in a hook process "
                              f"({type(e).__name__}: {e})") from e


def _type_name(value):
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"


def _picklable(e):
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return None
