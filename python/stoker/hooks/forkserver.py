# SPDX-License-Identifier: MIT
"""The fork server of hook processes: main(), started by
processes.ForkServer with its control socket and the pid of the
process it serves (the trainer, or a Dask worker process: "the trainer"
below). A fresh interpreter (never a fork of the threaded trainer or of
a Dask worker) that imports torch once and forks each hook process
(_hook_worker) from itself; it is single-threaded when it forks: importing
torch starts no thread (the intra-op pool starts at the first op, in a
hook process).

Requests, answered in order: ("fork",) with a socket passed after it, the
hook process's end: answered with the child's pid; ("reap", pid, timeout):
answered with its exit status, "running", or None. A child stays unreaped
until asked, so that its pid is never reused while the Pool holds it.

Each hook process leads a process group of its own, so that what its hooks
fork (a helper, a multiprocessing pool, a `sleep` in a shell) dies with
it: the group is killed when the hook process is reaped (the pid is still
the group's then) and when the server ends. A hook process also watches
the trainer itself: when the server died first (an OOM kill) and then the
trainer, nothing else is left to kill a hook that hangs.
"""
import gc
import os
import select
import signal
import sys
import threading
import time
import traceback

from multiprocessing import connection, reduction

REAP_POLL_S = 0.01


def _kill_group(pid):
    """Kill pid's process group: it (unreaped: the group id is still its
    own) and what it forked."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # no member left
        pass


def _reap(pid, timeout):
    # Asked once the Pool has killed it or seen it die: what it forked goes too.
    _kill_group(pid)
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


def _die_with(trainer):
    """A thread of the hook process that kills its group when the trainer
    (its pidfd) exits."""
    def watch():
        select.select([trainer], [], [])
        os.killpg(0, signal.SIGKILL)
    threading.Thread(target=watch, name="stoker-trainer-watch", daemon=True).start()


def _child(control, fd, trainer):
    """In a forked hook process: the hook loop, then exit without the
    server's exit handlers."""
    try:
        control.close()
        os.setpgid(0, 0)  # the server does too: whichever runs first
        _die_with(trainer)
        from . import worker as _hook_worker
        _hook_worker.main(connection.Connection(fd))
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    # The trainer closed the socket or is gone: what the hooks forked goes
    # with this process (the group it leads, itself included).
    os.killpg(0, signal.SIGKILL)


def serve(control, trainer):
    """Answer control's requests until it closes or the trainer (its pidfd)
    exits."""
    # Ctrl-C goes to the whole process group: the trainer stops the hook
    # processes and this server itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch  # noqa: F401  what every hook process imports, once here
    try:  # and what most hooks use where it is installed (0.3 s, 20 MiB a process)
        import torchvision  # noqa: F401
    except ImportError:
        pass
    from . import worker as _hook_worker  # noqa: F401  and the hook loop's own modules
    # What the imports made is never collected: frozen, the collector of
    # a hook process leaves those objects' pages alone, which stay shared.
    gc.freeze()
    children = set()  # forked, not reaped yet
    while True:
        try:
            # A copy of the trainer's end of control (in a process the
            # trainer forked) would hide its end: its pidfd says it.
            if control not in connection.wait([control, trainer]):
                break
            message = control.recv()
            if message[0] == "fork":
                fd = reduction.recv_handle(control)
                pid = os.fork()
                if pid == 0:
                    _child(control, fd, trainer)
                try:
                    os.setpgid(pid, pid)  # before its pid goes to the Pool
                except (ProcessLookupError, PermissionError):
                    pass  # it has done so itself (and maybe exited)
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
        _kill_group(pid)


def main():
    """sys.argv[1:]: the control socket's fd, the trainer's pid."""
    trainer_pid = int(sys.argv[2])
    try:
        trainer = os.pidfd_open(trainer_pid)
    except ProcessLookupError:
        return  # it exited already
    if os.getppid() != trainer_pid:
        return  # it exited already, and that pid is another process's now
    serve(connection.Connection(int(sys.argv[1])), trainer)
