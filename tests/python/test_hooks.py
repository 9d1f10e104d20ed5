# SPDX-License-Identifier: MIT
"""Loader(map=, batch_map=): user hooks in hook processes.

The promises under test: an epoch is byte-identical whatever the number of
hook processes and decode threads, and after a resume, because every
sample's random stream is keyed by its identity; a hook's failure (an
exception, a wrong shape, a hang, its process killed) is named or repaired;
closing the loader, Ctrl-C and interpreter exit leave no hook process.
"""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import types

import numpy
import pytest
import torch

import stoker
import hook_fns

SMALL = dict(batch_size=8, image_size=32, shuffle_buffer=16, seed=5)


def epoch(loader):
    return [tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in b) for b in loader]


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            assert torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v


# How long stopped hook processes may take to be gone: they are killed at
# once, but on a loaded 2-core machine the processes that kill and reap them
# may wait seconds for a core. A hook that is never stopped still fails.
GONE_S = 10.0


def gone(pids, within_s):
    """True when none of pids is alive (or a zombie of ours) within_s from now."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(") ")[1][0] != "Z":
                        alive.append(pid)
            except FileNotFoundError:
                pass
        if not alive:
            return True
        time.sleep(0.02)
    return False


@pytest.fixture(scope="module")
def reference(even_shards):
    """One hook process, one decode thread: the epoch every other run must equal."""
    with stoker.Loader(even_shards, map=hook_fns.augment, batch_map=hook_fns.mixup,
                       hook_processes=1, threads=1, **SMALL) as loader:
        return epoch(loader)


@pytest.mark.parametrize("processes,threads", [(2, 2), (3, 1)])
def test_epoch_is_the_same_whatever_processes_and_threads(even_shards, reference, processes,
                                                          threads):
    with stoker.Loader(even_shards, map=hook_fns.augment, batch_map=hook_fns.mixup,
                       hook_processes=processes, threads=threads, **SMALL) as loader:
        same(epoch(loader), reference)


def test_hooks_change_the_batch_and_follow_the_seed(even_shards, reference):
    with stoker.Loader(even_shards, threads=1, **SMALL) as plain:
        plain_epoch = epoch(plain)
    assert len(plain_epoch) == len(reference) == 15
    assert reference[0][0].dtype == torch.float32 and reference[0][1].shape == (8, 1000)
    assert not torch.equal(reference[0][0], plain_epoch[0][0].float())
    other = dict(SMALL, seed=6)
    with stoker.Loader(even_shards, map=hook_fns.augment, hook_processes=1, **other) as a, \
            stoker.Loader(even_shards, **other) as b:
        hooked, raw = next(iter(a))[0], next(iter(b))[0]
    assert hooked.shape == raw.shape and not torch.equal(hooked, raw)


def test_resume_mid_epoch_gives_the_rest_of_the_epoch(even_shards, reference):
    with stoker.Loader(even_shards, map=hook_fns.augment, batch_map=hook_fns.mixup,
                       hook_processes=2, **SMALL) as loader:
        for i, _ in enumerate(loader):
            if i == 5:
                break
        state = loader.state_dict()
    with stoker.Loader(even_shards, map=hook_fns.augment, batch_map=hook_fns.mixup,
                       hook_processes=2, **SMALL) as loader:
        loader.load_state_dict(state)
        same(epoch(loader), reference[6:])


def test_every_generator_is_keyed_per_sample_and_epoch(even_shards):
    with stoker.Loader(even_shards, map=hook_fns.draws, hook_processes=2, **SMALL) as loader:
        first, second = torch.cat([b[0] for b in loader]), torch.cat([b[0] for b in loader])
    with stoker.Loader(even_shards, map=hook_fns.draws, hook_processes=1, **SMALL) as loader:
        again = torch.cat([b[0] for b in loader])
    assert torch.equal(first, again)
    for column in range(5):  # each generator differs from sample to sample and across epochs
        assert len(set(first[:, column].tolist())) == len(first)
        assert not torch.equal(first[:, column], second[:, column])


def _mix(a, b):
    """stoker's stk__mix (src/base/rng.c): SplitMix64's finalizer, twice."""
    def finalize(z):
        z &= (1 << 64) - 1
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
        return z ^ (z >> 31)
    return finalize(finalize(a + 0x9E3779B97F4A7C15) ^ b)


def test_the_hook_key_is_the_key_of_stokers_own_draws(even_shards):
    """rng.key is what src/image/augment.c keys the crop and flip with:
    mix(seed, epoch, shard, pass, position among the shard's samples), not
    a key of the hook's own."""
    from conftest import read_shards
    where = {}
    for shard, url in enumerate(even_shards):
        keys = [s.key for s in read_shards([url])]
        where.update({(url, k): (shard, position) for position, k in enumerate(keys)})
    with stoker.Loader(even_shards, map=hook_fns.rng_key, hook_processes=2,
                       fields=("jpg", "__key__", "__url__"), **SMALL) as loader:
        for epoch_number in (0, 1):
            seen = 0
            for batch in loader:
                for key, name, url in zip(batch["key"].tolist(), batch["name"], batch["url"]):
                    shard, position = where[(url, name)]
                    expected = _mix(_mix(_mix(_mix(SMALL["seed"], epoch_number), shard), 0),
                                    position ^ 0x417567)
                    assert key % (1 << 64) == expected, (url, name)
                    seen += 1
            assert seen == len(where)


def test_hook_exception_names_the_sample_and_hook_with_its_traceback(even_shards):
    with stoker.Loader(even_shards, map=hook_fns.fail_on_picked, hook_processes=2,
                       **SMALL) as loader:
        with pytest.raises(stoker.HookError) as info:
            epoch(loader)
    message = str(info.value)
    assert "map=fail_on_picked" in message and "is 3 mod 7" in message
    assert ".tar" in message and "sample '" in message
    cause = info.value.__cause__
    assert isinstance(cause, ValueError)
    assert "hook_fns.py" in str(cause.__cause__) and "fail_on_picked" in str(cause.__cause__)


def test_skip_counts_and_replaces_a_failed_sample(even_shards, caplog):
    with stoker.Loader(even_shards, map=hook_fns.fail_on_picked, hook_processes=2,
                       on_error="skip", **SMALL) as loader:
        batches = epoch(loader)
        skipped = loader.stats()["hook_samples_skipped"]
    with stoker.Loader(even_shards, **SMALL) as plain:
        images = torch.cat([b[0].clone() for b in plain])
    picked = sum(hook_fns.picked(image) for image in images)
    assert picked >= 1 and skipped == picked
    assert sum(len(b[0]) for b in batches) == len(images)  # replaced, not dropped
    assert not any(hook_fns.picked(image) for b in batches for image in b[0])
    assert "skipped (on_error=skip)" in caplog.text


def test_wrong_shape_names_the_sample_got_and_expected(even_shards):
    with stoker.Loader(even_shards, map=hook_fns.wrong_shape_on_picked, hook_processes=1,
                       **SMALL) as loader:
        with pytest.raises(stoker.HookError, match=r"returned tensor of shape \[3, 31, 32\] and "
                           r"dtype torch.uint8 for sample '.*' of .*\.tar, but the first sample "
                           r"gave tensor of shape \[3, 32, 32\]"):
            epoch(loader)


def test_a_hang_ends_at_hook_timeout(even_shards):
    started = time.monotonic()
    with stoker.Loader(even_shards, map=hook_fns.hang_on_picked, hook_processes=2,
                       hook_timeout=1.5, **SMALL) as loader:
        with pytest.raises(stoker.HookError, match=r"did not return within hook_timeout=1.5 s, "
                           r"3 times \(its process was killed each time\)"):
            epoch(loader)
    assert time.monotonic() - started < 60


def test_a_timed_out_sample_is_computed_again_in_a_new_process(even_shards, tmp_path, caplog):
    """As a sample whose process died: the hang may be the machine's, not
    the sample's (before: a HookError at the first timeout)."""
    with stoker.Loader(even_shards, threads=1, **SMALL) as plain:
        want = epoch(plain)
    with stoker.Loader(even_shards, map=hook_fns.HangOnce(str(tmp_path)), hook_processes=2,
                       hook_timeout=1.5, threads=1, **SMALL) as loader:
        got = epoch(loader)
        assert loader.stats()["hook_processes_restarted"] >= 1
    same(got, want)
    assert "a hook did not return within hook_timeout=1.5 s: its process was killed" in \
        caplog.text


def test_hook_timeout_counts_the_hook_not_the_start_of_its_process(even_shards):
    """The clock starts when a sample is handed to a process that has
    loaded the hooks: not while its fork server imports torch, or the
    hook's own module takes seconds to import (here 4 s, against a 2 s
    limit for an instant hook; before: "did not return within", and a new
    process would take as long again: the epoch could not end)."""
    with stoker.Loader(even_shards, map=hook_fns.SlowToLoad(4.0), hook_processes=2,
                       hook_timeout=2.0, **SMALL) as loader:
        assert len(epoch(loader)) == 15


def test_a_killed_hook_process_changes_nothing(even_shards):
    with stoker.Loader(even_shards, map=hook_fns.slow_identity, hook_processes=2,
                       threads=1, **SMALL) as loader:
        reference = epoch(loader)
    with stoker.Loader(even_shards, map=hook_fns.slow_identity, hook_processes=2,
                       threads=1, **SMALL) as loader:
        got = []
        for i, batch in enumerate(loader):
            got.append(tuple(x.clone() for x in batch))
            if i == 3:
                os.kill(loader._hooks.pool.pids()[0], signal.SIGKILL)
        assert loader.stats()["hook_processes_restarted"] >= 1
    same(got, reference)


def test_a_sample_that_kills_its_process_every_time_is_an_error(even_shards):
    with stoker.Loader(even_shards, map=hook_fns.die_on_picked, hook_processes=2,
                       **SMALL) as loader:
        with pytest.raises(stoker.HookError, match=r"killed its hook process 3 times"):
            epoch(loader)



def test_hook_processes_that_die_while_loading_the_hooks_are_an_error(even_shards):
    """No sample to charge, but no endless restarts either."""
    with stoker.Loader(even_shards, map=hook_fns.DiesOnLoad(0), hook_processes=1,
                       **SMALL) as loader:
        with pytest.raises(stoker.HookError, match=r"the hook processes of the hook "
                           r"\(map=DiesOnLoad\) died 3 times in a row before their first sample "
                           r"\(last exit code 9\), while loading the hooks"):
            next(iter(loader))


@pytest.mark.parametrize("hook,raised", [(hook_fns.exit_on_picked, "SystemExit(3)"),
                                         (hook_fns.interrupt_on_picked, "KeyboardInterrupt()")])
def test_a_hook_that_exits_or_is_interrupted_says_so(even_shards, hook, raised):
    """Its exception, as any other (before: "killed its hook process 3
    times", the process having exited with the hook)."""
    with stoker.Loader(even_shards, map=hook, hook_processes=2, **SMALL) as loader:
        with pytest.raises(stoker.HookError) as info:
            epoch(loader)
        assert loader.stats()["hook_processes_restarted"] == 0
    assert f"map={hook.__name__} raised {raised} on sample '" in str(info.value), info.value
    assert type(info.value.__cause__).__name__ == raised.split("(")[0]


@pytest.mark.parametrize("which", ["map", "batch_map"])
def test_a_hook_that_returns_none_says_so(even_shards, which):
    """Before: "failed on every sample of batch 0"."""
    with stoker.Loader(even_shards, hook_processes=1, **{which: hook_fns.forgets_return},
                       **SMALL) as loader:
        with pytest.raises(stoker.HookError, match=rf"hook {which}=forgets_return on (sample '.*' "
                           r"of .*\.tar|batch 0) \(key \d+\) returned None: a hook returns its "
                           r"result \(a tensor or array"):
            epoch(loader)


def test_a_namedtuple_result_keeps_its_type(even_shards):
    """Its class pickles by name (before: a plain tuple)."""
    with stoker.Loader(even_shards, map=hook_fns.as_stats, hook_processes=1, **SMALL) as loader:
        (stats, labels) = next(iter(loader))
    assert type(stats) is hook_fns.Stats and stats.image.shape == (8, 3, 32, 32)
    assert torch.equal(stats.total, stats.image.sum(dim=(1, 2, 3)))


MAIN_RESULTS = """
import collections, dataclasses, sys
import stoker


@dataclasses.dataclass
class Boxed:
    image: object


Pair = collections.namedtuple("Pair", "image total")


def boxed(image, rng):
    return Boxed(image)


def pair(image, rng):
    return Pair(image, image.sum())


for hook in (boxed, pair):
    with stoker.Loader(sys.argv[1:], map=hook, hook_processes=1, batch_size=8,
                       image_size=32) as loader:
        try:
            next(iter(loader))
            print("a batch")
        except stoker.HookError as e:
            print(e)
"""


def test_a_result_of_a_class_of_main_says_it_cannot_come_back(even_shards, clean_env_factory):
    """A hook process runs no __main__ of the script: a result of a class
    defined there cannot be pickled back (before: the PicklingError was
    the hook's own failure, "failed on sample")."""
    proc = subprocess.run([sys.executable, "-c", MAIN_RESULTS, *even_shards], timeout=180,
                          capture_output=True, text=True, env=clean_env_factory())
    assert proc.returncode == 0, proc.stderr
    boxed, pair = proc.stdout.splitlines()
    for line, name in ((boxed, "Boxed"), (pair, "Pair")):
        assert re.search(rf"map=.* on sample '.*' of .*\.tar \(key \d+\) returned __main__\."
                         rf"{name}, which cannot be sent back to the trainer: .*__main__\.{name}"
                         r".* define its classes in a module, not in __main__", line), line


def test_a_hook_the_hook_processes_cannot_import_is_named_once(even_shards, monkeypatch, capfd,
                                                               caplog):
    """A function of a process started by multiprocessing's spawn lives in
    __mp_main__: pickled by reference, unpickled by the trainer, but not
    importable in a hook process (before: each one died with a traceback,
    warnings, then "killed its hook process 3 times")."""
    main = types.ModuleType("__mp_main__")
    exec("def spawned_hook(image, rng):\n    return image\n", main.__dict__)
    monkeypatch.setitem(sys.modules, "__mp_main__", main)
    with stoker.Loader(even_shards, map=main.spawned_hook, hook_processes=2, **SMALL) as loader:
        with pytest.raises(stoker.OptionTypeError) as info:
            next(iter(loader))
        with pytest.raises(stoker.OptionTypeError):  # the next iteration says so again
            next(iter(loader))
        assert loader.stats()["hook_processes_restarted"] == 0
    message = str(info.value)
    assert message.startswith("the hook (map=spawned_hook) cannot be loaded in the hook "
                              "processes"), message
    assert "__mp_main__.spawned_hook cannot be imported in a hook process" in message
    assert "multiprocessing's spawn" in message
    assert "Traceback" not in capfd.readouterr().err and "hook process" not in caplog.text


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(") ", 1)[1].split()[1])


