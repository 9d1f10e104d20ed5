# SPDX-License-Identifier: MIT
"""Loader(cluster=...) with map=, batch_map= and fields=: the Dask workers
run the hooks in hook processes of their own and give exactly the batches
of a local run (the same keyed random streams), also when a worker is
killed mid-epoch; a worker whose environment fingerprint differs, or
whose hook gives other bytes for the canary sample, is refused and the
others and the trainer make the epoch. Real dask-scheduler and dask-worker
processes on 127.0.0.1 (test_cluster.DaskCluster)."""
import functools
import importlib
import logging
import os
import select
import subprocess
import sys
import time

import numpy
import pytest
import torch

import stoker
import cluster_hook_fns
import hook_fns
from test_cluster import LOCAL_WAITS_S, DaskCluster

pytestmark = pytest.mark.filterwarnings("ignore:make_current is deprecated:DeprecationWarning")

HERE = os.path.dirname(os.path.abspath(__file__))
# batches_per_task sizes the cluster's tasks: local() leaves it out, as a
# local loader refuses it.
OPTIONS = dict(batch_size=6, image_size=32, threads=1, seed=5, shuffle_buffer=16,
               batches_per_task=2)
HOOKED = dict(OPTIONS, hook_processes=1)
AUGMENTED = dict(HOOKED, map=hook_fns.augment, batch_map=hook_fns.mixup)


@pytest.fixture
def cluster(tmp_path, clean_env_factory, monkeypatch):
    env = clean_env_factory()
    # The workers unpickle the hooks, which are functions of the tests' modules.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), HERE) if p)
    c = DaskCluster(tmp_path, env)
    monkeypatch.setenv("STOKER_TEST_LOCAL_WAITS_S", LOCAL_WAITS_S)
    yield c
    c.stop()


def flat(batch):
    """A batch object as a list of its tensors and values, in order."""
    if isinstance(batch, dict):
        return [x for k in sorted(batch) for x in flat(batch[k])]
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], torch.Tensor):
        return [x for v in batch for x in flat(v)]
    return [batch.clone() if isinstance(batch, torch.Tensor) else batch]


def same(got, want):
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert len(a) == len(b), f"batch {i} has {len(a)} parts, not {len(b)}"
        for u, v in zip(a, b):
            if isinstance(u, torch.Tensor):
                assert u.dtype == v.dtype and torch.equal(u, v), f"batch {i} differs"
            else:
                assert u == v, f"batch {i} differs"


def epoch(loader, on_first_cluster_batch=None):
    out, done = [], False
    for batch in loader:
        out.append(flat(batch))
        if on_first_cluster_batch and not done and loader.stats()["cluster"]["batches_cluster"]:
            on_first_cluster_batch()
            done = True
    return out


def local(shards, batches_per_task=None, **kw):
    with stoker.Loader(shards, **kw) as loader:
        return epoch(loader)


def refusing_run(shards, cluster, kw, caplog):
    """The epoch of a Loader on the cluster, its stats()["cluster"], the
    workers it refused and the batches it used from each worker."""
    with caplog.at_level(logging.WARNING, logger="stoker.cluster"):
        with stoker.Loader(shards, cluster=cluster.client, **kw) as loader:
            return (epoch(loader), loader.stats()["cluster"], dict(loader._offload.refused),
                    dict(loader._offload.per_worker))


def test_hooks_on_two_workers_one_killed_equal_a_local_epoch(cluster, even_shards, tmp_path):
    """torchvision's ColorJitter, GaussianBlur, RandomRotation and
    RandomErasing per sample, Mixup per batch: the same bytes from the
    workers' hook processes as from the trainer's, w1 killed (-9) while it
    holds tasks."""
    kw = dict(AUGMENTED, index=str(tmp_path / "index.json"))
    want = local(even_shards, **kw)
    cluster.add_worker("w1", STOKER_TEST_TASK_DELAY_MS="400")
    cluster.add_worker("w2", STOKER_TEST_TASK_DELAY_MS="400")
    with stoker.Loader(even_shards, cluster=cluster.client, **kw) as loader:
        got = epoch(loader, lambda: cluster.kill("w1"))
        c = loader.stats()["cluster"]
    same(got, want)
    assert c["batches_cluster"] > 0 and c["batches_cluster"] + c["batches_local"] == len(want), c
    assert len(want[0]) == 2 and want[0][0].dtype == torch.float32  # Mixup's (images, targets)


