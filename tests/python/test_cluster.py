# SPDX-License-Identifier: MIT
"""Loader(cluster=...): batch ranges decoded by Dask workers (a real
dask-scheduler and dask-worker processes on 127.0.0.1) beside the loader's
own thread give exactly the batches of a local run, each once, when
workers die, join or all go away, when the scheduler dies, across a
resume, for two trainer ranks sharing the workers, and with bad samples
under on_error="skip"."""
import hashlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

import stoker

pytestmark = pytest.mark.filterwarnings("ignore:make_current is deprecated:DeprecationWarning")

DASK_SCHEDULER = "/usr/bin/dask-scheduler"
DASK_WORKER = "/usr/bin/dask-worker"
# A hang detector, not a speed check: a dask-worker importing distributed,
# torch and stoker took over 60 s to join on the 2-core machine under a load
# of 20 (make test of 2026-11-28, test_bad_samples_are_skipped_and_counted_once).
START_TIMEOUT_S = 180
# For the local loaders the cluster's batches are compared with, and the
# cluster's; TASKS only where cluster= is given (a local loader refuses it).
OPTIONS = dict(batch_size=6, image_size=32, threads=1, seed=5, shuffle_buffer=16)
TASKS = dict(batches_per_task=2)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DaskCluster:
    """A dask-scheduler and dask-worker processes (no nanny: a killed worker
    stays dead, as a lost host does), all stopped by stop()."""

    def __init__(self, tmp_path, env):
        self.env = dict(env, STOKER_WORKER_THREADS="1")
        self.tmp = tmp_path
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.workers = {}
        self.scheduler = self._spawn("scheduler", [DASK_SCHEDULER, "--host", "127.0.0.1", "--port",
                                                   self.address.rsplit(":", 1)[1],
                                                   "--no-dashboard"])
        self.client = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", int(self.address.rsplit(":", 1)[1])),
                                         timeout=1).close()
                break
            except OSError:
                assert self.scheduler.poll() is None, self._log("scheduler")
                time.sleep(0.1)
        from distributed import Client
        self.client = Client(self.address, timeout=START_TIMEOUT_S, set_as_default=False)

    def _spawn(self, name, cmd, **extra_env):
        log = open(self.tmp / f"{name}.log", "wb")
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(self.env, **extra_env), cwd=self.tmp)

    def _log(self, name):
        return (self.tmp / f"{name}.log").read_text(errors="replace")[-3000:]

    def add_worker(self, name, preload=(), **extra_env):
        before = len(self.client.scheduler_info()["workers"])
        preloads = [a for p in ("stoker", *preload) for a in ("--preload", str(p))]
        self.workers[name] = self._spawn(name, [DASK_WORKER, self.address, "--nthreads", "1",
                                                "--no-nanny", "--no-dashboard", "--name", name,
                                                "--memory-limit", "0", *preloads],
                                  **extra_env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(self.client.scheduler_info()["workers"]) <= before:
            assert self.workers[name].poll() is None, self._log(name)
            assert time.monotonic() < deadline, f"worker {name} did not join:\n{self._log(name)}"
            time.sleep(0.1)

    def kill(self, name):
        proc = self.workers.pop(name) if name != "scheduler" else self.scheduler
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self):
        if self.client is not None:
            self.client.close(timeout=5)
        for proc in list(self.workers.values()) + [self.scheduler]:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


# How long a trainer's local thread leaves the epoch to the workers before
# making batches itself (until a task ends): without it the machine's load
# decides whether the workers make any, which most tests here assert.
LOCAL_WAITS_S = "30"


@pytest.fixture
def cluster(tmp_path, clean_env_factory, monkeypatch):
    c = DaskCluster(tmp_path, clean_env_factory())
    monkeypatch.setenv("STOKER_TEST_LOCAL_WAITS_S", LOCAL_WAITS_S)  # the trainers, not the workers
    yield c
    c.stop()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, uneven_shards, stoker_bin):
    path = tmp_path_factory.mktemp("cluster-index") / "index.json"
    subprocess.run([stoker_bin, "index", "-o", str(path)] + uneven_shards, check=True,
                   stdout=subprocess.DEVNULL, timeout=120)
    return uneven_shards, str(path)


