# SPDX-License-Identifier: MIT
"""Several training nodes on one machine, for the node cache (issue 36).

A "node" is a group of rank processes (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
LOCAL_RANK and GROUP_RANK as torchrun sets them) with its own cache
directory. All read the shards from one nginx, node k through the path
/nodeK/ (a link to the data), so the access log says how many bytes each
node fetched from the origin. Every rank process lives for the whole
simulation and runs one epoch per command, so the log is cut per epoch.

Used by tests/integration/test_nodes.py (assertions) and bench/node_cache.py
(`make bench-nodes`, figures).
"""
import collections
import io
import json
import os
import random
import select
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from servers import Nginx  # noqa: E402  (the integration tests' nginx)

EPOCH_TIMEOUT_S = 120  # per epoch of all ranks; tiny shards take ~1 s

CHILD = r"""
import json, sys
from stoker._ext._stoker import Loader
urls = json.loads(sys.argv[1])
loader, current = None, None
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["options"] != current:
        if loader is not None:
            loader.close()
        current = cmd["options"]
        # One epoch a command, the log cut between them: epochs=1 reads no
        # epoch ahead in the pause, whose GETs would land in the wrong cut.
        loader = Loader(urls, **dict(current, epochs=1))
    # An elastic resume's rest of the epoch: (ranges, nodes), or None.
    loader.set_remainder(cmd["epoch"], *(cmd.get("remainder") or (None,)))
    loader.seek(cmd["epoch"], 0)
    labels = []
    while True:
        batch = loader.next()
        if batch is None:
            break
        labels.append([int(s["cls"]) for s in batch.samples()])
        del batch
    st = loader.stats()
    print(json.dumps({"labels": labels, "hits": st["cache_epoch_hits"],
                      "misses": st["cache_epoch_misses"],
                      "origin_bytes": st["cache_epoch_origin_bytes"]}), flush=True)
"""


def write_shards(directory, n_shards, per_shard, sample_bytes, per_class):
    """n_shards tars of per_shard samples in class order (class = sample
    number // per_class), each sample a .cls and a .bin of sample_bytes
    (none when 0)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(n_shards):
        path = directory / f"shard-{s:04d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
            for i in range(s * per_shard, (s + 1) * per_shard):
                members = [("cls", str(i // per_class).encode())]
                if sample_bytes:
                    members.append(("bin", bytes([i % 251]) * sample_bytes))
                for ext, data in members:
                    info = tarfile.TarInfo(f"{i:08d}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


class Nodes:
    """nodes x ranks_per_node rank processes over the shards in data_dir,
    served by nginx. run_epoch() returns per node the bytes it fetched and
    the GETs in log order, and per rank its epoch's stats and labels.
    nginx: the origin of another Nodes over the same work_dir, so that the
    URLs (and the caches' entries) are the same at another node count."""

    def __init__(self, data_dir, work_dir, nodes, ranks_per_node, pythonpath, nginx=None):
        self.data_dir = Path(data_dir).resolve()
        self.shared_nginx = nginx
        self.work = Path(work_dir)
        self.nodes, self.rpn = nodes, ranks_per_node
        self.pythonpath = pythonpath
        self.names = sorted(p.name for p in self.data_dir.glob("*.tar"))
        self.procs = []

    def __enter__(self):
        root = self.work / "origin"
        root.mkdir(parents=True, exist_ok=True)
        for k in range(self.nodes):
            link = root / f"node{k}"
            if not link.exists():
                link.symlink_to(self.data_dir)
        self.nginx = self.shared_nginx or Nginx(root, self.work / "nginx").__enter__()
        world = self.nodes * self.rpn
        try:
            for rank in range(world):
                node = rank // self.rpn
                env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world),
                           LOCAL_WORLD_SIZE=str(self.rpn), LOCAL_RANK=str(rank % self.rpn),
                           GROUP_RANK=str(node), PYTHONPATH=self.pythonpath)
                urls = [self.nginx.url(f"node{node}/{n}") for n in self.names]
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-c", CHILD, json.dumps(urls)], env=env,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        except BaseException:
            self.__exit__()
            raise
        return self

    def cache_dir(self, tag, node):
        return str(self.work / f"cache-{tag}-node{node}")

    def run_epoch(self, epoch, options, cache_tag=None, cache_size=0, remainder=None):
        """Every rank reads epoch `epoch` with options (plus, with
        cache_tag, its node's cache directory for that tag; with remainder,
        (ranges, nodes), only the rest an elastic resume left of it).
        Returns (per node: origin bytes, [GET uri in log order]; per rank:
        result)."""
        self.nginx.clear_log()
        for rank, proc in enumerate(self.procs):
            opts = dict(options)
            if cache_tag is not None:
                opts.update(cache_dir=self.cache_dir(cache_tag, rank // self.rpn),
                            cache_size=cache_size)
            proc.stdin.write(json.dumps({"epoch": epoch, "options": opts,
                                         "remainder": remainder}) + "\n")
            proc.stdin.flush()
        results = []
        deadline = time.monotonic() + EPOCH_TIMEOUT_S
        for proc in self.procs:
            # One line per command: nothing sits in the pipe's buffer
            # before it, so select() sees it (a hung rank fails, not hangs).
            if not select.select([proc.stdout], [], [], max(0, deadline - time.monotonic()))[0]:
                raise RuntimeError(f"a rank process gave no result in {EPOCH_TIMEOUT_S} s")
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"a rank process ended (exit status {proc.wait()})")
            results.append(json.loads(line))
        origin = [0] * self.nodes
        gets = [[] for _ in range(self.nodes)]
        for method, uri, status, sent, *_ in self.nginx.access_log():
            node = int(uri.split("/")[1][len("node"):])
            origin[node] += sent
            if method == "GET":
                gets[node].append(uri.split("/")[-1])
        return origin, gets, results

    def __exit__(self, *exc):
        for proc in self.procs:
            if proc.poll() is None:
                proc.stdin.close()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.shared_nginx is None:
            self.nginx.__exit__()


