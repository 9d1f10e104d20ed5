# SPDX-License-Identifier: MIT
"""Class-sorted remote shards read through the node cache in a global order
(issue 39): two simulated nodes of two ranks each (node_sim.py) read
shards written in class order from one nginx, with a dataset index and a
cache that holds each node's shards.

- every rank's batches mix like a uniform draw from its node's samples
  (>= 0.9x), where the window over streamed shards mixes what it holds
  (0.67x here);
- every sample once per epoch across the ranks;
- the origin serves each shard once per node for the whole run: the first
  epoch fetches the node's shards (one GET each), later epochs nothing;
- a cache too small for a node's shards keeps the window (a choice made
  from the options and the index alone, so every rank makes the same).
"""
import os
import subprocess

import pytest

import node_sim
from stoker._ext._stoker import Loader

NODES, RPN = 2, 2
SHARDS, PER_SHARD, PER_CLASS = 64, 200, 100  # 12,800 samples, 2 classes a shard
BASE = dict(batch_size=64, threads=1, seed=5)


@pytest.fixture(scope="module")
def sim(tmp_path_factory, stoker_bin):
    work = tmp_path_factory.mktemp("cached-order")
    node_sim.write_shards(work / "data", SHARDS, PER_SHARD, 0, per_class=PER_CLASS)
    pythonpath = os.environ.get("PYTHONPATH") or os.path.join(
        os.path.dirname(stoker_bin), "python")
    with node_sim.Nodes(work / "data", work, NODES, RPN, pythonpath) as nodes:
        # One index over every node's URLs (each node reads its own path).
        urls = [nodes.nginx.url(f"node{k}/{n}") for k in range(NODES) for n in nodes.names]
        index = str(work / "index.json")
        subprocess.run([stoker_bin, "index", "-q", "-o", index, *urls], check=True,
                       capture_output=True, timeout=120)
        yield nodes, index


def all_bytes(nodes):
    return sum(os.path.getsize(nodes.data_dir / n) for n in nodes.names)