def test_close_stops_the_hook_processes_and_their_fork_server_at_once(even_shards):
    """The hook processes are forks of one fork server, a child of the
    trainer that has imported torch once for all of them."""
    loader = stoker.Loader(even_shards, map=hook_fns.slow_identity, hook_processes=3, **SMALL)
    it = iter(loader)
    next(it)
    pids = loader._hooks.pool.pids()
    servers = {parent_of(pid) for pid in pids}
    assert len(pids) == 3 and len(servers) == 1, (pids, servers)
    assert parent_of(next(iter(servers))) == os.getpid()
    started = time.monotonic()
    loader.close()
    assert gone(pids + list(servers), GONE_S) and time.monotonic() - started < GONE_S


def test_a_killed_fork_server_is_replaced_and_changes_nothing(even_shards, reference):
    """Killed mid-epoch, the server's hook processes go on; the next one
    needed (a hook process killed too) comes from a new server."""
    with stoker.Loader(even_shards, map=hook_fns.augment, batch_map=hook_fns.mixup,
                       hook_processes=2, threads=1, **SMALL) as loader:
        got = []
        for i, batch in enumerate(loader):
            got.append(tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in batch))
            if i == 2:
                first = loader._hooks.pool.pids()
                server = parent_of(first[0])
                os.kill(server, signal.SIGKILL)
                os.kill(first[0], signal.SIGKILL)
        now = loader._hooks.pool.pids()
        assert loader.stats()["hook_processes_restarted"] >= 1
        assert now[1] == first[1] and parent_of(now[0]) not in (server, os.getpid()), (first, now)
    same(got, reference)


