# SPDX-License-Identifier: MIT
"""Two simulated nodes of two ranks each read five epochs through one nginx
(node_sim.py), each node with its own cache directory; the access log
counts each node's bytes from the origin.

- node_affinity and a cache holding the node's share: from the second
  epoch on a node fetches (next to) nothing, where without affinity it
  fetches a large part of its share every epoch;
- a cache of half the node's share evicting by next use (the plan's
  order): its origin bytes stay within 10% of the offline optimum
  (Belady) over the node's actual read order, and below LRU's on it;
- a run resized from 3 nodes to 2 (as after an elastic resume, from the
  epoch after the interrupted one): the nodes that stay fetch only the
  shards re-homed to them, about the lost node's;
- the rest of an epoch interrupted at 3 nodes read at 2 through the same
  caches in the global order (remote shards, an index): each new node
  fetches a shard at most once, where reading every shard through a cache
  of a node's share could fetch one for each sample.
"""
import os
import subprocess

import pytest

import node_sim
from stoker._ext._stoker import Loader, node_split

NODES, RPN, EPOCHS = 2, 2, 5
SHARDS, PER_SHARD, SAMPLE_BYTES = 64, 4, 48 * 1024
BASE = dict(batch_size=4, threads=1, shards_in_flight=2, seed=11)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    work = tmp_path_factory.mktemp("nodes")
    node_sim.write_shards(work / "data", SHARDS, PER_SHARD, SAMPLE_BYTES, per_class=8)
    pythonpath = os.environ.get("PYTHONPATH") or os.path.join(
        os.path.dirname(os.environ["STOKER_BIN"]), "python")
    with node_sim.Nodes(work / "data", work, NODES, RPN, pythonpath) as sim:
        yield sim


def shard_bytes(nodes):
    return os.path.getsize(nodes.data_dir / nodes.names[0])


def run(nodes, options, tag=None, cache_size=0):
    """Per epoch: (origin bytes per node, GETs per node, per-rank results)."""
    return [nodes.run_epoch(e, dict(BASE, **options), tag, cache_size) for e in range(EPOCHS)]


def test_affinity_keeps_node_caches_warm(nodes):
    share = SHARDS // NODES * shard_bytes(nodes)
    size = share + share // 4  # the node's share, and room for the H.url files
    warm = run(nodes, {"node_affinity": 1}, "affinity", size)
    cold = run(nodes, {"node_affinity": 0}, "plain", size)
    auto = run(nodes, {}, "auto", size)  # the default: on with a cache on several nodes
    assert [e[0] for e in auto] == [e[0] for e in warm]
    for node in range(NODES):
        first = warm[0][0][node]
        assert first >= share  # the first epoch fetches the node's share
        later = [warm[e][0][node] for e in range(1, EPOCHS)]
        assert all(b <= 0.05 * first for b in later), (node, first, later)
        plain = [cold[e][0][node] / cold[0][0][node] for e in range(1, EPOCHS)]
        # Without affinity the node reads other shards every epoch.
        assert sum(plain) / len(plain) > 0.2, (node, plain)
    # The loader's own per-epoch counts agree: no miss after the first epoch.
    for e in range(1, EPOCHS):
        assert all(r["misses"] == 0 and r["hits"] > 0 for r in warm[e][2])
    assert sum(r["origin_bytes"] for r in warm[0][2]) == sum(warm[0][0])


def test_half_cache_evicts_by_next_use(nodes):
    size_shards = SHARDS // NODES // 2
    shard = shard_bytes(nodes)
    size = size_shards * shard + shard // 2
    trace = run(nodes, {"node_affinity": 1})  # no cache: every read is a GET
    cached = run(nodes, {"node_affinity": 1}, "half", size)
    for node in range(NODES):
        reads = [uri for e in range(EPOCHS) for uri in trace[e][1][node]]
        first = len(trace[0][1][node])
        # Misses after the first epoch's (the cold fills are the same for all).
        belady = node_sim.misses(reads, size_shards, "belady") - first
        lru = node_sim.misses(reads, size_shards, "lru") - first
        got = sum(len(cached[e][1][node]) for e in range(1, EPOCHS))
        got_bytes = sum(cached[e][0][node] for e in range(1, EPOCHS))
        assert got_bytes == got * shard
        assert got <= 1.1 * belady, (node, got, belady, lru)
        assert got < lru, (node, got, belady, lru)


