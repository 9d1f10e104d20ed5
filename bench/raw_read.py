#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Raw shard reading: stoker's tar pipeline against `cat shards > /dev/null`.

Measures, in one run and alternating the contenders each round:
  cat     cat(1) of every shard into /dev/null: the cost of moving the bytes
          out of the page cache, the floor for any reader;
  stoker  `stoker bench` reading the same shards into batches of samples,
          with 1 thread pinned to one core (taskset) and with 2 threads, in
          storage order and shuffled (4 shards interleaved, 1000-sample
          buffer).
The shards are read once first so every contender sees them in the page
cache (warm). Prints medians and the ratios stoker/cat; the issue's target
is >= 0.5 for one pinned core.

usage: bench/raw_read.py [--stoker build-rel/stoker] [--rounds 5] [--epochs 3]
                        [--copies N] SHARD...
--copies N reads N distinct copies of the shards (made in a temporary
directory next to the first shard) so the set is large enough to time.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run_stoker(cmd):
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=3,
                    help="epochs per stoker run, to amortize its start-up")
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("shards", nargs="+")
    args = ap.parse_args()
    if args.copies == 1:
        return measure(args)
    # The copies go beside the shards, on their filesystem (not /tmp, which
    # may be memory), and are removed at the end.
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(args.shards[0]))) as tmp:
        copies = []
        for c in range(args.copies):
            for s in args.shards:
                dst = os.path.join(tmp, f"copy{c}-{os.path.basename(s)}")
                shutil.copyfile(s, dst)
                copies.append(dst)
        args.shards = copies
        return measure(args)


def measure(args):
    total = sum(os.path.getsize(s) for s in args.shards)
    taskset = shutil.which("taskset")
    for s in args.shards:  # warm the page cache
        with open(s, "rb") as f:
            while f.read(1 << 22):
                pass

    pin = [taskset, "-c", "0"] if taskset else []
    common = [args.stoker, "bench", "--json", "--epochs", str(args.epochs)]
    contenders = {"cat": ["cat", *args.shards]}
    for order, flags in (("storage order", ["--no-shuffle"]), ("shuffled", [])):
        contenders[f"stoker 1 thread, 1 core, {order}"] = pin + common + [
            "--threads", "1", *flags, *args.shards]
        contenders[f"stoker 2 threads, {order}"] = common + ["--threads", "2", *flags,
                                                             *args.shards]
    mbs = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, cmd in contenders.items():
            if name == "cat":
                start = time.perf_counter()
                for _ in range(args.epochs):
                    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                mbs[name].append(args.epochs * total / (time.perf_counter() - start) / 1e6)
            else:
                mbs[name].append(run_stoker(cmd)["read_mb_per_s"])

    print(f"{len(args.shards)} shards, {total / 1e6:.0f} MB, page cache warm, "
          f"{os.cpu_count()} cores, {args.rounds} rounds x {args.epochs} epochs "
          "(median MB/s of shard bytes)")
    cat = statistics.median(mbs["cat"])
    for name, values in mbs.items():
        m = statistics.median(values)
        print(f"  {name:40s} {m:8.0f} MB/s   ratio to cat {m / cat:5.2f}")
    one_core = statistics.median(mbs["stoker 1 thread, 1 core, storage order"]) / cat
    print(f"target: stoker on one core >= 0.5 x cat: {'met' if one_core >= 0.5 else 'NOT met'} "
          f"({one_core:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