def test_repr_names_the_hooks_and_no_image_size_without_a_transform(even_shards):
    with stoker.Loader(even_shards, map=hook_fns.augment, batch_map=hook_fns.mixup,
                       hook_processes=1, **SMALL) as loader:
        text = repr(loader)
    assert "map=augment, batch_map=mixup" in text and "image_size=32" in text, text
    with stoker.Loader(even_shards, transform=None, map=hook_fns.crop_whole, hook_processes=1,
                       **{k: v for k, v in SMALL.items() if k != "image_size"}) as loader:
        text = repr(loader)
    assert "transform=None" in text and "map=crop_whole" in text, text
    assert "image_size" not in text and "dtype" not in text, text  # before: image_size=224


def test_the_hook_processes_start_with_the_loader(even_shards):
    """Before the first batch is asked for: their imports overlap whatever
    the caller does meanwhile."""
    with stoker.Loader(even_shards, map=hook_fns.slow_identity, hook_processes=2,
                       **SMALL) as loader:
        pids = loader._hooks.pool.pids()
        assert len(pids) == 2 and not gone(pids, 0.1)
    assert gone(pids, GONE_S)


def test_a_task_aside_runs_while_another_thread_steps_the_pool():
    """The cluster's canary (Pool.run_aside) shares the hook processes with
    the thread making batches: each gets its own tasks back, every one
    once, whichever thread's step finished it."""
    import threading
    from stoker.hooks.pool import Pool, Task, dumps
    pool = Pool(dumps({"map": hook_fns.slow_identity}), 1, None)
    try:
        owner = object()
        mine = [Task("map", k, torch.full((4,), k), owner) for k in range(60)]
        aside = [Task("map", 1000 + k, torch.full((4,), 1000 + k), None) for k in range(5)]

        def run_aside():
            for task in aside:
                assert pool.run_aside(task, 30.0)

        thread = threading.Thread(target=run_aside)
        for task in mine:
            pool.submit(task)
        thread.start()
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(mine) and time.monotonic() < deadline:
            got += pool.step(0.05)
        thread.join()
        assert sorted(t.key for t in got) == list(range(60))  # each once, none aside
        for task in mine + aside:
            assert task.done and task.error is None and torch.equal(task.result, task.arg + 1)
    finally:
        pool.close()