def test_a_resize_fetches_about_the_lost_nodes_shards(tmp_path):
    """Three nodes of one rank read two epochs through caches that hold a
    node's share at two nodes; then two nodes (the same cache directories
    for nodes 0 and 1) read the next epoch. Shards are dealt to nodes by
    rendezvous hashing, so the two fetch the lost node's shards and few
    others: the greedy dealing it replaced re-homed about two thirds."""
    node_sim.write_shards(tmp_path / "data", SHARDS, PER_SHARD, SAMPLE_BYTES, per_class=8)
    pythonpath = os.environ.get("PYTHONPATH") or os.path.join(
        os.path.dirname(os.environ["STOKER_BIN"]), "python")
    options = dict(BASE, node_affinity=1)
    shard = os.path.getsize(tmp_path / "data" / "shard-0000.tar")
    size = SHARDS // 2 * shard * 5 // 4
    with node_sim.Nodes(tmp_path / "data", tmp_path, 3, 1, pythonpath) as three:
        for e in range(2):
            three.run_epoch(e, options, "resize", size)
        with node_sim.Nodes(tmp_path / "data", tmp_path, 2, 1, pythonpath,
                            nginx=three.nginx) as two:
            origin, _, _ = two.run_epoch(2, options, "resize", size)
    before = node_split(SHARDS, BASE["seed"], 3)
    after = node_split(SHARDS, BASE["seed"], 2)
    lost = sum(node == 2 for node in before)
    moved = sum(a != b for a, b in zip(before, after))
    assert moved <= lost + SHARDS // 16, (moved, lost)
    # Each re-homed shard is fetched once; the others are in the caches.
    assert sum(origin) <= (moved + 1) * shard, (origin, moved, lost)
    assert sum(origin) >= lost * shard


def test_the_rest_of_an_epoch_fetches_each_shard_once_per_node(tmp_path, stoker_bin):
    """Epoch 0 at 3 nodes fills the caches (a cache of 2/3 of the dataset:
    every node's shards fit, not all shards); the old ranks then deliver
    half their shares of epoch 1 (counts, as their states say) and 2 nodes
    read the rest. Each new rank reads a contiguous run of the old nodes'
    sequences one after the other, so about its share of old nodes'
    shards: each node fetches each shard at most once, and the samples of
    the rest come once each (the new ranks' padding aside)."""
    shards, per_shard = 48, 16
    node_sim.write_shards(tmp_path / "data", shards, per_shard, 16384, per_class=1)
    pythonpath = os.environ.get("PYTHONPATH") or os.path.join(
        os.path.dirname(os.environ["STOKER_BIN"]), "python")
    shard = os.path.getsize(tmp_path / "data" / "shard-0000.tar")
    size = shards * 2 // 3 * shard
    with node_sim.Nodes(tmp_path / "data", tmp_path, 3, 1, pythonpath) as three:
        urls = [three.nginx.url(f"node{k}/{n}") for k in range(3) for n in three.names]
        index = str(tmp_path / "index.json")
        subprocess.run([stoker_bin, "index", "-q", "-o", index, *urls], check=True,
                       capture_output=True, timeout=120)
        options = dict(BASE, node_affinity=1, index_path=index)
        three.run_epoch(0, options, "rest", size)
        old = Loader(urls[:shards], rank=0, world_size=3, ranks_per_node=1,
                     cache_dir=str(tmp_path / "probe"), cache_size=size, **options)
        assert old.info()["global_order"]
        share = -(-shards * per_shard // 3)
        rest = old.remainder(1, [share // 2] * 3, None, 1)
        old.close()
        with node_sim.Nodes(tmp_path / "data", tmp_path, 2, 1, pythonpath,
                            nginx=three.nginx) as two:
            origin, gets, results = two.run_epoch(1, options, "rest", size, remainder=(rest, 3))
    left = sum(end - begin for begin, end in rest)
    labels = [c for r in results for b in r["labels"] for c in b]
    assert len(labels) == 2 * -(-left // 2) and len(set(labels)) == left
    for node in range(2):
        assert len(gets[node]) == len(set(gets[node])), sorted(gets[node])
        assert origin[node] <= shards * shard
