# SPDX-License-Identifier: MIT
"""Hooks for test_hook_lifecycle.py: module-level, so that
hook processes import them by name. A hook
that starts a process writes its pid as a file name into the directory
$STOKER_TEST_PID_DIR, so that the test finds it (and kills it by pid)."""
import os
import subprocess
import time


def _record(kind, pid):
    open(os.path.join(os.environ["STOKER_TEST_PID_DIR"], f"{kind}-{pid}"), "w").close()


def recorded(directory, kind):
    """The pids a hook recorded in directory as kind."""
    return [int(name.split("-", 1)[1]) for name in os.listdir(directory)
            if name.startswith(kind + "-")]


def picked(image):
    return int(image.sum()) % 7 == 3


_helpers_started = False


def _start_helpers():
    """A `sleep 600` and a forked copy of this process that hangs, once per
    hook process, as a hook's helpers would be."""
    global _helpers_started
    if _helpers_started:
        return
    _helpers_started = True
    _record("helper", subprocess.Popen(["sleep", "600"]).pid)
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    _record("helper", pid)


def with_helpers(image, rng):
    _start_helpers()
    return image


def with_helpers_hang_on_picked(image, rng):
    _start_helpers()
    _record("hook", os.getpid())
    if picked(image):
        time.sleep(3600)
    return image


def fork_then_die_on_picked(image, rng):
    """On a picked image its process dies while a process it forked (which
    has its socket to the trainer) lives on."""
    if picked(image):
        pid = os.fork()
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        _record("helper", pid)
        os._exit(9)
    return image


def as_is(image, rng):
    return image