def digest(images, labels):
    return hashlib.sha1(images.numpy().tobytes() + labels.numpy().tobytes()).hexdigest()


def local_digests(shards, epoch=0, **kw):
    loader = stoker.Loader(shards, **kw)
    loader.set_epoch(epoch)
    return [digest(i, l) for i, l in loader]


def test_one_thread_and_two_workers_equal_a_local_epoch(cluster, indexed):
    shards, index = indexed
    cluster.add_worker("w1")
    cluster.add_worker("w2")
    plain = {k: v for k, v in OPTIONS.items() if k != "shuffle_buffer"}
    # The window (shuffle_buffer given), the global order (an index over
    # local shards, no shuffle_buffer), and storage order.
    for order in (OPTIONS, plain, dict(plain, shuffle=False)):
        kw = dict(order, index=index)
        want = local_digests(shards, **kw)
        loader = stoker.Loader(shards, cluster=cluster.client, **kw, **TASKS)
        assert len(loader) == len(want)
        got = [digest(i, l) for i, l in loader]
        assert got == want
        c = loader.stats()["cluster"]
        assert c["batches_cluster"] > 0, c
        assert c["batches_cluster"] + c["batches_local"] == len(want)
        # The next epoch reuses the workers' loaders and is right too.
        loader.set_epoch(1)
        again = [digest(i, l) for i, l in loader]
        assert again == local_digests(shards, epoch=1, **kw)
        loader.close()


def test_scheduler_unreachable_at_start(indexed, clean_env_factory):
    shards, index = indexed
    code = ("import stoker, sys\n"
            f"try:\n    stoker.Loader({shards!r}, index={index!r}, cluster='tcp://127.0.0.1:{free_port()}')\n"
            "except stoker.ClusterError as e:\n    print('ClusterError', e); sys.exit(3)\n")
    env = clean_env_factory(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:" in proc.stdout, proc.stdout
    assert time.monotonic() - t0 < 60


def test_cluster_needs_an_index(cluster, indexed):
    shards, _ = indexed
    with pytest.raises(ValueError, match="needs a dataset index"):
        stoker.Loader(shards, cluster=cluster.client, samples_per_rank=60)


def run_with_event(loader, after, event, step_s=0):
    """Iterate loader; call event() once `after` batches were read, and, when
    after is "first cluster batch", once the first batch from the cluster was
    read (its worker then holds more tasks). step_s: a training step's time
    after each batch."""
    out, done = [], False
    for step, (images, labels) in enumerate(loader):
        out.append(digest(images, labels))
        time.sleep(step_s)
        if not done and (step + 1 == after or (
                after == "first cluster batch" and loader.stats()["cluster"]["batches_cluster"])):
            event()
            done = True
    return out


@pytest.mark.parametrize("killed", ["one worker", "every worker"])
def test_workers_killed_mid_epoch(cluster, indexed, killed, caplog, monkeypatch):
    shards, index = indexed
    # The local thread works from the start: held, it leaves the cluster the
    # whole epoch before the kill, and nothing is left to take back.
    monkeypatch.setenv("STOKER_TEST_LOCAL_WAITS_S", "0")
    cluster.add_worker("w1", STOKER_TEST_TASK_DELAY_MS="400")
    cluster.add_worker("w2", STOKER_TEST_TASK_DELAY_MS="400")
    kw = dict(OPTIONS, index=index)
    want = local_digests(shards, **kw)
    loader = stoker.Loader(shards, cluster=cluster.client, **kw, **TASKS)
    victims = ["w1"] if killed == "one worker" else ["w1", "w2"]
    with caplog.at_level(logging.WARNING, logger="stoker.cluster"):
        got = run_with_event(loader, "first cluster batch",
                             lambda: [cluster.kill(v) for v in victims])
    assert got == want
    c = loader.stats()["cluster"]
    assert c["batches_cluster"] + c["batches_local"] == len(want)
    if killed == "every worker":  # the loader's own thread made the rest, and said why
        assert c["batches_local"] >= len(want) - c["batches_cluster"] > 0, c
        assert "stoker: " in caplog.text
    loader.close()


def test_worker_joins_mid_epoch(cluster, indexed):
    shards, index = indexed
    cluster.add_worker("w1", STOKER_TEST_TASK_DELAY_MS="300")
    kw = dict(OPTIONS, index=index, samples_per_rank=600)  # 100 batches: time to join
    want = local_digests(shards, **kw)
    loader = stoker.Loader(shards, cluster=cluster.client, **kw, **TASKS)
    got = run_with_event(loader, 1, lambda: cluster.add_worker("w2",
                                                               STOKER_TEST_TASK_DELAY_MS="300"))
    assert got == want
    used = loader._offload.per_worker
    assert len(used) == 2, used  # the new worker made batches that were used
    loader.close()


def test_scheduler_killed_mid_epoch(cluster, indexed, caplog):
    shards, index = indexed
    cluster.add_worker("w1", STOKER_TEST_TASK_DELAY_MS="300")
    kw = dict(OPTIONS, index=index)
    want = local_digests(shards, **kw)
    loader = stoker.Loader(shards, cluster=cluster.address, **kw, **TASKS)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="stoker.cluster"):
        got = run_with_event(loader, "first cluster batch", lambda: cluster.kill("scheduler"))
    assert got == want  # the local thread finished the epoch
    assert time.monotonic() - t0 < 120
    loader.close()


