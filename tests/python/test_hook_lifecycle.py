# SPDX-License-Identifier: MIT
"""The lifecycle of hook processes (Loader(map=)) and of their fork server.

The promises under test: the fork server and its hook processes import
nothing from the directory the job runs in; a child of fork() (a helper,
a DataLoader worker) leaves its parent's hook processes alone; a hook
process that dies is seen dead even when a process it forked holds its
socket; whatever a hook starts dies with the pool, on close(), when the
trainer is killed, and when the fork server was killed before it; long
runs keep processes, threads and descriptors flat. Every process a test
starts is killed by pid at its end, and every wait is bounded.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import stoker
import lifecycle_fns
from stoker.hooks.batches import HookedBatches
from test_hooks import gone, parent_of

TESTS = os.path.dirname(os.path.abspath(__file__))
SCRIPT_TIMEOUT_S = 180  # a loaded 2-core machine; a hang is what this catches
GONE_S = 10.0  # SIGKILL is not refused: 10 s is for the scheduler, not the kill
SMALL = dict(batch_size=8, image_size=32, shuffle_buffer=16, seed=5)


@pytest.fixture
def pid_dir(tmp_path, monkeypatch):
    """The directory lifecycle_fns' hooks record pids in; what is recorded
    there is killed at the end of the test."""
    directory = tmp_path / "pids"
    directory.mkdir()
    monkeypatch.setenv("STOKER_TEST_PID_DIR", str(directory))
    yield str(directory)
    for name in os.listdir(directory):
        kill(int(name.split("-", 1)[1]))


def alive(pids):
    """Those of pids alive now, for a message."""
    return [pid for pid in pids if not gone([pid], 0.01)]


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_script(script, args, env, tmp_path, cwd=None, path=None):
    """Run a Python script (text, or written at path) in a session of its
    own and return (returncode, stdout, stderr); killed (its session) and
    failed past SCRIPT_TIMEOUT_S. Its output goes to files, not pipes: a
    process it leaves behind would hold a pipe open."""
    if path is None:
        command = [sys.executable, "-c", textwrap.dedent(script), *args]
    else:
        path.write_text(textwrap.dedent(script))
        command = [sys.executable, str(path), *args]
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
    try:
        proc.wait(SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"hung for {SCRIPT_TIMEOUT_S} s:\n{out_path.read_text()}\n"
                    f"{err_path.read_text()}")
    return proc.returncode, out_path.read_text(), err_path.read_text()


# -- the working directory ---------------------------------------------------------------------

PLANTED = """\
import os
with open({marker!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")
raise ImportError("a torchvision.py planted in the working directory")
"""

TRAIN = """
import sys
sys.path.insert(0, {tests!r})
import stoker
import lifecycle_fns
with stoker.Loader(sys.argv[1:], map=lifecycle_fns.as_is, hook_processes=2, batch_size=8,
                   image_size=32) as loader:
    print(sum(1 for _ in loader))
"""


def test_a_module_in_the_working_directory_is_not_imported(even_shards, clean_env_factory,
                                                           tmp_path):
    """`python /path/train.py` imports nothing from its working directory;
    its fork server (once `python -m`: the cwd first on sys.path) imported
    a torchvision.py there, and so every hook process ran it."""
    marker = tmp_path / "imported"
    run_dir = tmp_path / "run"
    app = tmp_path / "app"
    run_dir.mkdir()
    app.mkdir()
    (run_dir / "torchvision.py").write_text(PLANTED.format(marker=str(marker)))
    code, out, err = run_script(TRAIN.format(tests=TESTS), even_shards, clean_env_factory(),
                                tmp_path, cwd=run_dir, path=app / "train.py")
    assert code == 0, err
    assert out.split() == ["15"], out + err
    assert not marker.exists(), f"imported by pids {marker.read_text().split()}"


# -- children of fork() ------------------------------------------------------------------------

FORK_SCRIPT = """
import gc, hashlib, json, os, sys, time
sys.path.insert(0, {tests!r})
import torch
import stoker
import hook_fns

shards = sys.argv[1:]
options = dict(batch_size=8, image_size=32, shuffle_buffer=16, seed=5, map=hook_fns.slow_identity)
CHILD_S = 60


def digests(batches):
    return [hashlib.sha256(images.numpy().tobytes() + labels.numpy().tobytes()).hexdigest()
            for images, labels in batches]


with stoker.Loader(shards, hook_processes=1, threads=1, **options) as reference:
    want = digests(reference)

loader = stoker.Loader(shards, hook_processes=2, **options)
pids = loader._hooks.pool.pids()
it = iter(loader)


def drop():
    global it, loader
    del it, loader
    gc.collect()


def child(mode):
    if mode == "use":  # refused, as the C loader refuses, instead of waiting for a lost thread
        for use in (lambda: next(it), loader.close):
            try:
                use()
            except RuntimeError as e:
                assert "make a new Loader after fork" in str(e), str(e)
            else:
                raise AssertionError("an inherited hooked loader was used in the child")
    elif mode == "drop":
        drop()
    # "exit": interpreter exit with the loader alive (its finalizers run at exit)
    sys.exit(0)


def drop_in_worker(_):
    drop()  # a DataLoader worker that drops what it inherited


def wait(pid):
    deadline = time.monotonic() + CHILD_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"


children, got = [], []
for i, (images, labels) in enumerate(it):
    got.append((images.clone(), labels.clone()))
    if i in (1, 2, 3, 4, 5, 6):  # short-lived helpers, during the epoch
        pid = os.fork()
        if pid == 0:
            try:
                child(("use", "drop", "exit")[i % 3])
            except SystemExit:
                raise
            except BaseException:
                import traceback
                traceback.print_exc()
                os._exit(3)
        children.append(pid)
    if i == 7:  # DataLoader workers, forked with the hooked loader mid-epoch
        data = torch.utils.data.TensorDataset(torch.arange(64))
        workers = torch.utils.data.DataLoader(data, batch_size=8, num_workers=2,
                                              multiprocessing_context="fork",
                                              worker_init_fn=drop_in_worker)
        assert sum(int(b[0].sum()) for b in workers) == sum(range(64))
codes = [wait(pid) for pid in children]
restarted = loader.stats()["hook_processes_restarted"]
same_pids = loader._hooks.pool.pids() == pids
loader.close()
print(json.dumps(dict(codes=codes, same=digests(got) == want, batches=len(got),
                      restarted=restarted, same_pids=same_pids)))
"""


def test_children_of_fork_leave_the_hook_processes_alone(even_shards, clean_env_factory,
                                                         tmp_path):
    """Children forked mid-epoch that use, drop or exit with the inherited
    loader, and DataLoader workers: the parent's epoch is the reference's,
    no hook process of the parent is killed, every child exits at once.
    Before, a child's exit killed the parent's hook processes and the fork
    server and read replies from the parent's server."""
    code, out, err = run_script(FORK_SCRIPT.format(tests=TESTS), even_shards,
                                clean_env_factory(), tmp_path)
    assert code == 0, out + err
    result = json.loads(out.splitlines()[-1])
    assert result["codes"] == [0] * 6, (result, err)
    assert result["batches"] == 15 and result["same"], (result, err)
    assert result["restarted"] == 0 and result["same_pids"], (result, err)


class _IdlePool:
    """The pool of a loader without map= or batch_map=: nothing to run."""
    closed = False

    def step(self, timeout_s):
        time.sleep(timeout_s)
        return []

    def discard(self, jobs):
        pass


def test_a_fork_while_the_hooks_thread_reads_the_source(tmp_path):
    """fork() while the hooks thread is inside the C loader's batches (it
    fetches the next while the loop holds one): in the child that thread
    is gone and the source stays 'executing', so closing the hooked
    batches there must not close the source. Before, the child's close
    raised "generator already executing" instead of ending (it made
    test_children_of_fork_leave_the_hook_processes_alone fail now and then)."""
    gate = threading.Event()

    def source():
        yield 0, [], [], [], [], "batch 0"
        gate.wait(30)  # the hooks thread waits here for the next batch
        yield 1, [], [], [], [], "batch 1"

    items = source()
    hooked = HookedBatches(_IdlePool(), None, None, seed=0, rank=0, skip=False, depth=1,
                           map_shape=None)
    batches = hooked.batches(items, 0)
    try:
        assert next(batches) == "batch 0"
        deadline = time.monotonic() + 30
        while not items.gi_running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert items.gi_running
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child's outcome is its exit status)
            try:
                batches.close()
                os._exit(0)
            except BaseException:
                import traceback
                traceback.print_exc()
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        gate.set()
        batches.close()


# -- processes that hooks start ----------------------------------------------------------------

DIE_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import stoker
import lifecycle_fns
with stoker.Loader(sys.argv[1:], map=lifecycle_fns.fork_then_die_on_picked, hook_processes=2,
                   batch_size=8, image_size=32) as loader:
    try:
        for _ in loader:
            pass
    except stoker.HookError as e:
        print(e)
"""


def test_a_hook_process_that_dies_while_its_fork_holds_its_socket_is_seen_dead(
        even_shards, clean_env_factory, pid_dir, tmp_path):
    """Its socket never ends (the fork has a copy), but its pidfd says it
    exited: the sample is retried, then named; what it forked dies with
    it. Before, the trainer waited for it forever."""
    code, out, err = run_script(DIE_SCRIPT.format(tests=TESTS), even_shards,
                                clean_env_factory(STOKER_TEST_PID_DIR=pid_dir), tmp_path)
    assert code == 0, err
    assert "killed its hook process 3 times (last exit code 9)" in out, out + err
    helpers = lifecycle_fns.recorded(pid_dir, "helper")
    assert len(helpers) >= 3 and gone(helpers, GONE_S), helpers


def test_close_stops_what_the_hooks_started(even_shards, pid_dir):
    """A `sleep 600` and a hanging fork of each hook process: each hook
    process leads a process group, killed as one."""
    loader = stoker.Loader(even_shards, map=lifecycle_fns.with_helpers, hook_processes=2,
                           **SMALL)
    try:
        it = iter(loader)
        next(it)
        deadline = time.monotonic() + 60
        while len(lifecycle_fns.recorded(pid_dir, "helper")) < 4 and \
                time.monotonic() < deadline:
            next(it)
        helpers = lifecycle_fns.recorded(pid_dir, "helper")
        assert len(helpers) == 4, helpers
        hooks = loader._hooks.pool.pids()
    finally:
        loader.close()
    assert gone(helpers + hooks, GONE_S), alive(helpers + hooks)


HANG_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import stoker
import lifecycle_fns
loader = stoker.Loader(sys.argv[1:], map=lifecycle_fns.with_helpers_hang_on_picked,
                       hook_processes=2, batch_size=8, image_size=32)
print(*loader._hooks.pool.pids(), flush=True)
for _ in loader:  # a seventh of the images hang: it waits on one of them
    pass
"""


@pytest.mark.parametrize("killed", ["trainer", "server-then-trainer"])
def test_a_killed_trainer_leaves_no_process_while_a_hook_hangs(even_shards, clean_env_factory,
                                                               pid_dir, tmp_path, killed):
    """SIGKILL, so no finalizer runs: the fork server kills its hook
    processes' groups; when it was killed first (an OOM kill), each hook
    process sees its trainer go and kills its own group."""
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(HANG_SCRIPT.format(tests=TESTS)),
             *even_shards], stdout=subprocess.PIPE, stderr=err, text=True,
            stdin=subprocess.DEVNULL, env=clean_env_factory(STOKER_TEST_PID_DIR=pid_dir),
            start_new_session=True)
    hooks, server = [], None
    try:
        hooks = [int(p) for p in proc.stdout.readline().split()]
        assert len(hooks) == 2, err_path.read_text()
        server = parent_of(hooks[0])
        deadline = time.monotonic() + 60
        while len(lifecycle_fns.recorded(pid_dir, "helper")) < 4 and \
                time.monotonic() < deadline:  # both processes have started theirs
            time.sleep(0.05)
        helpers = lifecycle_fns.recorded(pid_dir, "helper")
        assert len(helpers) == 4, helpers
        time.sleep(0.5)  # and a hook hangs by now (a seventh of the images)
        if killed == "server-then-trainer":
            os.kill(server, signal.SIGKILL)
            assert gone([server], GONE_S)
            assert not gone(hooks, 0.5)  # they live on without it
        proc.kill()
        proc.wait(GONE_S)
        everyone = helpers + hooks + [server]
        assert gone(everyone, GONE_S), alive(everyone)
    finally:
        for pid in hooks + ([server] if server else []):
            kill(pid)
        proc.kill()
        proc.wait()
        proc.stdout.close()  # held open by whatever survived: not read to its end


