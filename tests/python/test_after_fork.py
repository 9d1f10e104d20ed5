# SPDX-License-Identifier: MIT
"""A Loader inherited through os.fork(): the child has its memory but none
of its threads (and any mutex they held stays locked), so in the child
every method refuses with "created in process N: make a new Loader after
fork", and dropping it, or exiting with it alive, frees nothing of the
parent's. Before this a child that dropped the loader died of SIGSEGV and
one that iterated it hung. Real forks, mid-epoch, in a fresh interpreter."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

CHILD_TIMEOUT_S = 60

SCRIPT = textwrap.dedent("""
    import gc, os, sys
    import stoker

    shards = sys.argv[1:]
    def make():
        return stoker.Loader(shards, batch_size=8, image_size=32, threads=2, shuffle=False)

    loader = make()
    expected = 15  # 120 samples in batches of 8
    it = iter(loader)
    got = [next(it)[1], next(it)[1]]  # mid-epoch: its threads are decoding ahead

    def child(mode):
        if mode == "use":
            for use in (lambda: next(it), loader.stats, loader.report, lambda: next(iter(loader)),
                        loader._c.next, loader._c.take_log, lambda: loader._c.seek(0, 0)):
                try:
                    use()
                except RuntimeError as e:
                    assert f"created in process {os.getppid()}: make a new Loader after fork" \\
                        in str(e), str(e)
                else:
                    raise AssertionError("an inherited loader was used in the child")
            with make() as fresh:  # what the message says to do
                assert sum(1 for _ in fresh) == expected
        elif mode == "close":
            try:
                loader.close()
            except RuntimeError:
                pass
            else:
                raise AssertionError("close() of an inherited loader did not refuse")
        elif mode == "drop":
            global it
            del it
            gc.collect()
            globals().pop("loader")
            gc.collect()
        # "exit": interpreter shutdown with the loader, its iterator and batches alive
        sys.exit(0)

    for mode in ("use", "close", "drop", "exit"):
        pid = os.fork()
        if pid == 0:
            try:
                child(mode)
            except SystemExit:
                raise
            except BaseException:
                import traceback
                traceback.print_exc()
                os._exit(3)
        got.append(next(it)[1])  # the parent goes on meanwhile
        _, status = os.waitpid(pid, 0)
        print(mode, os.waitstatus_to_exitcode(status), flush=True)
    got += [labels for _, labels in it]
    print("parent", len(got), expected, flush=True)
""")


def test_inherited_loader_refuses_and_frees_nothing_in_the_child(even_shards, clean_env_factory):
    # A session of its own: a child that hangs is killed with its parent.
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, *even_shards], env=clean_env_factory(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"hung for {CHILD_TIMEOUT_S} s:\n{out}{err}")
    assert proc.returncode == 0, out + err
    lines = out.split("\n")
    # every child exited normally (a SIGSEGV reads -11, a failed check 3)
    assert lines[:4] == ["use 0", "close 0", "drop 0", "exit 0"], out + err
    assert lines[4] == "parent 15 15", out + err  # every batch, each once