def test_resume_with_the_cluster(cluster, indexed):
    shards, index = indexed
    cluster.add_worker("w1")
    kw = dict(OPTIONS, index=index)
    want = local_digests(shards, **kw)
    first = stoker.Loader(shards, cluster=cluster.client, **kw, **TASKS)
    got, state = [], None
    for step, (images, labels) in enumerate(first):
        got.append(digest(images, labels))
        if step == 4:
            state = first.state_dict()
            break
    first.close()
    second = stoker.Loader(shards, cluster=cluster.client, **kw, **TASKS)
    second.load_state_dict(state)
    got += [digest(i, l) for i, l in second]
    assert got == want
    second.close()


def test_bad_samples_are_skipped_and_counted_once(cluster, dataset, write_shard, tmp_path,
                                                  stoker_bin):
    """Same batches and the same skip count as a local run, though tasks
    re-read shuffle windows (and so meet the same bad samples) again."""
    from conftest import Sample
    broken = Sample("broken", None, b"not a jpeg", b"7", 7)
    shards = [write_shard(tmp_path / f"bad-{i}.tar",
                          dataset[i * 20:i * 20 + 9] + [broken._replace(key=f"broken{i}")]
                          + dataset[i * 20 + 9:i * 20 + 20])
              for i in range(6)]
    # A member name above max_key_bytes (4096) makes a bad sample the shard
    # reader drops, at a shard's start and end.
    long_key = Sample("k" * 5000, None, b"x", b"1", 1)
    shards.append(write_shard(tmp_path / "bad-6.tar", [long_key] + dataset[:5]
                              + [long_key._replace(key="j" * 5000)]))
    index = str(tmp_path / "index.json")
    kw = dict(OPTIONS, on_error="skip")
    subprocess.run([stoker_bin, "index", "--on-error", "skip", "-o", index] + shards, check=True,
                   stdout=subprocess.DEVNULL, timeout=120)
    cluster.add_worker("w1")
    cluster.add_worker("w2")
    local = stoker.Loader(shards, index=index, **kw)
    want = [digest(i, l) for i, l in local]
    want_stats = local.stats()
    assert want_stats["samples_skipped"] == 6 + 2
    loader = stoker.Loader(shards, cluster=cluster.client, index=index, **kw, **TASKS)
    got = [digest(i, l) for i, l in loader]
    assert got == want
    stats = loader.stats()
    assert stats["cluster"]["batches_cluster"] > 0
    for key in ("samples_skipped", "images_replaced", "samples"):
        assert stats[key] == want_stats[key], key
    loader.close()


RANK_CHILD = r"""
import hashlib, json, sys, stoker
a = json.loads(sys.argv[1])
loader = stoker.Loader(a["shards"], index=a["index"], cluster=a["address"], rank=a["rank"],
                       world_size=2, batches_per_task=2, **a["options"])
out = [hashlib.sha1(i.numpy().tobytes() + l.numpy().tobytes()).hexdigest() for i, l in loader]
print(json.dumps({"digests": out, "len": len(loader),
                  "cluster": loader.stats()["cluster"]["batches_cluster"]}))
loader.close()
"""


