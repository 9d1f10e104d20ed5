#!/usr/bin/python3
"""Raw shard reading: stoker's tar pipeline against `cat shards > /dev/null`.

Measures, in one run and alternating the contenders each round:
  cat     cat(1) of every shard into /dev/null: the cost of moving the bytes
          out of the page cache, the floor for any reader;
  stoker  `stoker bench` reading the same shards into batches of samples,
          with 1 thread pinned to one core (taskset), and with 2 threads.
The shards are read once first so every contender sees them in the page
cache (warm). Prints medians and the ratios stoker/cat; the issue's target
is >= 0.5 for one pinned core.

usage: bench/raw_read.py [--stoker build-rel/stoker] [--rounds 5] SHARD...
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


def run_stoker(cmd):
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("shards", nargs="+")
    args = ap.parse_args()

    total = sum(os.path.getsize(s) for s in args.shards)
    taskset = shutil.which("taskset")
    for s in args.shards:  # warm the page cache
        with open(s, "rb") as f:
            while f.read(1 << 22):
                pass

    contenders = {
        "cat": ["cat", *args.shards],
        "stoker 1 thread, 1 core": ([taskset, "-c", "0"] if taskset else []) +
        [args.stoker, "bench", "--json", "--threads", "1", "--no-shuffle", *args.shards],
        "stoker 2 threads": [args.stoker, "bench", "--json", "--threads", "2", *args.shards],
    }
    mbs = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, cmd in contenders.items():
            if name == "cat":
                start = time.perf_counter()
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                mbs[name].append(total / (time.perf_counter() - start) / 1e6)
            else:
                mbs[name].append(run_stoker(cmd)["read_mb_per_s"])

    print(f"{len(args.shards)} shards, {total / 1e6:.0f} MB, page cache warm, "
          f"{os.cpu_count()} cores, {args.rounds} rounds (median MB/s of shard bytes)")
    cat = statistics.median(mbs["cat"])
    for name, values in mbs.items():
        m = statistics.median(values)
        print(f"  {name:26s} {m:8.0f} MB/s   ratio to cat {m / cat:5.2f}")
    one_core = statistics.median(mbs["stoker 1 thread, 1 core"]) / cat
    print(f"target: stoker on one core >= 0.5 x cat: {'met' if one_core >= 0.5 else 'NOT met'} "
          f"({one_core:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
