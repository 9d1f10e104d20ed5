# SPDX-License-Identifier: MIT
"""Many nodes, many epochs (issue 36): node caches with and without
node_affinity, and eviction by next use against LRU and the optimum.

Simulates --nodes nodes of --ranks-per-node rank processes on this machine
(tests/python/node_sim.py: one nginx as the origin, one cache
directory per node) and prints, per epoch, the bytes each node fetched from
the origin and its cache hit rate, for
  - node_affinity=1 and a cache holding the node's share,
  - node_affinity=0 (every epoch a new split of all shards) and the same cache,
  - node_affinity=1 and a cache of half the node's share (eviction by next
    use), beside the misses of LRU and of the offline optimum (Belady) over
    the node's read order of an uncached run.
Then the label mixing on class-sorted shards at default options (16 shards
in flight, shuffle buffer 2000) with and without affinity: distinct classes
per batch against a uniform permutation of the same labels, in each rank's
batches and in the global batches (batch i of every rank: what a DDP step
averages over). Last, the same shards through node caches that hold each
node's shards, with a dataset index (the global order) and without (the
window): mixing per rank against a uniform draw from its node's samples,
and each node's bytes from the origin per epoch.
First (no simulation: the dealing alone), what a resize moves: the
fraction of shards and of bytes that change node from one node count to
another, for stoker's dealing (bounded-load rendezvous hashing) and for the
greedy dealing it replaced (each shard to the least loaded node), with the
nodes' balance (max / mean samples) at both counts.

Usage: PYTHONPATH=build-rel/python python3 bench/node_cache.py
"""
import argparse
import heapq
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
import node_sim  # noqa: E402
from stoker._ext._stoker import Loader, index_build, node_split  # noqa: E402


def greedy_split(counts, seed, nodes):
    """The dealing before rendezvous hashing (src/plan/plan.c until issue
    36's elastic resume): shards in a seeded order, each to the node
    holding the fewest samples (Python's order, not stoker's RNG: the
    figures are statistical)."""
    order = list(range(len(counts)))
    random.Random(seed).shuffle(order)
    heap = [(0, k) for k in range(nodes)]
    node_of = [0] * len(counts)
    for i in order:
        load, k = heapq.heappop(heap)
        node_of[i] = k
        heapq.heappush(heap, (load + counts[i], k))
    return node_of


def balance(counts, node_of, nodes):
    loads = [0] * nodes
    for c, k in zip(counts, node_of):
        loads[k] += c
    return max(loads) / (sum(loads) / nodes)