def test_an_iteration_stopped_early_leaves_no_sample_queued(even_shards):
    """Its batches' samples not sent to a hook process yet are dropped: the
    processes go on to the next iteration's at once."""
    with stoker.Loader(even_shards, map=hook_fns.slow_identity, hook_processes=1,
                       **dict(SMALL, batch_size=40)) as loader:
        it = iter(loader)
        next(it)
        assert loader._hooks.pool._queue  # the next batches' samples wait
        it.close()
        assert not loader._hooks.pool._queue


def test_closing_the_pool_while_a_task_runs_aside_leaves_no_process():
    """The cluster's canary may be waiting in run_aside when the loader
    closes: it returns at once, and no step starts a process again."""
    import threading
    from stoker.hooks.pool import Pool, Task, dumps
    pool = Pool(dumps({"map": hook_fns.hang_on_picked}), 1, None)
    pool.start()
    pids = pool.pids()
    hanging = torch.full((3, 4, 4), 1, dtype=torch.uint8)
    while not hook_fns.picked(hanging):
        hanging += 1
    task = Task("map", 1, hanging, None)
    result = []
    thread = threading.Thread(target=lambda: result.append(pool.run_aside(task, 60.0)))
    thread.start()
    time.sleep(0.5)  # it waits on the hanging hook
    started = time.monotonic()
    pool.close()
    thread.join(5)
    assert result == [False] and time.monotonic() - started < GONE_S
    assert pool.step(0.05) == [] and pool.pids() == []
    assert gone(pids, GONE_S)