def test_a_worker_with_another_fingerprint_is_refused(cluster, even_shards, tmp_path, caplog):
    """ATEN_CPU_CAPABILITY=default makes torch on w1 dispatch to its plain
    kernels (what another CPU does): its fingerprint differs, it is refused
    with the difference named, and w2 and the trainer make the epoch."""
    from stoker.hooks.env import fingerprint
    if fingerprint("")["cpu_capability"] in ("NO", "DEFAULT", "default"):
        pytest.skip("this CPU already runs torch's default kernels: nothing to differ from")
    kw = dict(AUGMENTED, index=str(tmp_path / "index.json"))
    want = local(even_shards, **kw)
    cluster.add_worker("w1", ATEN_CPU_CAPABILITY="default")
    cluster.add_worker("w2")
    w1 = [a for a, w in cluster.client.scheduler_info()["workers"].items() if w["name"] == "w1"]
    got, c, refused, per_worker = refusing_run(even_shards, cluster, kw, caplog)
    same(got, want)
    assert list(refused) == w1, refused
    assert "cpu_capability" in refused[w1[0]] and "NO on the worker" in refused[w1[0]]
    assert f"Dask worker {w1[0]} refused" in caplog.text, caplog.text
    assert w1[0] not in per_worker and c["batches_cluster"] > 0, (per_worker, c)


def test_a_worker_whose_hook_gives_other_bytes_fails_the_canary(cluster, even_shards, tmp_path,
                                                                caplog):
    """Same versions everywhere, but the hook's bytes depend on the host:
    the trainer recomputes the worker's canary sample, finds other bytes
    and refuses it; the epoch is the trainer's own."""
    kw = dict(HOOKED, map=cluster_hook_fns.biased, index=str(tmp_path / "index.json"))
    want = local(even_shards, **kw)
    cluster.add_worker("w1", STOKER_TEST_HOOK_BIAS="1")
    got, c, refused, _ = refusing_run(even_shards, cluster, kw, caplog)
    same(got, want)
    assert c["batches_cluster"] == 0 and c["batches_local"] == len(want), c
    [why] = refused.values()
    assert "canary sample differs" in why and "other bytes on the worker" in why, why
    assert "refused" in caplog.text


@pytest.fixture
def captioned(tmp_path, dataset):
    from test_fields import write_rows
    rows = [(s.key, {"jpg": s.jpg, "cls": s.cls, "txt": f"a photo of thing {i}".encode()})
            for i, s in enumerate(dataset[:60])]
    return [write_rows(tmp_path / f"c-{k}.tar", rows[k * 20:(k + 1) * 20]) for k in range(3)]


@pytest.mark.parametrize("hook", [hook_fns.tokenize, None], ids=["tokenizer", "fields only"])
def test_fields_and_a_caption_tokenizer_on_the_cluster(cluster, captioned, tmp_path, hook):
    kw = dict(OPTIONS, fields=("jpg", "txt", "__key__"), index=str(tmp_path / "index.json"))
    if hook is not None:
        kw.update(map=hook, hook_processes=1)
    want = local(captioned, **kw)
    cluster.add_worker("w1")
    with stoker.Loader(captioned, cluster=cluster.client, **kw) as loader:
        got = epoch(loader)
        c = loader.stats()["cluster"]
    same(got, want)
    assert c["batches_cluster"] > 0, c
    if hook is not None:  # the tokenizer ran: ids of the caption's words
        assert any(isinstance(x, list) and x and x[0].startswith("a photo") for x in want[0])