def resize_moves(args):
    """Shards and bytes that change node when a run resumes at another node
    count, and the balance before and after."""
    rng = random.Random(5)
    counts = [rng.randint(args.move_samples // 2, args.move_samples * 3 // 2)
              for _ in range(args.move_shards)]
    sizes = [c * rng.randint(80, 120) * 1024 for c in counts]  # bytes: samples of ~100 KiB
    print(f"resize: {args.move_shards} shards of {min(counts)}..{max(counts)} samples; "
          f"changed node: shards, bytes (max/mean samples per node before, after)")
    for old, new in ((8, 6), (4, 3), (4, 2), (2, 4)):
        cells = []
        for name, split in (("rendezvous", lambda n: node_split(counts, 1, n)),
                            ("greedy", lambda n: greedy_split(counts, 1, n))):
            a, b = split(old), split(new)
            moved = [i for i in range(len(counts)) if a[i] != b[i]]
            cells.append(f"{name} {len(moved) / len(counts):5.1%} "
                         f"{sum(sizes[i] for i in moved) / sum(sizes):5.1%} "
                         f"({balance(counts, a, old):.3f}, {balance(counts, b, new):.3f})")
        lost = max(0, old - new) / old or (new - old) / new
        print(f"  {old} -> {new} nodes (the least that must move: {lost:5.1%}): "
              + ";  ".join(cells))


def cache_runs(args, sim, shard):
    share = args.shards // args.nodes * shard
    base = dict(batch_size=4, threads=1, shards_in_flight=2, seed=1)
    runs = [("node_affinity=1, cache = node's share", dict(base, node_affinity=1), "full",
             share + share // 4),
            ("node_affinity=0, cache = node's share", dict(base, node_affinity=0), "plain",
             share + share // 4),
            ("node_affinity=1, cache = half the share", dict(base, node_affinity=1), "half",
             share // 2 + shard // 2)]
    trace = [sim.run_epoch(e, dict(base, node_affinity=1)) for e in range(args.epochs)]
    for name, options, tag, size in runs:
        print(f"{name} ({size / 1e6:.1f} MB per node)")
        print(f"  {'epoch':>5s}  " + "  ".join(f"node {k}: MB from origin, hits" for k in
                                                range(args.nodes)))
        for e in range(args.epochs):
            origin, _, results = sim.run_epoch(e, options, tag, size)
            cells = []
            for k in range(args.nodes):
                ranks = results[k * args.ranks_per_node:(k + 1) * args.ranks_per_node]
                hits = sum(r["hits"] for r in ranks)
                opens = hits + sum(r["misses"] for r in ranks)
                cells.append(f"{origin[k] / 1e6:21.2f} {100 * hits / max(opens, 1):5.0f}%")
            print(f"  {e + 1:5d}  " + "  ".join(cells))
    capacity = args.shards // args.nodes // 2
    for k in range(args.nodes):
        reads = [u for e in range(args.epochs) for u in trace[e][1][k]]
        first = len(trace[0][1][k])
        opt = node_sim.misses(reads, capacity, "belady") - first
        lru = node_sim.misses(reads, capacity, "lru") - first
        print(f"  node {k}, epochs 2-{args.epochs}, {capacity} shards cached: optimum "
              f"{opt * shard / 1e6:.2f} MB ({opt} shards), LRU {lru * shard / 1e6:.2f} MB "
              f"({lru} shards) from the origin")


def resize_runs(args, work):
    """A run at one node count warmed for two epochs, then the third epoch
    at another (as after an elastic resume, from the epoch after the
    interrupted one) through the same caches, against the warm run going
    on unchanged: each node's MB from the origin, and the shards' MB that
    change node under rendezvous hashing and under the greedy dealing."""
    shard = os.path.getsize(work / "data" / "shard-0000.tar")
    options = dict(batch_size=4, threads=1, shards_in_flight=2, seed=1, node_affinity=1)
    pythonpath = os.environ.get("PYTHONPATH", "")
    small, large = args.nodes, args.nodes + 1
    size = -(-args.shards // small) * shard * 5 // 4  # the larger share, and room
    print(f"\nresize after two warm epochs, epoch 3: MB from the origin per node "
          f"(cache {size / 1e6:.1f} MB per node)")
    for old, new, tag in ((large, small, "shrink"), (small, large, "grow")):
        with node_sim.Nodes(work / "data", work, old, args.ranks_per_node, pythonpath) as sim:
            for e in range(2):
                sim.run_epoch(e, options, tag, size)
            same, _, _ = sim.run_epoch(2, options, tag, size)
            with node_sim.Nodes(work / "data", work, new, args.ranks_per_node, pythonpath,
                                nginx=sim.nginx) as resized:
                origin, _, _ = resized.run_epoch(2, options, tag, size)
        ones = [1] * args.shards
        moved = {name: sum(a != b for a, b in zip(split(old), split(new)))
                 for name, split in (("rendezvous", lambda n: node_split(args.shards, 1, n)),
                                     ("greedy", lambda n: greedy_split(ones, 1, n)))}
        print(f"  {old} -> {new} nodes: " + " ".join(f"{b / 1e6:.2f}" for b in origin)
              + f" (sum {sum(origin) / 1e6:.2f}); unchanged {old} nodes: "
              + " ".join(f"{b / 1e6:.2f}" for b in same)
              + f"; shards that change node: rendezvous {moved['rendezvous']} "
              f"({moved['rendezvous'] * shard / 1e6:.2f} MB), greedy {moved['greedy']} "
              f"({moved['greedy'] * shard / 1e6:.2f} MB)")
    elastic_run(args, work, shard, options, size)


def elastic_run(args, work, shard, options, size):
    """An elastic resume in the global order (an index over the remote
    shards): a run at nodes + 1 reads epoch 1, its ranks deliver half their
    shares of epoch 2 (counts, as their states say), and a run at nodes
    reads the rest of epoch 2 and then epoch 3, against the old run going
    on unchanged."""
    pythonpath = os.environ.get("PYTHONPATH", "")
    old_nodes, new_nodes = args.nodes + 1, args.nodes
    with node_sim.Nodes(work / "data", work, old_nodes, 1, pythonpath) as old:
        urls = [old.nginx.url(f"node{k}/{n}") for k in range(old_nodes) for n in old.names]
        index = str(work / "elastic-index.json")
        index_build(index, urls, False)
        opts = dict(options, index_path=index)
        old.run_epoch(0, opts, "elastic", size)
        probe = Loader(urls[:args.shards], rank=0, world_size=old_nodes, ranks_per_node=1,
                       cache_dir=str(work / "elastic-probe"), cache_size=size, **opts)
        share = -(-args.shards * args.samples_per_shard // old_nodes)
        rest = probe.remainder([share // 2] * old_nodes, None, 1)
        global_order = probe.info()["global_order"]
        probe.close()
        with node_sim.Nodes(work / "data", work, new_nodes, 1, pythonpath,
                            nginx=old.nginx) as new:
            part, gets, _ = new.run_epoch(1, opts, "elastic", size, remainder=(rest, old_nodes))
            after, _, _ = new.run_epoch(2, opts, "elastic", size)
    print(f"  elastic resume, global order {bool(global_order)}: {old_nodes} -> {new_nodes} "
          f"nodes, the rest of epoch 2 ({sum(e - b for b, e in rest)} samples): "
          + " ".join(f"{b / 1e6:.2f}" for b in part)
          + f" MB ({sum(len(g) for g in gets)} GETs, {sum(len(set(g)) for g in gets)} "
          "distinct per node); epoch 3: " + " ".join(f"{b / 1e6:.2f}" for b in after)
          + " MB (an unchanged warm run: 0)")


def mixing(args, work):
    data = work / "sorted"
    per_class = args.mix_per_class
    n = args.mix_shards * args.mix_per_shard
    node_sim.write_shards(data, args.mix_shards, args.mix_per_shard, 0, per_class)
    print(f"\nmixing: {n} samples of {-(-n // per_class)} classes in class order, shards of "
          f"{args.mix_per_shard}, {args.nodes} x {args.ranks_per_node} ranks, batches of "
          f"{args.mix_batch} per rank, default shards_in_flight and shuffle_buffer; classes per "
          f"batch / a uniform permutation's")
    with node_sim.Nodes(data, work / "mix", args.nodes, args.ranks_per_node,
                        os.environ.get("PYTHONPATH", "")) as sim:
        for affinity in (0, 1):
            for e in range(2):
                _, _, results = sim.run_epoch(e, dict(batch_size=args.mix_batch, seed=1,
                                                      threads=1, node_affinity=affinity))
                cells = []
                for joined in (False, True):
                    got = node_sim.classes_per_batch(results, joined)
                    uniform = node_sim.uniform_classes_per_batch(results, joined)
                    cells.append(f"{got:6.1f} / {uniform:6.1f} = {got / uniform:.2f}x")
                print(f"  node_affinity={affinity} epoch {e + 1}: rank batches {cells[0]}, "
                      f"global batches {cells[1]}")
        cached_order(args, sim, work, data)


def cached_order(args, sim, work, data):
    """The same shards through a cache holding each node's shards, with a
    dataset index (the global order, docs/shuffle.md) and without (the
    window): rank batches against a uniform draw from the node's samples,
    and the bytes each node fetched from the origin per epoch."""
    index = str(work / "mix-index.json")
    urls = [sim.nginx.url(f"node{k}/{n}") for k in range(args.nodes) for n in sim.names]
    index_build(index, urls, False)
    size = sum(os.path.getsize(data / n) for n in sim.names)  # each node's shards twice over
    print(f"\nthrough a node cache of {size / 1e6:.1f} MB per node (node_affinity auto), "
          f"rank batches / a uniform draw from the node's samples, MB from the origin per node")
    base = dict(batch_size=args.mix_batch, seed=1, threads=1)
    for name, options in (("window", base), ("index= (global order)",
                                             dict(base, index_path=index))):
        for e in range(3):
            origin, _, results = sim.run_epoch(e, options, name.split()[0], size)
            got = [node_sim.classes_per_batch([r]) for r in results]
            uniform = [node_sim.node_uniform_classes_per_batch(results, rank, args.ranks_per_node)
                       for rank in range(len(results))]
            ratio = sum(g / u for g, u in zip(got, uniform)) / len(got)
            print(f"  {name:22s} epoch {e + 1}: {sum(got) / len(got):6.1f} / "
                  f"{sum(uniform) / len(uniform):6.1f} = {ratio:.2f}x, origin MB "
                  + " ".join(f"{b / 1e6:.2f}" for b in origin))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--samples-per-shard", type=int, default=4)
    ap.add_argument("--sample-bytes", type=int, default=48 * 1024)
    # As tests/python/test_mixing.py's 34 classes x 94 in 16 shards of
    # 200, per rank of 4.
    ap.add_argument("--mix-shards", type=int, default=64)
    ap.add_argument("--mix-per-class", type=int, default=94)
    ap.add_argument("--mix-per-shard", type=int, default=200)
    ap.add_argument("--mix-batch", type=int, default=64)
    ap.add_argument("--move-shards", type=int, default=4096)
    ap.add_argument("--move-samples", type=int, default=1000)
    args = ap.parse_args()
    resize_moves(args)
    with tempfile.TemporaryDirectory(prefix="stoker-nodes-") as tmp:
        work = Path(tmp)
        node_sim.write_shards(work / "data", args.shards, args.samples_per_shard,
                              args.sample_bytes, per_class=8)
        print(f"{args.nodes} nodes x {args.ranks_per_node} ranks, {args.shards} shards, "
              f"{args.epochs} epochs through one nginx")
        with node_sim.Nodes(work / "data", work, args.nodes, args.ranks_per_node,
                            os.environ.get("PYTHONPATH", "")) as sim:
            cache_runs(args, sim, os.path.getsize(sim.data_dir / sim.names[0]))
        resize_runs(args, work)
        mixing(args, work)


if __name__ == "__main__":
    main()