EXIT_SCRIPT = """
import os, signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # ignored in a test run started with &
import stoker
sys.path.insert(0, {tests!r})
import hook_fns
loader = stoker.Loader({shards!r}, map=hook_fns.hang_on_picked, hook_processes=2,
                       batch_size=8, image_size=32)
it = iter(loader)


def drain():
    for batch in it:  # a seventh of the images hang: it waits on one of them
        pass


def show_pids():  # the hook processes start with the first samples sent
    while len(loader._hooks.pool.pids()) < 2:
        time.sleep(0.02)
    print(*loader._hooks.pool.pids(), flush=True)


if sys.argv[1] == "exit":  # interpreter exit while a hook hangs in another thread
    threading.Thread(target=drain, daemon=True).start()
    show_pids()
    time.sleep(0.5)
    sys.exit(0)
threading.Thread(target=show_pids, daemon=True).start()
drain()  # until Ctrl-C
"""


@pytest.mark.parametrize("how", ["exit", "ctrl-c", "kill"])
def test_exit_ctrl_c_and_kill_leave_no_hook_process(even_shards, clean_env_factory, how):
    """kill: the trainer killed with SIGKILL while a hook hangs; its fork
    server sees the end of its socket and kills the hook processes (the
    hanging one never reads the end of its own)."""
    script = EXIT_SCRIPT.format(tests=os.path.dirname(__file__), shards=even_shards)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), how],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env_factory())
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2, proc.stderr.read()
        if how in ("ctrl-c", "kill"):
            time.sleep(0.5)
            started = time.monotonic()
            proc.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
        else:
            started = time.monotonic()
        proc.wait(20)
        assert gone(pids, GONE_S), f"hook processes alive {time.monotonic() - started:.1f} s later"
    finally:
        proc.kill()
        proc.wait()
    if how == "ctrl-c":
        assert "KeyboardInterrupt" in proc.stderr.read()