def test_hooks_run_in_hook_processes_of_the_worker(cluster, even_shards, tmp_path,
                                                  monkeypatch):
    """Never on the Dask worker's own threads (a GIL-holding hook there
    starves its event loop): in processes forked by the worker process's
    fork server. The trainer's hook processes sleep, so that the worker
    makes batches."""
    where = tmp_path / "where"
    where.mkdir()
    cluster.add_worker("w1", STOKER_TEST_WHERE_DIR=str(where))
    worker = cluster.workers["w1"].pid
    monkeypatch.setenv("STOKER_TEST_HOOK_SLEEP", "0.2")
    kw = dict(HOOKED, map=cluster_hook_fns.where, index=str(tmp_path / "index.json"))
    with stoker.Loader(even_shards, cluster=cluster.client, **kw) as loader:
        for _ in loader:
            pass
        assert loader.stats()["cluster"]["batches_cluster"] > 0
        servers = _fork_servers(worker)  # the job's: it ends with the Loader
    ran = [tuple(int(x) for x in name.split("-")) for name in os.listdir(where)]
    assert ran and all(parent in servers for pid, parent in ran), (servers, ran)


def test_transform_none_on_the_cluster_equals_a_local_epoch(cluster, tmp_path, dataset):
    """map= gets the whole undecoded image (its hook process decodes it) on
    the workers as here; a sample without a label is skipped and counted
    the same. Before, the local thread died on the undecoded batches and
    the epoch hung."""
    from test_fields import write_rows
    rows = [(s.key, {"jpg": s.jpg, "cls": s.cls}) for s in dataset[:48]]
    rows[29] = (rows[29][0], {"jpg": dataset[29].jpg})  # no label
    shards = [write_rows(tmp_path / f"r-{k}.tar", rows[k * 16:(k + 1) * 16]) for k in range(3)]
    kw = dict(batch_size=6, threads=1, seed=5, shuffle_buffer=16, batches_per_task=1,
              transform=None, map=hook_fns.crop_whole, hook_processes=1, on_error="skip",
              index=str(tmp_path / "index.json"))
    want = local(shards, **kw)
    with stoker.Loader(shards, **{k: v for k, v in kw.items() if k != "batches_per_task"}) as loader:
        epoch(loader)
        skipped = loader.stats()["samples_skipped"]
    assert skipped == 1
    cluster.add_worker("w1")
    with stoker.Loader(shards, cluster=cluster.client, **kw) as loader:
        got = epoch(loader)
        stats = loader.stats()
    same(got, want)
    assert stats["cluster"]["batches_cluster"] > 0, stats["cluster"]
    assert stats["samples_skipped"] == skipped


def _children(parent):
    found = []
    for task in os.listdir(f"/proc/{parent}/task"):
        with open(f"/proc/{parent}/task/{task}/children") as f:
            found += [int(pid) for pid in f.read().split()]
    return found


def _fork_servers(parent):
    """Pids of the hook processes' fork servers that are children of parent."""
    found = []
    for pid in _children(parent):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as c:
                if b"stoker.hooks.forkserver" in c.read():
                    found.append(pid)
        except FileNotFoundError:
            pass
    return found


def _hook_processes(parent):
    """Pids of the hook processes forked by parent's fork servers."""
    return [pid for server in _fork_servers(parent) for pid in _children(server)]