# -- long runs ---------------------------------------------------------------------------------

WORKERS_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import torch
import lifecycle_fns
ctx = sys.argv[1]
data = lifecycle_fns.HookedInWorker(sys.argv[2:])
workers = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2,
                                      multiprocessing_context=ctx)
print(len(list(workers)))
"""


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_a_loader_made_in_dataloader_workers_leaves_nothing_behind(even_shards,
                                                                   clean_env_factory, pid_dir,
                                                                   tmp_path, ctx):
    code, out, err = run_script(WORKERS_SCRIPT.format(tests=TESTS), [ctx, *even_shards],
                                clean_env_factory(STOKER_TEST_PID_DIR=pid_dir), tmp_path)
    assert code == 0 and out.split() == ["4"], out + err
    pids = lifecycle_fns.recorded(pid_dir, "server") + lifecycle_fns.recorded(pid_dir, "hook")
    assert len(pids) == 6, pids  # each worker: a server, two hook processes
    assert gone(pids, GONE_S), alive(pids)


def descendants(pid):
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children = [int(c) for c in f.read().split()]
        except FileNotFoundError:
            continue
        for child in children:
            out += [child] + descendants(child)
    return out


def census():
    return dict(fds=len(os.listdir("/proc/self/fd")), threads=len(os.listdir("/proc/self/task")),
                processes=len(descendants(os.getpid())))


def test_many_epochs_keep_descriptors_threads_and_processes_flat(even_shards):
    with stoker.Loader(even_shards[:1], map=lifecycle_fns.as_is, hook_processes=2, threads=1,
                       **SMALL) as loader:
        batches = sum(1 for _ in loader)
        pids = loader._hooks.pool.pids()
        assert sum(1 for _ in loader) == batches
        before = census()
        for _ in range(20):
            assert sum(1 for _ in loader) == batches
        after = census()
        assert loader._hooks.pool.pids() == pids
    # A leak grows by one or more each epoch (20 here); a thread still
    # starting or ending as the count is taken is not one.
    assert after["processes"] == before["processes"], (before, after)
    assert after["fds"] <= before["fds"] + 2 and after["threads"] <= before["threads"] + 2, \
        (before, after)