def test_a_hook_that_cannot_be_pickled_is_refused_at_construction(even_shards):
    import threading
    lock = threading.Lock()
    with pytest.raises(stoker.OptionTypeError, match=r"map=.*cannot be sent to hook processes"):
        stoker.Loader(even_shards, map=lambda image, rng: (lock, image), **SMALL)


def test_hook_options_are_checked(even_shards):
    with pytest.raises(stoker.OptionError, match="hook_processes must be an int >= 1"):
        stoker.Loader(even_shards, map=hook_fns.augment, hook_processes=0, **SMALL)
    with pytest.raises(stoker.OptionError,
                       match="hook_timeout must be a finite number of seconds > 0"):
        stoker.Loader(even_shards, map=hook_fns.augment, hook_timeout=-1, **SMALL)
    with pytest.raises(stoker.OptionError,
                       match="hook_processes= acts only with map= or batch_map="):
        stoker.Loader(even_shards, hook_processes=2, **SMALL)
    with pytest.raises(stoker.OptionTypeError, match="map must be a callable"):
        stoker.Loader(even_shards, map="augment", **SMALL)


WHOLE = dict(batch_size=8, shuffle_buffer=16, seed=5, transform=None)


@pytest.fixture(scope="module")
def whole_reference(even_shards):
    with stoker.Loader(even_shards, map=hook_fns.crop_whole, hook_processes=1, threads=1,
                       **WHOLE) as loader:
        return epoch(loader)


def test_transform_none_crops_in_the_hook_the_same_with_1_and_2_processes_and_resume(
        even_shards, whole_reference):
    with stoker.Loader(even_shards, threads=1, **SMALL) as plain:
        labels = [b[1].clone() for b in plain]
    assert len(whole_reference) == len(labels) == 15
    assert whole_reference[0][0].shape == (8, 3, 48, 48)
    assert whole_reference[0][0].dtype == torch.uint8
    # The same samples in the same order as stoker's own transform gives.
    assert all(torch.equal(b[1], l) for b, l in zip(whole_reference, labels))
    with stoker.Loader(even_shards, map=hook_fns.crop_whole, hook_processes=2, threads=2,
                       **WHOLE) as loader:
        same(epoch(loader), whole_reference)
        second = epoch(loader)
        state = dict(loader.state_dict(), epoch=1, batch=5)  # as if stopped there
    assert not torch.equal(second[0][0], whole_reference[0][0])  # the key follows the epoch
    with stoker.Loader(even_shards, map=hook_fns.crop_whole, hook_processes=2, **WHOLE) as loader:
        loader.load_state_dict(state)
        same(epoch(loader), second[5:])


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_transform_none_gives_the_hook_the_whole_decoded_image(even_shards, dataset, layout):
    from PIL import Image
    import io
    with stoker.Loader(even_shards, map=hook_fns.whole_image, fields=("jpg", "__key__"),
                       hook_processes=2, layout=layout, **WHOLE) as loader:
        got = [(name, shape.tolist(), int(total), dtype) for b in loader
               for name, shape, total, dtype in zip(b["name"], b["shape"], b["sum"], b["dtype"])]
    expected = {}
    for s in dataset:
        pixels = torch.from_numpy(numpy.array(Image.open(io.BytesIO(s.jpg)).convert("RGB")))
        if layout == "nchw":
            pixels = pixels.permute(2, 0, 1)
        expected[s.key] = (list(pixels.shape), int(pixels.sum()))
    assert len(got) == len(expected) == 120
    assert len({tuple(shape) for _, shape, _, _ in got}) > 1  # any size
    for name, shape, total, dtype in got:
        assert (shape, total) == expected[name] and dtype == "torch.uint8"


