# SPDX-License-Identifier: MIT
"""How hook processes start, die and are reaped: the client of a fork
server (forkserver).

Importing torch takes a second of a core (1.0-1.2 s here, torchvision 0.3 s
more); a fork of a process that has imported it takes milliseconds, and
the forks share its pages (torch's code and data: each hook process's
proportional share of them shrinks with their number). A loader's hook
Pool starts its own server; a Dask worker starts one when a job with hooks
first needs it (the trainer's warm_hooks task, cluster.worker), shared by
that worker's jobs and stopped when none is left, so that a job's hook
processes there start in milliseconds too.

multiprocessing's forkserver does the same for Process objects; a hook
process is not one (it talks over its own socket, whose end says that it
died), and the server's children must be killed and reaped on the Pool's
word, hence a server of our own with two requests.

A hook process is the server's child, not the Pool's: the Pool holds a
pidfd of it to kill it and to see it exit whether or not the server lives
(and whether or not a process it forked holds its socket), and asks the
server for its exit status.

The server and its hook processes serve the process that started them: in
a child of fork() (a DataLoader worker, a checkpoint writer) a ForkServer
forgets them (_forget_in_child) and asks nothing of them.
"""
import collections
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import weakref

from multiprocessing import connection, reduction

# The server runs with the trainer's sys.path, taken from PYTHONPATH: the
# '' that `-c` (or `-m`) puts first would import a torch.py or numpy.py of
# the directory the job runs in, which the trainer (`python train.py`)
# does not. Python 3.11's -P does this; stoker runs on older ones too.
_SERVER_MAIN = ("import sys; sys.path[:] = [p for p in sys.path if p]; "
                "from stoker.hooks.forkserver import main; main()")


def hook_process_env():
    """The environment of the server and so of every hook process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    # glibc's malloc in a fresh interpreter maps and unmaps each large
    # buffer of a torch op anew: measured 0.03 s of page faults per
    # image for GaussianBlur(11) x 10 at 224 px (none with these), which
    # forked DataLoader workers do not pay. Set, not defaulted: a Dask
    # nanny puts MALLOC_TRIM_THRESHOLD_=65536 in its worker's environment
    # (distributed.nanny.pre-spawn-environ, for the worker's own memory
    # reports), with which the same blurs took ~294 ms of CPU per image in
    # the worker's hook processes against ~45 ms, and the trainer then did
    # the worker's work itself. These processes are stoker's, not the
    # worker's: what they allocate is the hooks' batches.
    env["MALLOC_MMAP_THRESHOLD_"] = str(64 << 20)
    env["MALLOC_TRIM_THRESHOLD_"] = str(256 << 20)
    return env


class _Reply:
    __slots__ = ("done", "value")

    def __init__(self):
        self.done, self.value = False, None


class ForkServer:
    """The client of one fork server, thread-safe (the Pools of a Dask
    worker process share one). Started at the first fork() or by start();
    a server found dead is replaced at the next fork()."""

    def __init__(self):
        self._lock = threading.Lock()
        self._process = None
        self._control = None
        self._replies = collections.deque()  # what the requests sent wait for, in order
        _servers.add(self)

    def start(self):
        """Start the server now (it imports torch while the caller goes on)."""
        with self._lock:
            if self._control is None:
                self._start()

    def _start(self):
        ours, theirs = socket.socketpair()
        self._process = subprocess.Popen(
            [sys.executable, "-c", _SERVER_MAIN, str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),), env=hook_process_env(), stdin=subprocess.DEVNULL)
        theirs.close()
        self._control = connection.Connection(ours.detach())
        self._replies.clear()

    def _request(self, message, handle=None):
        """Send message (and handle, a file descriptor): its _Reply, filled
        in by _wait. The caller holds the lock."""
        if self._control is None:
            self._start()
        self._control.send(message)
        if handle is not None:
            reduction.send_handle(self._control, handle, self._process.pid)
        reply = _Reply()
        self._replies.append(reply)
        return reply

    def _wait(self, reply):
        """reply's value; the replies before it are read and kept on the way.
        Raises EOFError or OSError when the server died."""
        while not reply.done:
            self._read_reply()
        return reply.value

    def _read_reply(self):
        value = self._control.recv()
        first = self._replies.popleft()
        first.value = value
        first.done = True  # after the value: pid_of reads them without the lock

    def _lost(self):
        """The server died (killed): the next request starts a new one. Its
        children live on, reparented; their pidfds still see them."""
        self._control.close()
        self._control = None
        for reply in self._replies:
            reply.done = True  # no value: what a dead server knew is lost
        self._replies.clear()
        try:
            self._process.kill()
            self._process.wait(1)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def fork(self):
        """A new hook process: (its Forked handle, a connection to it). The
        handle's pid is known once the server answers; this call does not
        wait for it (a new server imports torch first)."""
        ours, theirs = socket.socketpair()
        with self._lock:
            try:
                reply = self._request(("fork",), theirs.fileno())
            except OSError:  # the server died since the last request
                self._lost()
                reply = self._request(("fork",), theirs.fileno())
        theirs.close()
        return Forked(self, reply), connection.Connection(ours.detach())

    def pid_of(self, reply):
        if reply.done:
            return reply.value
        with self._lock:
            if reply.done:
                return reply.value
            try:
                return self._wait(reply)
            except (EOFError, OSError):
                self._lost()
                return None

    def answered(self, reply):
        """Whether the server has answered reply, reading what it has sent
        without waiting for more (nor for a thread that waits for it)."""
        if reply.done or not self._lock.acquire(blocking=False):
            return reply.done
        try:
            while not reply.done and self._control is not None and self._control.poll():
                self._read_reply()
        except (EOFError, OSError):
            self._lost()
        finally:
            self._lock.release()
        return reply.done

    def reap(self, pid, timeout):
        """The exit status of the server's child pid (as Popen.returncode),
        'running' when it has not exited within timeout seconds, None when
        the server cannot say (it died, or the child was reaped already)."""
        with self._lock:
            if self._control is None:
                return None  # lost: a new server would not know the pid
            try:
                return self._wait(self._request(("reap", pid, timeout)))
            except (EOFError, OSError):
                self._lost()
                return None

    def close(self):
        """Stop the server (its children stop with their own sockets)."""
        with self._lock:
            if self._control is not None:
                self._lost()

    def _forget(self):
        """In a child of fork(): the server is the parent's. Close this
        process's copy of its socket, unread; the next fork() starts a
        server of this process's own."""
        self._lock = threading.Lock()  # another thread of the parent may have held it
        if self._control is not None:
            self._control.close()
        self._control = self._process = None
        for reply in self._replies:
            reply.done = True  # no value: the parent's server answers the parent
        self._replies.clear()


