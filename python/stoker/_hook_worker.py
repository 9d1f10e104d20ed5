"""The loop of one hook process (Loader(map=, batch_map=)): `python -m
stoker._hook_worker FD`, started by stoker._hooks.Pool with a socket on FD."""
import os
import pickle
import signal
import sys
import traceback

from multiprocessing import connection, reduction

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
        _, task, which, key, packed = message
        try:
            arg = _shm.unpack(packed, inputs, copy=False)
            result = hooks[which](arg, _rng.seeded(key))
            if outputs.ensure(_shm.packed_size(result)):
                conn.send(("arena", outputs.size))
                reduction.send_handle(conn, outputs.fd, os.getppid())
            reply = ("ok", task, _shm.pack(result, outputs))
            conn.send(reply)
        except Exception as e:  # the hook's own error goes back to the trainer as its cause
            conn.send(("error", task, _picklable(e), traceback.format_exc()))


def _picklable(e):
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return None


if __name__ == "__main__":
    main(connection.Connection(int(sys.argv[1])))
