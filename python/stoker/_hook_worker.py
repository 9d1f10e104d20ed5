# SPDX-License-Identifier: MIT
"""The loop of one hook process (Loader(map=, batch_map=)), forked by the
fork server (_hook_forkserver) of a stoker._hooks.Pool, which talks to it
over conn."""
import os
import pickle
import signal
import traceback

from multiprocessing import reduction

from . import _rng, _shm


def main(conn):
    # Ctrl-C goes to the whole process group: the trainer stops this
    # process itself, so that a half-done hook never prints a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch
    torch.set_num_threads(1)  # one process is one core's share; also keeps results single-threaded
    hooks = pickle.loads(conn.recv_bytes())
    inputs, outputs = _shm.Arena(), _shm.Arena()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the trainer is gone or closed the pipe
        if message[0] == "arena":
            fd = reduction.recv_handle(conn)
            inputs = _shm.Arena(fd, message[1])
            continue
        # A chunk of samples, answered one by one (its results stay in
        # the arena until the trainer has read them: the next chunk comes
        # only after).
        _, calls, packed = message
        args = _shm.unpack(packed, inputs, copy=False)
        end = 0
        for (which, key), arg in zip(calls, args):
            try:
                result = hooks[which](arg, _rng.seeded(key))
                size = _shm.packed_size(result)
                if end + size > outputs.size:
                    outputs.ensure(max(size, 2 * outputs.size))
                    conn.send(("arena", outputs.size))
                    reduction.send_handle(conn, outputs.fd, os.getppid())
                    end = 0  # the trainer has copied what the old arena held
                reply, end = _shm.pack(result, outputs, end, "its result")
                conn.send(("ok", reply))
            except Exception as e:  # the hook's error goes back to the trainer as its cause
                conn.send(("error", _picklable(e), traceback.format_exc()))


def _picklable(e):
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return None
