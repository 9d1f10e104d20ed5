# SPDX-License-Identifier: MIT
"""Ctrl-C while next() waits in C raises KeyboardInterrupt within a second:
next() waits in slices and checks for signals between them (before, the
signal was seen only when a batch came: 192 s with a stalled HTTP shard at
the default io options, a whole batch when decode-bound). A real child
process gets a real SIGINT and is timed; the epoch's threads go on, and
close() after the interrupt returns promptly."""
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from servers import FaultServer  # noqa: E402  (the integration tests' HTTP server)

# The latency is timed: a test beside it on the second core would take part of it.
pytestmark = pytest.mark.serial

LATENCY_S = 1.0        # what the issue asks for
SIGNAL_AFTER_S = 0.5   # into the wait: next() is inside C by then
CLOSE_S = 10.0         # close() after the interrupt
CHILD_TIMEOUT_S = 60

# Each child takes Ctrl-C as a program started from a terminal does: a test
# run started in the background (a non-interactive shell's `&`) has SIGINT
# ignored, and its children would inherit that.
CHILD = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import stoker
    loader = stoker.Loader(sys.argv[2:], batch_size=int(sys.argv[1]), image_size=224, threads=1,
                           shuffle=False, transform="train")
    it = iter(loader)
    print("waiting", flush=True)
    started = time.monotonic()
    try:
        next(it)
        print("batch", flush=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
    t = time.monotonic()
    it.close()
    loader.close()
    print(f"closed {time.monotonic() - t:.2f}", flush=True)
""")


def readline(proc, deadline):
    """The child's next line, or None past the deadline."""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.05)
        if ready:
            return proc.stdout.readline().strip()
    return None


def interrupt_while_waiting(urls, batch_size, env):
    """(seconds from SIGINT to KeyboardInterrupt in the child, its close() line)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(batch_size), *urls], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert readline(proc, time.monotonic() + CHILD_TIMEOUT_S) == "waiting", \
            proc.stderr.read()
        time.sleep(SIGNAL_AFTER_S)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        line = readline(proc, sent + CHILD_TIMEOUT_S)
        latency = time.monotonic() - sent
        assert line == "KeyboardInterrupt", f"{line!r} after {latency:.2f} s"
        closed = readline(proc, time.monotonic() + CHILD_TIMEOUT_S)
        assert proc.wait(timeout=CHILD_TIMEOUT_S) == 0, proc.stderr.read()
        return latency, closed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_ctrl_c_with_a_stalled_http_shard(even_shards, clean_env_factory):
    """The server sends half the shard, then nothing for a minute: the
    reader waits at the default io options (a stall is only detected
    after io_timeout_ms, then retried)."""
    with open(even_shards[0], "rb") as f:
        files = {"s.tar": f.read()}
    with FaultServer(files, stall_s=CHILD_TIMEOUT_S) as server:
        latency, closed = interrupt_while_waiting([server.url("stall", "s.tar")], 20,
                                                  clean_env_factory())
    assert latency < LATENCY_S, f"KeyboardInterrupt {latency:.2f} s after SIGINT"
    assert float(closed.split()[1]) < CLOSE_S, closed


def test_ctrl_c_during_a_decode_bound_batch(tmp_path, dataset, write_shard, clean_env_factory):
    """One thread decodes a batch of 600 photos (several seconds): the
    interrupt comes in the middle of it."""
    samples = [s._replace(key=f"{copy}-{s.key}") for copy in range(5) for s in dataset]
    shard = write_shard(tmp_path / "big-000000.tar", samples)
    latency, closed = interrupt_while_waiting([shard], len(samples), clean_env_factory())
    assert latency < LATENCY_S, f"KeyboardInterrupt {latency:.2f} s after SIGINT"
    assert float(closed.split()[1]) < CLOSE_S, closed
