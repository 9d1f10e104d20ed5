# SPDX-License-Identifier: MIT
"""ImageNet-shaped shuffle simulation (issue 19): 1,000 classes x 1,281
samples of a few bytes each, written in class order into shards of 10,000,
read by stoker with its default options and with more shards in flight and
a longer shuffle, with a dataset index (`stoker index`: a shuffled epoch
over local shards is then a global random order of the samples), and once
more after `stoker reshard` (shuffled by default). Prints distinct classes per batch of 256 over the epoch (mean,
first batch, minimum) against a uniform permutation and WebDataset's
shardshuffle=8 + shuffle(1000) (bench/mixing.py), and each run's peak RSS
(its own process, os.wait4).

The samples are tiny, so the RSS is the loader's own; with real images
the shuffle holds up to 2 x shuffle_buffer samples (shuffle.h) of their
size on top (ImageNet: ~110 KB each).

Usage: PYTHONPATH=build-rel/python python3 bench/shuffle_mixing.py \
           --stoker build-rel/stoker [--classes 1000 --per-class 1281]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import stoker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mixing  # noqa: E402  (bench/mixing.py)

BATCH = 256

CHILD = r"""
import json, sys, stoker
args = json.loads(sys.argv[1])
labels = [s["cls"] for s in stoker.Samples(args["shards"], decode_cls=True, seed=1,
                                          **args["options"])] if args["shards"] else []
json.dump(labels, open(args["out"], "w"))
"""


def write_sorted(directory, classes, per_class, per_shard):
    with stoker.ShardWriter(os.path.join(directory, "s-%06d.tar"), max_samples=per_shard) as w:
        for c in range(classes):
            for i in range(per_class):
                w.write({"__key__": f"{c:04d}-{i:04d}", "cls": c})
    return sorted(os.path.join(directory, n) for n in os.listdir(directory))


def read_labels(shards, options, tmp):
    """The epoch's labels in stoker's order and the reading process's peak
    RSS in MiB (shards=[]: the interpreter, torch and stoker alone)."""
    out = os.path.join(tmp, "labels.json")
    child = subprocess.Popen([sys.executable, "-c", CHILD,
                              json.dumps({"shards": shards, "options": options, "out": out})])
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"reading with {options} failed")
    with open(out) as f:
        return json.load(f), usage.ru_maxrss / 1024  # KiB -> MiB


def line(name, per_batch, uniform, extra=""):
    print(f"  {name:44s} {mixing.mean(per_batch):6.1f} {per_batch[0]:6d} {min(per_batch):6d}"
          f"  {mixing.mean(per_batch) / uniform:5.2f}  {extra}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--per-class", type=int, default=1281)
    ap.add_argument("--per-shard", type=int, default=10000)
    ap.add_argument("--best-in-flight", type=int, default=0,
                    help="shards in flight of the best setting (0: every shard)")
    ap.add_argument("--best-buffer", type=int, default=10000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stoker-mixing-") as tmp:
        start = time.monotonic()
        shards = write_sorted(os.path.join(tmp, "sorted"), args.classes, args.per_class,
                              args.per_shard)
        n = args.classes * args.per_class
        print(f"{n} samples of {args.classes} classes in class order, {len(shards)} shards "
              f"of {args.per_shard} (written in {time.monotonic() - start:.0f} s); batches of "
              f"{BATCH}")
        print(f"  {'order':44s} {'mean':>6s} {'first':>6s} {'min':>6s}  {'/unif':>5s}  peak RSS")
        per_shard = [[c for c in range(args.classes) for _ in range(args.per_class)]
                     [i:i + args.per_shard] for i in range(0, n, args.per_shard)]
        everything = [c for s in per_shard for c in s]
        uniform = mixing.uniform_classes_per_batch(everything, BATCH, rounds=2)
        print(f"  {'a uniform permutation':44s} {uniform:6.1f}")
        wds = mixing.classes_per_batch(mixing.webdataset_order(per_shard, 0), BATCH)
        line("WebDataset shardshuffle=8 + shuffle(1000)", wds, uniform)
        best = dict(shards_in_flight=args.best_in_flight or len(shards),
                    shuffle_buffer=args.best_buffer)
        index = os.path.join(tmp, "index.json")
        start = time.monotonic()
        subprocess.run([args.stoker, "index", "-o", index, *shards], check=True,
                       stdout=subprocess.DEVNULL)
        indexed = time.monotonic() - start
        runs = [("stoker defaults (16 in flight, buffer 2000)", shards, {}),
                (f"stoker defaults with index= ({indexed:.0f} s): global order", shards,
                 {"index_path": index}),
                (f"stoker {best['shards_in_flight']} in flight, buffer "
                 f"{best['shuffle_buffer']}", shards, best)]
        resharded = os.path.join(tmp, "resharded")
        start = time.monotonic()
        subprocess.run([args.stoker, "reshard", "-q", "--max-samples", str(args.per_shard),
                        "-o", os.path.join(resharded, "r-%06d.tar"), *shards], check=True,
                       stdout=subprocess.DEVNULL)
        took = time.monotonic() - start
        runs.append((f"stoker defaults after `stoker reshard` ({took:.0f} s)",
                     sorted(os.path.join(resharded, p) for p in os.listdir(resharded)), {}))
        _, base = read_labels([], {}, tmp)
        for name, urls, options in runs:
            labels, rss = read_labels(urls, options, tmp)
            assert sorted(labels) == everything
            line(name, mixing.classes_per_batch(labels, BATCH), uniform,
                 f"{rss:.0f} MiB ({rss - base:+.0f} over importing stoker)")


if __name__ == "__main__":
    main()