def test_max_batches_1_is_enough_with_hooks(even_shards, reference, whole_reference):
    """The hooks' thread lets go of a C batch's views before it fetches the
    next one, and what the loop gets are copies: one C buffer does (before:
    BusyError, blaming the loop)."""
    with stoker.Loader(even_shards, map=hook_fns.augment, batch_map=hook_fns.mixup,
                       hook_processes=2, max_batches=1, **SMALL) as loader:
        same(epoch(loader), reference)
    with stoker.Loader(even_shards, map=hook_fns.crop_whole, hook_processes=2, max_batches=1,
                       **WHOLE) as loader:
        same(epoch(loader), whole_reference)
    with stoker.Loader(even_shards, batch_map=hook_fns.mixup, hook_processes=1, max_batches=1,
                       **SMALL) as loader:
        assert len(epoch(loader)) == 15


def test_transform_none_decoders_agree(dataset):
    """Without torchvision the hook process decodes with Pillow: same pixels."""
    from stoker.hooks import decode as _hook_decode
    for s in dataset[:10]:
        data = numpy.frombuffer(s.jpg, dtype=numpy.uint8)
        assert torch.equal(_hook_decode._decoder()(data), _hook_decode._decode_pillow(data))
    with pytest.raises(ValueError, match=r"the image does not decode \(10 bytes\)"):
        _hook_decode.DecodeFirst(hook_fns.as_is, None, False, 10**8)(
            numpy.frombuffer(b"\xff\xd8nonsense", dtype=numpy.uint8), None)


def test_transform_none_wrong_shape_names_the_sample(even_shards):
    with stoker.Loader(even_shards, map=hook_fns.as_is, hook_processes=1, **WHOLE) as loader:
        with pytest.raises(stoker.HookError, match=r"map=as_is returned tensor of shape "
                           r"\[3, \d+, \d+\] and dtype torch.uint8 for sample '.*' of .*\.tar, but "
                           r"the first sample gave tensor of shape \[3, \d+, \d+\]"):
            epoch(loader)
    with stoker.Loader(even_shards, map=hook_fns.crop_whole, hook_processes=1,
                       map_shape=(3, 32, 32), **WHOLE) as loader:
        with pytest.raises(stoker.HookError, match=r"map=crop_whole returned tensor of shape "
                           r"\[3, 48, 48\] and dtype torch.uint8 for sample '.*' of .*\.tar, "
                           r"but map_shape= declares shape \[3, 32, 32\]"):
            next(iter(loader))
    with stoker.Loader(even_shards, map=hook_fns.crop_whole, hook_processes=1,
                       map_shape=(3, 48, 48), **WHOLE) as loader:
        assert next(iter(loader))[0].shape == (8, 3, 48, 48)


def test_transform_none_sample_without_label_is_named_or_skipped(tmp_path, dataset):
    from test_fields import write_rows
    rows = [(s.key, {"jpg": s.jpg, "cls": s.cls}) for s in dataset[:16]]
    rows[5] = (rows[5][0], {"jpg": dataset[5].jpg})  # no label
    shard = write_rows(tmp_path / "l-0.tar", rows)
    options = dict(WHOLE, map=hook_fns.crop_whole, hook_processes=1, shuffle=False)
    del options["shuffle_buffer"]  # no shuffle: no window (refused)
    with stoker.Loader([shard], **options) as loader:
        with pytest.raises(stoker.DataError, match=rf"l-0.tar: sample '{rows[5][0]}' has no "
                           r"label \(cls\) member"):
            epoch(loader)
    with stoker.Loader([shard], on_error="skip", **options) as loader:
        batches = epoch(loader)
        assert loader.stats()["samples_skipped"] == 1
    labels = torch.cat([b[1] for b in batches])
    assert len(labels) == 16 and labels[5] == labels[0]  # replaced by the first good sample
    assert torch.equal(batches[0][0][5], batches[0][0][0])