_servers = weakref.WeakSet()


def _forget_in_child():
    for server in list(_servers):
        server._forget()


os.register_at_fork(after_in_child=_forget_in_child)


class Forked:
    """A hook process forked by a ForkServer: what Pool needs of a Popen
    (pid, kill, wait). The pidfd sees the process whoever reaps it."""

    def __init__(self, server, reply):
        self._server, self._reply = server, reply
        self._pidfd = None
        self._exited = False
        self.returncode = None

    @property
    def pid(self):
        pid = self._server.pid_of(self._reply)
        if pid is not None and self._pidfd is None and not self._exited:
            try:  # unreaped by the server until it is asked: the pid is this process
                self._pidfd = os.pidfd_open(pid)
            except ProcessLookupError:  # its server died and it was reaped since
                self._exited = True
        return pid

    def watch_fd(self):
        """Its pidfd, readable once it has exited; None while the server has
        not said its pid (this call does not wait for that)."""
        if self._pidfd is None and not self._exited and self._server.answered(self._reply):
            self.pid  # opens the pidfd
        return self._pidfd

    def forget(self):
        """In a child of fork(): close this process's copy of the pidfd."""
        if self._pidfd is not None:
            os.close(self._pidfd)
        self._pidfd, self._exited = None, True

    def kill(self):
        if self.pid is None or self._pidfd is None:
            return  # never started (its server died first), or gone
        try:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout):
        """The exit status once the process has exited (None when not known),
        as Popen.wait: subprocess.TimeoutExpired when it has not in time."""
        if self.pid is None or self._pidfd is None:
            return self.returncode
        if not select.select([self._pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("hook process", timeout)
        code = self._server.reap(self.pid, 1.0)
        self.returncode = code if code != "running" else None
        os.close(self._pidfd)
        self._pidfd, self._exited = None, True
        return self.returncode