def test_sorted_remote_shards_mix_like_a_permutation_through_the_cache(sim):
    nodes, index = sim
    total = all_bytes(nodes)
    size = total  # each node's half of the shards, twice over
    epochs = [nodes.run_epoch(e, dict(BASE, index_path=index), "global", size)
              for e in range(3)]
    window = nodes.run_epoch(0, BASE, "window", size)
    for e, (origin, gets, results) in enumerate(epochs):
        for rank, r in enumerate(results):
            got = node_sim.classes_per_batch([r])
            uniform = node_sim.node_uniform_classes_per_batch(results, rank, RPN, rounds=5)
            plain = node_sim.classes_per_batch([window[2][rank]])
            print(f"epoch {e} rank {rank}: global order {got:.1f}, window {plain:.1f}, "
                  f"uniform {uniform:.1f}; origin bytes per node {origin}")
            assert got >= 0.9 * uniform, (e, rank, got, uniform)
        # Every rank's share, every sample once across the ranks.
        labels = sorted(c for r in results for b in r["labels"] for c in b)
        assert labels == sorted(i // PER_CLASS for i in range(SHARDS * PER_SHARD))
    first_gets = epochs[0][1]
    for node in range(NODES):
        # Epoch 1 fetches each shard of the node once, whole; then nothing.
        assert len(first_gets[node]) == len(set(first_gets[node])) > 0
        fetched = sum(os.path.getsize(nodes.data_dir / n) for n in first_gets[node])
        assert epochs[0][0][node] == fetched
        assert all(epochs[e][0][node] == 0 for e in (1, 2)), [ep[0] for ep in epochs]
    # The loader's own count of origin bytes is the log's.
    assert sum(r["origin_bytes"] for r in epochs[0][2]) == sum(epochs[0][0])
    # The two nodes' shards are disjoint and together the dataset's.
    assert sorted(first_gets[0] + first_gets[1]) == nodes.names
    assert sum(epochs[0][0]) == total


def test_a_cache_too_small_for_the_node_keeps_the_window(sim):
    nodes, index = sim
    total = all_bytes(nodes)
    small = total * 3 // 8  # three quarters of a node's shards
    # Fewer shards in flight than the window's default, which with two
    # ranks a node would hold all 32 of its shards at once.
    options = dict(BASE, index_path=index, shards_in_flight=4)
    _, _, results = nodes.run_epoch(0, options, "small", small)
    _, _, window = nodes.run_epoch(0, dict(options, window_shuffle=1), "small-window", small)
    # The batches of the window asked for by name: no global order.
    assert [r["labels"] for r in results] == [r["labels"] for r in window]
    assert all(r["labels"] for r in results)


def read_epoch(urls, options, first=0, count=None):
    """Labels per batch of epoch 1 from batch `first` (count: that many, as
    a Dask task's seek_range asks), one loader in this process."""
    loader = Loader(urls, **options)
    try:
        if count is None:
            loader.seek(1, first)
        else:
            loader.seek_range(1, first, count)
        out = []
        while (batch := loader.next()) is not None:
            out.append([int(s["cls"]) for s in batch.samples()])
            del batch
        return out
    finally:
        loader.close()


def test_resume_threads_and_ranges_give_the_same_batches_through_the_cache(sim, tmp_path):
    """One rank reading node 0's URLs through a cache: the global order is
    chosen (it mixes like a permutation), and a resume at a batch, a range of
    batches (a Dask task), another thread count and a cold cache against a
    warm one all give the same batches as one uninterrupted epoch."""
    nodes, index = sim
    urls = [nodes.nginx.url(f"node0/{n}") for n in nodes.names]
    options = dict(BASE, index_path=index, cache_dir=str(tmp_path / "cache"),
                   cache_size=2 * all_bytes(nodes))
    whole = read_epoch(urls, options)
    labels = [c for b in whole for c in b]
    assert sorted(labels) == sorted(i // PER_CLASS for i in range(SHARDS * PER_SHARD))
    everything = [{"labels": whole}]
    got = node_sim.classes_per_batch(everything)
    uniform = node_sim.uniform_classes_per_batch(everything, rounds=5)
    assert got >= 0.9 * uniform, (got, uniform)
    assert read_epoch(urls, options, first=7) == whole[7:]  # warm cache
    assert read_epoch(urls, options, first=3, count=4) == whole[3:7]
    assert read_epoch(urls, dict(options, threads=2)) == whole
    cold = dict(options, cache_dir=str(tmp_path / "cold"))
    assert read_epoch(urls, cold, first=150) == whole[150:]


def test_the_order_kind_is_part_of_a_saved_state(sim, tmp_path):
    """cache_size only changes speed, except that a cache holding the node's
    shards gives remote shards the global order: a state saved by such a
    loader is refused by one whose cache is too small (another order), and
    info() says which order each reads."""
    import stoker
    nodes, index = sim
    urls = [nodes.nginx.url(f"node0/{n}") for n in nodes.names]
    cache = str(tmp_path / "cache")
    big, small = 2 * all_bytes(nodes), all_bytes(nodes) // 2

    def loader(size):
        return stoker.Loader(urls, batch_size=64, image_size=8, index=index, cache_dir=cache,
                             cache_size=size, shards_in_flight=4)
    orders = []
    for size in (big, small):
        c = Loader(urls, **dict(BASE, index_path=index, cache_dir=cache, cache_size=size,
                                shards_in_flight=4))
        orders.append(c.info()["global_order"])
        c.close()
    assert orders == [True, False]
    saved = loader(big)
    state = saved.state_dict()
    saved.close()
    same = loader(big + (1 << 20))
    same.load_state_dict(state)  # another cache_size with the same order is fine
    same.close()
    other = loader(small)
    with pytest.raises(ValueError, match="other URLs or options"):
        other.load_state_dict(state)
    other.close()