def test_transform_none_sample_without_a_required_field_is_named_or_skipped(tmp_path, dataset):
    """fields=("jpg", "txt") with transform=None: a sample without its txt
    reached map= as None (the C loader checks required members where it
    decodes, not here); it is bad input as a missing label is."""
    from test_fields import write_rows
    rows = [(s.key, {"jpg": s.jpg, "cls": s.cls, "txt": b"words"}) for s in dataset[:8]]
    del rows[3][1]["txt"]
    shard = write_rows(tmp_path / "t-0.tar", rows)
    options = dict(WHOLE, map=hook_fns.caption_only, hook_processes=1, shuffle=False,
                   fields=("jpg", "txt", "json?"))
    del options["shuffle_buffer"]  # no shuffle: no window (refused)
    with stoker.Loader([shard], **options) as loader:
        with pytest.raises(stoker.DataError, match=rf"t-0.tar: sample '{rows[3][0]}' has no txt "
                                                   r"member"):
            list(loader)
    with stoker.Loader([shard], on_error="skip", **options) as loader:
        batches = list(loader)
        assert loader.stats()["samples_skipped"] == 1
    assert sum(len(b["caption"]) for b in batches) == 8
    assert all(c == "words" for b in batches for c in b["caption"])


def test_transform_none_options_are_checked(even_shards):
    with pytest.raises(stoker.OptionError, match="transform=None needs map="):
        stoker.Loader(even_shards, transform=None)
    with pytest.raises(stoker.OptionError, match="with transform=None the batch is what map="):
        stoker.Loader(even_shards, transform=None, map=hook_fns.as_is, dtype=torch.float32)
    with pytest.raises(stoker.OptionError, match="map_shape must be a tuple of ints"):
        stoker.Loader(even_shards, map=hook_fns.as_is, map_shape=(3, "a"))
    with pytest.raises(stoker.OptionError, match="map_shape= acts only with map="):
        stoker.Loader(even_shards, map_shape=(3, 4, 4))


@pytest.fixture(scope="module")
def captioned(tmp_path_factory, dataset):
    from test_fields import write_rows
    rows = [(s.key, {"jpg": s.jpg, "cls": s.cls, "txt": f"a photo of thing {i}".encode()})
            for i, s in enumerate(dataset[:40])]
    out = tmp_path_factory.mktemp("hook-captions")
    return [write_rows(out / "c-0.tar", rows[:20]), write_rows(out / "c-1.tar", rows[20:])]


def test_a_caption_tokenizer_over_fields(captioned):
    options = dict(SMALL, fields=("jpg", "txt", "__key__"), map=hook_fns.tokenize)
    with stoker.Loader(captioned, hook_processes=2, **options) as loader:
        batches = [b for b in loader]
    with stoker.Loader(captioned, hook_processes=1, threads=1, **options) as loader:
        again = [b for b in loader]
    with stoker.Loader(captioned, fields=("jpg", "txt"), **SMALL) as plain:
        captions = [c for _, txt in plain for c in txt]
    first = batches[0]
    assert set(first) == {"image", "tokens", "caption"}
    assert first["image"].shape == (8, 3, 32, 32) and first["tokens"].shape == (8, 16)
    assert [c for b in batches for c in b["caption"]] == captions
    assert first["tokens"][0, :4].tolist() == [sum(w.encode()) % 1000
                                               for w in first["caption"][0].split()[:4]]
    for a, b in zip(batches, again):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["tokens"], b["tokens"])


def test_the_torchvision_example_gives_the_same_batches_with_1_and_3_processes(
        even_shards, clean_env_factory, tmp_path):
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                           "hooks_torchvision.py")
    outputs = []
    for processes in ("1", "3"):
        proc = subprocess.run([sys.executable, example, *even_shards, "--batches", "2",
                               "--hook-processes", processes], capture_output=True, text=True,
                              timeout=180, cwd=tmp_path, env=clean_env_factory())
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] and outputs[0].count("sha256") == 2
    assert "images (32, 3, 224, 224) torch.float32, targets (32, 1000)" in outputs[0]
