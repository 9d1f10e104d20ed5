# SPDX-License-Identifier: MIT
"""Hooks and a dataset for test_hook_lifecycle.py: module-level, so that
hook processes and spawned DataLoader workers import them by name. A hook
that starts a process writes its pid as a file name into the directory
$STOKER_TEST_PID_DIR, so that the test finds it (and kills it by pid)."""
import os
import subprocess
import time

import torch


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


class HookedInWorker(torch.utils.data.IterableDataset):
    """A DataLoader worker that makes a Loader(map=) of its own and records
    the pids of its hook processes and of their fork server."""

    def __init__(self, shards):
        self.shards = shards

    def __iter__(self):
        import stoker
        loader = stoker.Loader(self.shards, map=as_is, hook_processes=2, batch_size=8,
                               image_size=32, threads=1)
        for pid in loader._hooks.pool.pids():
            _record("hook", pid)
            with open(f"/proc/{pid}/stat") as f:
                _record("server", int(f.read().rsplit(") ", 1)[1].split()[1]))
        batches = iter(loader)
        # Left open: the worker exits (os._exit, no finalizer runs) with it.
        self.kept = (loader, batches)
        for _ in range(2):
            yield next(batches)[0].sum()