def test_two_trainer_ranks_share_the_workers(cluster, indexed, clean_env_factory):
    shards, index = indexed
    cluster.add_worker("w1")
    cluster.add_worker("w2")
    procs = []
    for rank in range(2):
        args = dict(shards=shards, index=index, address=cluster.address, rank=rank,
                    options=OPTIONS)
        procs.append(subprocess.Popen([sys.executable, "-c", RANK_CHILD, json.dumps(args)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=clean_env_factory()))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    for rank, res in enumerate(results):
        want = local_digests(shards, index=index, rank=rank, world_size=2, **OPTIONS)
        assert res["digests"] == want
        assert res["len"] == len(want)
    assert results[0]["len"] == results[1]["len"]  # equal steps
    assert results[0]["cluster"] + results[1]["cluster"] > 0


def test_a_worker_of_another_build_is_refused(cluster, indexed, caplog):
    """The same version ("0.1.0", which every commit carries) from another
    commit is another build: the worker is refused, naming both, and the
    loader's own thread makes the epoch (before: the whole loader failed)."""
    shards, index = indexed
    cluster.add_worker("w1")
    want = local_digests(shards, index=index, **OPTIONS)
    loader = stoker.Loader(shards, cluster=cluster.client, index=index, **OPTIONS, **TASKS)
    mine = loader._offload.spec["identity"]["stoker"]
    assert f"stoker {stoker._ext._stoker.version} commit " in mine and "libjpeg-turbo" in mine
    older = re.sub(r"commit \S+", "commit 0123456789abcdef0123456789abcdef01234567", mine)
    assert older != mine
    loader._offload.spec["identity"] = {"stoker": older}  # as an older trainer sends it
    with caplog.at_level(logging.WARNING, logger="stoker.cluster"):
        got = [digest(i, l) for i, l in loader]
    assert got == want
    c = loader.stats()["cluster"]
    assert c["batches_cluster"] == 0 and c["tasks_failed"] > 0, c
    assert re.search(r"refused: worker \S+ differs from the trainer \(stoker .*"
                     r"0123456789abcdef.* on the trainer, .* on the worker\)", caplog.text)
    loader.close()


def test_training_example_with_a_cluster(cluster, indexed, clean_env_factory, tmp_path):
    """examples/train_imagenet.py --cluster trains on CPU with a worker's
    batches and reports where they came from."""
    shards, index = indexed
    cluster.add_worker("w1")
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_imagenet.py")
    proc = subprocess.run([sys.executable, example, "--data", ",".join(shards), "--index", index,
                           "--cluster", cluster.address, "--batches-per-task", "3",
                           "--model", "resnet18", "--image-size",
                           "32", "--batch-size", "4", "--epochs", "1", "--cpu", "--threads", "1",
                           "--checkpoint", str(tmp_path / "ckpt.pt")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=clean_env_factory())
    assert proc.returncode == 0, proc.stderr
    assert "verdict: " in proc.stdout, proc.stdout
    batches = [int(n) for n in
               __import__("re").findall(r"cluster: (\d+) of \d+ batches", proc.stdout)]
    assert batches and batches[0] > 0, proc.stdout


def test_worker_threads_follow_the_cgroup_cpu_limit(tmp_path):
    from stoker.base import ranks as _ranks  # the worker sizes its threads with it
    assert _ranks.cpu_quota(str(tmp_path)) is None  # no cgroup files
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert _ranks.cpu_quota(str(tmp_path)) is None  # no limit
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert _ranks.cpu_quota(str(tmp_path)) == 3  # 2.5 CPUs: 3 threads
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("800000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert _ranks.cpu_quota(str(tmp_path)) == 8  # cgroup v1


def test_no_worker_at_start(cluster, indexed):
    """A scheduler without workers yet: the Loader is made (the index is sent
    once workers come), the loop starts with local batches, and a worker
    that joins takes ranges."""
    shards, index = indexed
    kw = dict(OPTIONS, index=index, samples_per_rank=600)
    want = local_digests(shards, **kw)
    loader = stoker.Loader(shards, cluster=cluster.client, **kw, **TASKS)
    # Steps of 50 ms: the workers' poller (once a second) sees the new worker
    # while the loop still has most of the epoch to go, however fast the
    # local thread decodes these small images.
    got = run_with_event(loader, 1, lambda: cluster.add_worker("w1",
                                                               STOKER_TEST_TASK_DELAY_MS="100"),
                         step_s=0.05)
    assert got == want
    assert loader.stats()["cluster"]["batches_cluster"] > 0
    loader.close()


def test_default_task_sizes_offload_a_short_epoch(cluster, indexed):
    """At the default batches_per_task an epoch of 16 batches was one range
    (two shuffle windows, at least 256 samples, per task), which the local
    thread took whole: no task went to the worker. Cut as they are claimed,
    ranges go to the worker too; the batches are still a local run's, and
    what both sides read is counted."""
    shards, index = indexed
    cluster.add_worker("w1")
    kw = dict(OPTIONS, index=index, samples_per_rank=96)  # 16 batches of 6
    want = local_digests(shards, **kw)
    assert len(want) == 16
    loader = stoker.Loader(shards, cluster=cluster.client, **kw)
    # Until the poller has seen the worker and the dataset index reached it
    # (bounded): the loop's first batch then sends ranges, however fast the
    # local thread decodes these small images.
    deadline = time.monotonic() + START_TIMEOUT_S
    while not loader._offload.workers() or loader._offload.shared() is None:
        assert time.monotonic() < deadline, "the worker or the index never became usable"
        time.sleep(0.1)
    got = [digest(i, l) for i, l in loader]
    assert got == want
    stats = loader.stats()
    c = stats["cluster"]
    assert c["tasks_submitted"] > 0, c  # 0 when the local thread took the one range
    assert c["batches_per_task"] == "auto" and c["ranges_cluster"] > 0, c
    assert c["batches_cluster"] + c["batches_local"] == 16
    # Read amplification: the worker's tasks' reads plus the local loader's
    # own counters, per sample delivered.
    local = loader._c.stats()
    assert c["samples_read"] == c["samples_read_cluster"] + local["samples_read"]
    assert c["bytes_read"] == c["bytes_read_cluster"] + local["bytes_read"]
    assert c["read_per_sample"] == pytest.approx(c["samples_read"] / 96)
    assert c["bytes_read_per_sample"] == pytest.approx(c["bytes_read"] / 96)
    assert c["samples_read"] >= 96 and c["bytes_read"] > 0
    if c["tasks_done"]:  # what the worker read is in it
        assert c["samples_read_cluster"] > 0 and c["bytes_read_cluster"] > 0, c
    loader.close()


def test_report_names_what_to_do_about_read_amplification(even_shards):
    """report() with cluster= on made-up counters: above 1.2 samples read
    per sample delivered it says how to read less; below it does not."""
    from stoker.cluster import trainer as _cluster
    with stoker.Loader(even_shards, **OPTIONS) as loader:
        for _ in loader:
            pass
        stats = loader.stats()
    counters = dict(batches_cluster=8, batches_local=8, cluster_wait_ns=0, local_wait_ns=0,
                    tasks_done=4, tasks_submitted=4, tasks_failed=0, tasks_dropped=0,
                    ranges_taken_back=0, ranges_cluster=2, bytes_received=10**6, workers=1,
                    batches_per_task="auto", samples_read=7000, read_per_sample=7.0,
                    bytes_read_per_sample=90e3)
    text = _cluster.report(dict(stats, cluster=counters))
    assert "7.00 samples read per sample delivered (90 kB per sample), by 2 ranges" in text
    assert "each sample was read 7.0 times" in text and "index=" in text, text
    assert "batches_per_task=N" in text and "shuffle_buffer" in text
    counters.update(samples_read=1100, read_per_sample=1.1)
    assert "each sample was read" not in _cluster.report(dict(stats, cluster=counters))


@pytest.mark.parametrize("extra", [{}, dict(interpolation="bicubic", random_erase_value="random",
                                            color_jitter=0.4, blur_kernel=3)],
                         ids=["reference", "bicubic-random-erase-jitter-blur"])
def test_the_recipe_through_the_cluster_equals_a_local_epoch(cluster, indexed, extra):
    """TrivialAugmentWide, RandomErasing and Mixup/CutMix with soft targets
    (and the other ops, bicubic resize and random erasing values): the
    batches Dask workers make equal the local ones, targets included."""
    shards, index = indexed
    cluster.add_worker("w1")
    kw = dict(OPTIONS, index=index, dtype="float32", recipe="torchvision-v2", num_classes=300,
              **extra)
    want = local_digests(shards, **kw)
    loader = stoker.Loader(shards, cluster=cluster.client, **kw, **TASKS)
    got = [digest(i, l) for i, l in loader]
    assert got == want
    assert loader.stats()["cluster"]["batches_cluster"] > 0



def test_fields_through_the_cluster_carry_the_mixed_targets(cluster, indexed):
    """fields= batches Dask workers make carry the soft targets of their
    Mixup/CutMix in '__label__' (num_classes reaches the workers' fields),
    equal to a local loader's (images, labels) batches."""
    shards, index = indexed
    cluster.add_worker("w1")
    kw = dict(OPTIONS, index=index, dtype="float32", recipe="torchvision-v2", num_classes=300)
    want = local_digests(shards, **kw)
    loader = stoker.Loader(shards, cluster=cluster.client, fields=("jpg", "__label__"), **kw,
                           **TASKS)
    got = [digest(i, l) for i, l in loader]
    assert got == want
    assert loader.stats()["cluster"]["batches_cluster"] > 0

STOPPED_CHILD = """
import faulthandler, json, os, signal, sys, time, hashlib
import stoker
faulthandler.dump_traceback_later(90)  # where it hangs, if it does
import logging; logging.basicConfig()
shards, index, address, scheduler_pid, options = json.loads(sys.argv[1])
loader = stoker.Loader(shards, index=index, cluster=address, batches_per_task=2, **options)
out, stopped = [], None
for images, labels in loader:
    out.append(hashlib.sha1(images.numpy().tobytes() + labels.numpy().tobytes()).hexdigest())
    if stopped is None and loader.stats()["cluster"]["batches_cluster"]:
        os.kill(scheduler_pid, signal.SIGSTOP)  # paused: no answer, no reset
        stopped = time.monotonic()
after = time.monotonic() - stopped
t = time.monotonic()
loader.close()
print(json.dumps({"digests": out, "after_stop_s": after, "close_s": time.monotonic() - t}))
"""


def test_scheduler_stopped_mid_epoch(cluster, indexed, clean_env_factory):
    """A scheduler that stops answering (SIGSTOP) mid-epoch: the epoch
    finishes here with the batches of a local run, within a bound, and
    close() returns promptly. Before, the loop hung for ever in a scheduler
    round trip made under the run's lock. The trainer is a child process,
    so that a hang fails this test instead of the run."""
    shards, index = indexed
    cluster.add_worker("w1", STOKER_TEST_TASK_DELAY_MS="300")
    options = dict(OPTIONS, samples_per_rank=600)  # 100 batches: it outlasts the time limit
    want = local_digests(shards, index=index, **options)
    arg = json.dumps([shards, index, cluster.address, cluster.scheduler.pid, options])
    proc = subprocess.Popen([sys.executable, "-c", STOPPED_CHILD, arg],
                            env=clean_env_factory(STOKER_TEST_LOCAL_WAITS_S=0), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the trainer hung with the scheduler stopped:\n{err[-3000:]}")
    finally:
        cluster.scheduler.send_signal(signal.SIGCONT)
    assert proc.returncode == 0, err[-3000:]
    res = json.loads(out)
    assert res["digests"] == want
    assert res["after_stop_s"] < 60, res   # SCHEDULER_TIMEOUT_S, then local decoding
    assert res["close_s"] < 10, res        # at most SCHEDULER_TIMEOUT_S for the client
    assert "has not answered" in err or "unreachable" in err, err[-3000:]  # said once


# A worker patched after its loader made the batches (what the red team did):
# STOKER_TEST_PATCH says how its results go wrong.
PATCHED_WORKER = """
import os
import numpy as np
import stoker.cluster.worker as w

# Dask may run a preload file twice: patch the honest function once.
honest = getattr(w.make_range, "honest", w.make_range)

def make_range(*args, **kwargs):
    r = honest(*args, **kwargs)
    how = os.environ["STOKER_TEST_PATCH"]
    if how == "pixels" and r["images"].size:
        r["images"] = r["images"].copy()
        r["images"][::4093] ^= 0x55
    elif how == "raise":  # a fault of the worker's own, on every task
        raise RuntimeError("this worker is broken")
    elif how == "labels" and r["labels"].size:
        r["labels"] = r["labels"] + 1000
    elif how == "sizes" and r["sizes"]:
        r["sizes"] = r["sizes"] + [r["sizes"][0]]  # one batch more than the bytes hold
        r["skips"] = r["skips"] + [r["skips"][0]]
        if "digests" in r:  # (a build without digests: the test shows what it delivers)
            r["digests"] = r["digests"] + [r["digests"][0]]
    return r

make_range.honest = honest
w.make_range = make_range
"""


def test_a_worker_whose_tasks_keep_failing_is_refused(cluster, indexed, tmp_path, caplog):
    """Every task of w1 raises: after MAX_FAILED_TASKS in a row it is
    refused, naming the error, and the epoch is made here. Before, each
    failed range was submitted again at once, as fast as it failed."""
    from stoker.cluster.trainer import MAX_FAILED_TASKS
    shards, index = indexed
    patch = tmp_path / "patched_worker.py"
    patch.write_text(PATCHED_WORKER)
    cluster.add_worker("w1", preload=[patch], STOKER_TEST_PATCH="raise")
    kw = dict(OPTIONS, index=index, samples_per_rank=240)  # 40 batches
    want = local_digests(shards, **kw)
    with caplog.at_level(logging.WARNING, logger="stoker.cluster"):
        with stoker.Loader(shards, cluster=cluster.client, **kw, **TASKS) as loader:
            got = [digest(i, l) for i, l in loader]
            c = loader.stats()["cluster"]
            refused = dict(loader._offload.refused)
    assert got == want
    assert c["batches_cluster"] == 0, c
    # The third failure refuses it; those in flight then (two ranges) fail too.
    assert MAX_FAILED_TASKS <= c["tasks_failed"] <= c["tasks_submitted"] <= MAX_FAILED_TASKS + 2, c
    [why] = refused.values()
    assert "tasks failed" in why and "this worker is broken" in why, why
    assert "refused" in caplog.text, caplog.text


@pytest.mark.parametrize("how", ["pixels", "labels", "sizes"])
def test_a_worker_sending_bad_results(cluster, indexed, tmp_path, how, caplog):
    """Every result of the patched worker is refused before use (counted as
    a failed task) and its range made here at once: the epoch equals a
    local one, batch for batch, with no stall. Before, 18 of 50 batches
    came through changed, and a result whose sizes disagreed with its bytes
    gave batches of the wrong size, then raised in Dask's callback thread
    with its range half claimed."""
    shards, index = indexed
    patch = tmp_path / "patched_worker.py"
    patch.write_text(PATCHED_WORKER)
    cluster.add_worker("w1", preload=[patch], STOKER_TEST_PATCH=how)
    kw = dict(OPTIONS, index=index, samples_per_rank=240)  # 40 batches
    want = local_digests(shards, **kw)
    loader = stoker.Loader(shards, cluster=cluster.client, **kw, **TASKS)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="stoker.cluster"):
        got = [digest(i, l) for i, l in loader]
    assert got == want
    assert time.monotonic() - t0 < 60
    c = loader.stats()["cluster"]
    assert c["batches_cluster"] == 0 and c["batches_local"] == len(want), c
    assert c["tasks_failed"] > 0, c
    assert "a Dask worker sent a result that is not valid" in caplog.text, caplog.text
    expected = {"pixels": "do not match the digest", "labels": "do not match the digest",
                "sizes": "sizes, skips and digests|image bytes for"}[how]
    assert re.search(expected, caplog.text), caplog.text
    loader.close()
