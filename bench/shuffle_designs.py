# SPDX-License-Identifier: MIT
"""Shuffle designs weighed for issue 19, modelled in Python on labels alone:
class-sorted samples of 34 classes in shards of 200 (1,600 in 8 shards, the
issue's shape, and 3,200 in 16), batches of 64, distinct classes per batch
(mean, first batch) over several seeds. The
models follow the C code's rules (src/plan/interleave.c, shuffle.c; the old
shuffle from its description: disjoint windows ramping 64, 128, ... up to
the buffer) but not its random streams, so they are the designs' figures,
not the loader's: tests/python/test_mixing.py measures the loader itself.

Usage: python3 bench/shuffle_designs.py
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mixing  # noqa: E402  (bench/mixing.py)

CLASSES, PER_SHARD, BATCH, SEEDS = 34, 200, 64, 10


def sorted_shards(n):
    labels = sorted(i % CLASSES for i in range(n))
    return [labels[i:i + PER_SHARD] for i in range(0, n, PER_SHARD)]


def interleave(shards, in_flight, rng):
    """Slot j streams shards j, j+K, ... of a shuffled shard order; each
    sample comes from a random slot still streaming."""
    order = list(range(len(shards)))
    rng.shuffle(order)
    streams = [iter([x for s in order[j::in_flight] for x in shards[s]])
               for j in range(in_flight)]
    out, active = [], list(range(in_flight))
    while active:
        j = rng.choice(active)
        try:
            out.append(next(streams[j]))
        except StopIteration:
            active.remove(j)
    return out


def disjoint_windows(items, window, rng, ramp):
    out, i, size = [], 0, 64 if ramp else window
    while i < len(items):
        w = items[i:i + size]
        rng.shuffle(w)
        out += w
        i += size
        size = min(window, size * 2)
    return out


def sliding_keys(items, window, rng):
    """Key max(i - W, 0) + u W; key order, then the held tail drained at
    random (what stk__shuffle does, without its heap)."""
    n = len(items)
    keys = [max(i - window, 0) + rng.random() * window for i in range(n)]
    limit = max(n - window, 0)  # the last base: keys at or below it left in key order
    ordered = sorted(range(n), key=lambda i: keys[i])
    head = [i for i in ordered if keys[i] <= limit]
    tail = [i for i in ordered if keys[i] > limit]
    rng.shuffle(tail)
    return [items[i] for i in head + tail]


def row(name, orders):
    per = [mixing.classes_per_batch(o, BATCH) for o in orders]
    mean = mixing.mean([mixing.mean(p) for p in per])
    first = mixing.mean([p[0] for p in per])
    print(f"  {name:64s} {mean:5.1f} {first:6.1f}")


def main():
    for n in (1600, 3200):
        shards = sorted_shards(n)
        everything = [x for s in shards for x in s]
        k = len(shards)
        print(f"{n} class-sorted samples, {CLASSES} classes, {k} shards; batches of {BATCH}; "
              f"mean over {SEEDS} seeds")
        print(f"  {'order':64s} {'mean':>5s} {'first':>6s}")
        print(f"  {'a uniform permutation':64s} "
              f"{mixing.uniform_classes_per_batch(everything, BATCH):5.1f}")
        row("WebDataset shardshuffle=8 + shuffle(1000)",
            [mixing.webdataset_order(shards, s) for s in range(SEEDS)])
        designs = [
            ("4 in flight, disjoint windows of 1000 ramping from 64 (before)",
             lambda r: disjoint_windows(interleave(shards, 4, r), 1000, r, True)),
            (f"{k} in flight, disjoint windows of 2000, no ramp",
             lambda r: disjoint_windows(interleave(shards, k, r), 2000, r, False)),
            (f"{k} in flight, sliding keys W = 1000",
             lambda r: sliding_keys(interleave(shards, k, r), 1000, r)),
            (f"{k} in flight, sliding keys W = 2000 (now)",
             lambda r: sliding_keys(interleave(shards, k, r), 2000, r)),
        ]
        for name, design in designs:
            row(name, [design(random.Random(s)) for s in range(SEEDS)])


if __name__ == "__main__":
    main()
