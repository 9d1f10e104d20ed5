#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Two builds of stoker on the same shards: is a change within run-to-run
noise? (issue 24: `make bench-raw` and `make bench-decode` before and after.)

Runs the stoker halves of bench/raw_read.py and bench/decode_vs_torchvision.py
with the base build's and this build's `stoker`, alternating base and new in
every round (the order reversed every other round), pinned with taskset(1)
to the first N cores, the shards in the page cache. Prints per case the
median over the rounds of each build and new/base; the spread of each
build's rounds (min..max relative to its median) is the noise to compare
the ratio with. Each run's CPU time (user + system of the stoker process)
is compared too: on a loaded machine it moves far less than the rates,
which count the time other processes held the cores.

usage: bench/compare_builds.py --base BASE/stoker [--new build-rel/stoker]
                               [--rounds 5] SHARD...
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

# (name, threads, stoker bench flags): raw_read.py's stoker contenders and
# the decode variants of decode_vs_torchvision.py.
CASES = [
    ("raw, 1 thread, storage order", 1, ["--no-shuffle", "--epochs", "3"], "read_mb_per_s"),
    ("raw, 2 threads, shuffled", 2, ["--epochs", "3"], "read_mb_per_s"),
    ("decode train uint8, 1 thread", 1,
     ["--decode", "train", "--size", "224", "--batch-size", "64", "--dtype", "uint8"],
     "images_per_s"),
    ("decode train float32, 2 threads", 2,
     ["--decode", "train", "--size", "224", "--batch-size", "64", "--dtype", "float32"],
     "images_per_s"),
]


def pin(n):
    taskset = shutil.which("taskset")
    return [taskset, "-c", ",".join(str(c) for c in range(n))] if taskset else []


def run(stoker, n, flags, shards):
    """(the run's JSON, its CPU seconds)."""
    cmd = pin(n) + [stoker, "bench", "--json", "--threads", str(n), *flags, *shards]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"{' '.join(cmd)}: exit status {status}")
    return json.loads(out.strip().splitlines()[-1]), usage.ru_utime + usage.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the stoker binary built before the change")
    ap.add_argument("--new", default="build-rel/stoker")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("shards", nargs="+")
    args = ap.parse_args()
    for s in args.shards:  # warm the page cache
        with open(s, "rb") as f:
            while f.read(1 << 22):
                pass
    builds = {"base": args.base, "new": args.new}
    results = {(case[0], b): [] for case in CASES for b in builds}
    cpu = {(case[0], b): [] for case in CASES for b in builds}
    for r in range(args.rounds):
        order = list(builds) if r % 2 == 0 else list(reversed(builds))
        for name, n, flags, key in CASES:
            for b in order:
                out, seconds = run(builds[b], n, flags, args.shards)
                results[(name, b)].append(out[key])
                cpu[(name, b)].append(seconds)
    print(f"{len(args.shards)} shards, {args.rounds} rounds alternating base/new, pinned, "
          f"{os.cpu_count()} cores; base {args.base}, new {args.new}")
    print(f"{'case':40s} {'base':>9s} {'spread':>13s} {'new':>9s} {'spread':>13s} {'new/base':>8s}"
          f" {'CPU s base':>10s} {'new':>6s} {'new/base':>8s}")
    for name, _, _, key in CASES:
        unit = "MB/s" if key == "read_mb_per_s" else "img/s"
        cells = []
        for b in builds:
            v = results[(name, b)]
            m = statistics.median(v)
            cells += [f"{m:9.0f}", f"{min(v) / m - 1:+.0%}..{max(v) / m - 1:+.0%}".rjust(13)]
        ratio = statistics.median(results[(name, "new")]) / statistics.median(results[(name, "base")])
        cb, cn = statistics.median(cpu[(name, "base")]), statistics.median(cpu[(name, "new")])
        print(f"{name + ' (' + unit + ')':40s} {' '.join(cells)} {ratio:8.3f}"
              f" {cb:10.2f} {cn:6.2f} {cn / cb:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