def misses(trace, capacity, policy):
    """Misses of a cache of `capacity` shards over trace (shard names in
    read order), evicting by policy: "lru", or "belady" (the offline
    optimum: the shard whose next read is farthest, never read again
    first)."""
    cached = collections.OrderedDict()
    next_at = [0] * len(trace)
    last = {}
    for i in range(len(trace) - 1, -1, -1):
        next_at[i] = last.get(trace[i], len(trace))
        last[trace[i]] = i
    upcoming = {}
    out = 0
    for i, shard in enumerate(trace):
        upcoming[shard] = next_at[i]
        if shard in cached:
            cached.move_to_end(shard)
            continue
        out += 1
        if len(cached) >= capacity:
            if policy == "lru":
                cached.popitem(last=False)
            else:
                del cached[max(cached, key=lambda s: upcoming[s])]
        cached[shard] = True
    return out


def batches(results, joined):
    """Every rank's batches, or (joined) the global batches a DDP step
    averages over: batch i of every rank together."""
    if not joined:
        return [b for r in results for b in r["labels"] if b]
    steps = min(len(r["labels"]) for r in results)
    return [[c for r in results for c in r["labels"][i]] for i in range(steps)]


def classes_per_batch(results, joined=False):
    """Mean distinct classes per batch."""
    counts = [len(set(b)) for b in batches(results, joined)]
    return sum(counts) / len(counts)


def _uniform(pool, sizes, rounds, seed):
    """Mean distinct classes per batch of the given sizes drawn from a
    shuffle of pool, over rounds shuffles."""
    pool = list(pool)
    rng = random.Random(seed)
    total = 0.0
    for _ in range(rounds):
        rng.shuffle(pool)
        at, counts = 0, []
        for n in sizes:
            counts.append(len(set(pool[at:at + n])))
            at += n
        total += sum(counts) / len(counts)
    return total / rounds


def uniform_classes_per_batch(results, joined=False, rounds=20, seed=0):
    """The same for uniform permutations of the same labels in batches of
    the same sizes."""
    sizes = [len(b) for b in batches(results, joined)]
    return _uniform([c for b in batches(results, joined) for c in b], sizes, rounds, seed)


def node_uniform_classes_per_batch(results, rank, ranks_per_node, rounds=20, seed=0):
    """The same for a uniform draw, in rank's batch sizes, from every label
    its node read: what a rank's batches reach when its share is a random
    part of its node's samples. (Against the rank's own labels alone, a
    split of the node's samples into runs of whole shards would look well
    mixed: each rank would hold fewer classes to mix.)"""
    node = rank // ranks_per_node
    ranks = results[node * ranks_per_node:(node + 1) * ranks_per_node]
    sizes = [len(b) for b in results[rank]["labels"] if b]
    return _uniform([c for r in ranks for b in r["labels"] for c in b], sizes, rounds, seed)