def test_hook_processes_start_with_the_loader_and_the_canary_uses_the_trainers(
        cluster, even_shards, tmp_path, monkeypatch):
    """Made, not yet iterated, a Loader has its hook process running and has
    had the worker start its own (their imports overlap the rest of the
    start); the worker's batches come from that one, and the trainer checks
    the worker's canary in its own hook process: no other starts here.
    The worker's fork server starts with the job (warm_hooks), not with
    the worker."""
    where = tmp_path / "where"
    where.mkdir()
    cluster.add_worker("w1", STOKER_TEST_WHERE_DIR=str(where))
    worker = cluster.workers["w1"].pid
    assert not _fork_servers(worker)
    monkeypatch.setenv("STOKER_TEST_HOOK_SLEEP", "0.2")  # here: the worker makes batches too
    kw = dict(HOOKED, map=cluster_hook_fns.where, index=str(tmp_path / "index.json"))
    with stoker.Loader(even_shards, cluster=cluster.client, **kw) as loader:
        pids = loader._hooks.pool.pids()  # once its fork server has forked it
        mine = _hook_processes(os.getpid())
        assert mine == pids and len(mine) == 1, (mine, pids)
        deadline = time.monotonic() + 60
        while not _hook_processes(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        warmed, server = _hook_processes(worker), _fork_servers(worker)
        assert len(warmed) == 1 and len(server) == 1, (warmed, server)
        assert not os.listdir(where)  # started, not used yet
        epoch(loader)
        c = loader.stats()["cluster"]
        assert c["batches_cluster"] > 0 and loader._offload.verified, c
        assert _hook_processes(os.getpid()) == mine
    ran = {int(name.split("-")[0]) for name in os.listdir(where)}
    assert ran == set(warmed), (ran, warmed)


def test_a_hook_error_on_a_worker_carries_the_hooks_traceback(cluster, even_shards, tmp_path,
                                                              monkeypatch):
    """As a local loader's HookError: the message names the hook and the
    sample, the cause holds the hook's traceback (from the worker's hook
    process). The trainer's hook processes sleep, so the worker's error
    comes first."""
    cluster.add_worker("w1", STOKER_TEST_HOOK_FAIL="1")
    monkeypatch.setenv("STOKER_TEST_HOOK_SLEEP", "0.2")
    kw = dict(HOOKED, map=cluster_hook_fns.fail_where_told, index=str(tmp_path / "index.json"))
    with stoker.Loader(even_shards, cluster=cluster.client, **kw) as loader:
        with pytest.raises(stoker.HookError) as info:
            epoch(loader)
    assert "map=fail_where_told" in str(info.value) and ".tar" in str(info.value), info.value
    cause = str(info.value.__cause__)
    assert "on Dask worker tcp://127.0.0.1:" in cause, cause
    assert "told to fail on this host" in cause and "cluster_hook_fns.py" in cause, cause


def test_skipped_samples_and_restarts_of_the_workers_are_counted(cluster, even_shards,
                                                                 tmp_path):
    """on_error="skip": the samples a hook failed on count once per batch
    delivered, wherever it was made: the same count and batches as a local
    run."""
    kw = dict(HOOKED, map=hook_fns.fail_on_picked, on_error="skip",
              index=str(tmp_path / "index.json"))
    with stoker.Loader(even_shards, **{k: v for k, v in kw.items() if k != "batches_per_task"}
                       ) as loader:
        want = epoch(loader)
        skipped = loader.stats()["hook_samples_skipped"]
    assert skipped > 0
    cluster.add_worker("w1", STOKER_TEST_TASK_DELAY_MS="100")
    with stoker.Loader(even_shards, cluster=cluster.client, **kw) as loader:
        got = epoch(loader)
        stats = loader.stats()
    same(got, want)
    assert stats["cluster"]["batches_cluster"] > 0, stats["cluster"]
    assert stats["hook_samples_skipped"] == skipped, (stats["hook_samples_skipped"], skipped)
    assert stats["hook_processes_restarted"] == 0


def test_a_worker_that_cannot_import_the_hook_is_refused(cluster, even_shards, tmp_path,
                                                         clean_env_factory, caplog):
    """The hook's module is missing on w1: refused once, naming the error
    (before: each of its tasks failed and was submitted again, thousands
    a minute), and the epoch is the trainer's own."""
    kw = dict(HOOKED, map=hook_fns.augment, index=str(tmp_path / "index.json"))
    want = local(even_shards, **kw)
    cluster.add_worker("w1", PYTHONPATH=clean_env_factory().get("PYTHONPATH", ""))
    got, c, refused, _ = refusing_run(even_shards, cluster, kw, caplog)
    same(got, want)
    [why] = refused.values()
    assert "cannot load the hooks (ModuleNotFoundError" in why and "hook_fns" in why, why
    assert c["batches_cluster"] == 0 and c["tasks_submitted"] <= 4, c


HOOK_MODULE = "stoker_test_versioned_hook"
HOOK_MODULE_SOURCE = '''
def same(image, rng):
    return image


def shift(batch, rng):
    images, labels = batch
    return images + {bias}, labels
'''


def test_a_worker_with_another_version_of_the_hooks_module_is_refused(
        cluster, even_shards, tmp_path, caplog, monkeypatch):
    """The hooks come from an importable module, which cloudpickle sends by
    reference: w2 has another version of it on its PYTHONPATH (its
    batch_map= adds 1). Its pickled hooks are the same bytes as the
    trainer's, so only the digest of the module's file tells them apart:
    w2 is refused with the module named, and w1 (the trainer's version)
    and the trainer make the epoch of a local run. Before, w2's batches
    were used, each pixel one more, without a word."""
    paths = {}
    for version, bias in (("v1", 0), ("v2", 1)):
        paths[version] = tmp_path / version
        paths[version].mkdir()
        (paths[version] / f"{HOOK_MODULE}.py").write_text(HOOK_MODULE_SOURCE.format(bias=bias))
    monkeypatch.syspath_prepend(str(paths["v1"]))
    monkeypatch.delitem(sys.modules, HOOK_MODULE, raising=False)
    module = importlib.import_module(HOOK_MODULE)
    try:
        kw = dict(HOOKED, map=module.same, batch_map=module.shift,
                  index=str(tmp_path / "index.json"))
        want = local(even_shards, **kw)
        for name, version in (("w1", "v1"), ("w2", "v2")):
            cluster.add_worker(name, PYTHONPATH=os.pathsep.join(
                (str(paths[version]), cluster.env["PYTHONPATH"])))
        w2 = [a for a, w in cluster.client.scheduler_info()["workers"].items()
              if w["name"] == "w2"]
        got, c, refused, per_worker = refusing_run(even_shards, cluster, kw, caplog)
    finally:
        sys.modules.pop(HOOK_MODULE, None)
    same(got, want)
    assert list(refused) == w2, refused
    assert f"code {HOOK_MODULE}" in refused[w2[0]], refused
    assert f"Dask worker {w2[0]} refused" in caplog.text and HOOK_MODULE in caplog.text
    assert w2[0] not in per_worker and c["batches_cluster"] > 0, (per_worker, c)


def test_a_worker_whose_batch_hook_gives_other_bytes_fails_the_canary(
        cluster, even_shards, tmp_path, caplog):
    """map= gives the same bytes everywhere, batch_map= not on w1: the
    canary covers every hook, so w1 is refused on its batch_map= sample and
    the epoch is the trainer's own. Before, only map='s first call was
    compared, and w1's batches were used."""
    kw = dict(HOOKED, map=cluster_hook_fns.where, batch_map=cluster_hook_fns.biased_batch,
              index=str(tmp_path / "index.json"))
    want = local(even_shards, **kw)
    cluster.add_worker("w1", STOKER_TEST_HOOK_BIAS="1")
    got, c, refused, _ = refusing_run(even_shards, cluster, kw, caplog)
    same(got, want)
    assert c["batches_cluster"] == 0 and c["batches_local"] == len(want), c
    [why] = refused.values()
    assert "hook batch_map= gives other bytes on the worker" in why, why


JOB_END_TIMEOUT_S = 60


def _wait_until_gone(find, worker):
    """find(worker) once it is empty, or after JOB_END_TIMEOUT_S what it
    still finds."""
    deadline = time.monotonic() + JOB_END_TIMEOUT_S
    while find(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return find(worker)


def test_a_workers_hook_processes_end_with_its_jobs(cluster, even_shards, tmp_path,
                                                   monkeypatch):
    """Three short jobs with hooks, one after the other (each its own
    Loader, closed): the worker ran hook processes for each, and within
    JOB_END_TIMEOUT_S of the last close it holds none, nor a fork server.
    Before, it kept the pools of its last 4 jobs as long as it lived (5
    jobs left 8 idle hook processes, 1,155 MiB)."""
    cluster.add_worker("w1")
    worker = cluster.workers["w1"].pid
    monkeypatch.setenv("STOKER_TEST_HOOK_SLEEP", "0.1")  # here: the worker makes batches
    for seed in range(3):
        kw = dict(HOOKED, map=cluster_hook_fns.where, seed=seed, samples_per_rank=60,
                  index=str(tmp_path / "index.json"))
        with stoker.Loader(even_shards, cluster=cluster.client, **kw) as loader:
            epoch(loader)
            assert loader.stats()["cluster"]["batches_cluster"] > 0, seed
            assert _hook_processes(worker), seed
    assert not _wait_until_gone(_hook_processes, worker)
    assert not _wait_until_gone(_fork_servers, worker)


KILLED_TRAINER = """
import sys, time
sys.path.insert(0, {here!r})
import stoker, cluster_hook_fns
loader = stoker.Loader({shards!r}, cluster={address!r}, map=cluster_hook_fns.where,
                       index={index!r}, **{options!r})
for batch in loader:
    if loader.stats()["cluster"]["batches_cluster"]:
        print("cluster batch", flush=True)
        time.sleep(600)  # killed here
"""


def test_a_killed_trainers_hook_processes_end_on_the_worker(cluster, even_shards, tmp_path,
                                                           clean_env_factory):
    """A trainer killed (-9) mid-epoch closes nothing: its client's
    connection ends, the scheduler lets go of the job's data, and the
    worker ends the job's hook processes and fork server within
    JOB_END_TIMEOUT_S."""
    cluster.add_worker("w1")
    worker = cluster.workers["w1"].pid
    code = KILLED_TRAINER.format(here=HERE, shards=even_shards, address=cluster.address,
                                 index=str(tmp_path / "index.json"), options=HOOKED)
    env = clean_env_factory(STOKER_TEST_HOOK_SLEEP="0.1")
    trainer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, env=env, text=True)
    try:
        said = select.select([trainer.stdout], [], [], 180)[0] and trainer.stdout.readline()
        assert said == "cluster batch\n", said
        assert _hook_processes(worker)
    finally:
        trainer.kill()
        trainer.wait(timeout=30)
    assert not _wait_until_gone(_hook_processes, worker)
    assert not _wait_until_gone(_fork_servers, worker)


def test_a_worker_without_hooks_has_no_fork_server(cluster, even_shards, tmp_path):
    """A job without hooks makes its batches on the worker and starts no
    fork server there (244 MiB that --preload stoker used to start with
    every worker)."""
    cluster.add_worker("w1")
    worker = cluster.workers["w1"].pid
    kw = dict(OPTIONS, index=str(tmp_path / "index.json"))
    with stoker.Loader(even_shards, cluster=cluster.client, **kw) as loader:
        epoch(loader)
        assert loader.stats()["cluster"]["batches_cluster"] > 0
        assert not _fork_servers(worker)


def test_the_hooks_go_to_each_worker_once_not_with_every_task(cluster, even_shards, tmp_path,
                                                             monkeypatch):
    """A hook that holds 8 MB (an array in a functools.partial): the
    workers get it once (scattered like the dataset index), and no task
    submitted carries more than a few kB of arguments. Before, every task
    carried the pickled hooks through the scheduler."""
    import cloudpickle
    table = numpy.zeros(8 << 20, numpy.uint8)
    table[0] = 1
    hook = functools.partial(cluster_hook_fns.plus_table, table=table)
    sent = []  # (task function, bytes of its pickled arguments)
    submit = cluster.client.submit

    def recording(fn, *args, **kwargs):
        sent.append((fn.__name__, len(cloudpickle.dumps(args))))
        return submit(fn, *args, **kwargs)

    monkeypatch.setattr(cluster.client, "submit", recording)
    cluster.add_worker("w1")
    kw = dict(HOOKED, map=hook, index=str(tmp_path / "index.json"))
    with stoker.Loader(even_shards, cluster=cluster.client, **kw) as loader:
        epoch(loader)
        c = loader.stats()["cluster"]
    assert c["batches_cluster"] > 0 and not loader._offload.refused, c
    tasks = [size for name, size in sent if name == "make_range"]
    assert tasks and max(size for _, size in sent) < 64 << 10, sent
