# SPDX-License-Identifier: MIT
"""The fork server of hook processes: `python -m stoker._hook_forkserver
FD`, started by _hook_processes.ForkServer with its control socket on FD.
A fresh interpreter (never a fork of the threaded trainer or of a Dask
worker) that imports torch once and forks each hook process (_hook_worker)
from itself; it is single-threaded when it forks: importing torch starts
no thread (the intra-op pool starts at the first op, in a hook process).

Requests, answered in order: ("fork",) with a socket passed after it, the
hook process's end: answered with the child's pid; ("reap", pid, timeout):
answered with its exit status, "running", or None. A child stays unreaped
until asked, so that its pid is never reused while the Pool holds it.
"""
import gc
import os
import signal
import sys
import time
import traceback

from multiprocessing import connection, reduction

REAP_POLL_S = 0.01


def _reap(pid, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return "running"
        time.sleep(REAP_POLL_S)


def _child(control, fd):
    """In a forked hook process: the hook loop, then exit without the
    server's exit handlers."""
    code = 1
    try:
        control.close()
        from . import _hook_worker
        _hook_worker.main(connection.Connection(fd))
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def serve(control):
    # Ctrl-C goes to the whole process group: the trainer stops the hook
    # processes and this server itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch  # noqa: F401  what every hook process imports, once here
    try:  # and what most hooks use where it is installed (0.3 s, 20 MiB a process)
        import torchvision  # noqa: F401
    except ImportError:
        pass
    from . import _hook_worker  # noqa: F401  and the hook loop's own modules
    # What the imports made is never collected: frozen, the collector of
    # a hook process leaves those objects' pages alone, which stay shared.
    gc.freeze()
    children = set()  # forked, not reaped yet
    while True:
        try:
            message = control.recv()
            if message[0] == "fork":
                fd = reduction.recv_handle(control)
                pid = os.fork()
                if pid == 0:
                    _child(control, fd)
                os.close(fd)
                children.add(pid)
                control.send(pid)
            else:  # ("reap", pid, timeout)
                code = _reap(message[1], message[2])
                if code != "running":
                    children.discard(message[1])
                control.send(code)
        except (EOFError, OSError):
            break  # the Pool (or the Dask worker) is gone or closed the socket
    # Its hook processes go with it: one whose hook hangs would never read
    # the end of its own socket (the trainer killed with SIGKILL).
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    serve(connection.Connection(int(sys.argv[1])))
