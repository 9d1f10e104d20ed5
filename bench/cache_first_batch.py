#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Time to first batch through the node cache on a thin link.

One shard of --mb MB (members copied from the given sample shards) is served
by nginx behind DelayProxy limited to --rate MB/s. Each round, alternating
the contenders, runs `stoker bench --json` and takes first_batch_seconds:
  no-cache   straight from the proxy;
  cold       through a fresh, empty cache directory (a miss);
  warm       through the cache the cold run filled (a hit);
and, with --before BIN, a second binary's cold cache (e.g. one built before
a miss streamed). Also times a plain download of the shard. Prints medians.

usage: bench/cache_first_batch.py [--stoker build-rel/stoker] [--before BIN]
                                  [--rounds 3] [--rate 20] [--mb 80] SHARD...
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from servers import DelayProxy, Nginx  # noqa: E402


def make_shard(path, sources, limit):
    """Copy members of the source shards into one tar until it holds limit bytes."""
    total = 0
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as out:
        for src in sources:
            with tarfile.open(src) as t:
                for m in t:
                    if total >= limit:
                        return
                    if m.isfile():
                        out.addfile(m, t.extractfile(m))
                        total += m.size


def first_batch(stoker, url, extra):
    cmd = [stoker, "bench", "--json", "--batch-size", "64", "--shards-in-flight", "1", *extra, url]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--before", help="another stoker binary whose cold cache to time")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=20, help="link MB/s")
    ap.add_argument("--mb", type=float, default=80, help="shard size in MB")
    ap.add_argument("shards", nargs="+")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stk-cache-bench-"))
    try:
        make_shard(tmp / "big.tar", a.shards, a.mb * 1e6)
        size = (tmp / "big.tar").stat().st_size
        times = {}
        with Nginx(tmp, tmp / "nginx") as nginx, \
                DelayProxy(nginx.port, delay_s=0.005, rate=a.rate * 1e6) as proxy:
            url = proxy.url("big.tar")
            bins = [("", a.stoker)] + ([("before ", a.before)] if a.before else [])
            for r in range(a.rounds):
                t = time.monotonic()
                with urllib.request.urlopen(url) as resp:
                    resp.read()
                times.setdefault("download", []).append(time.monotonic() - t)
                times.setdefault("no-cache", []).append(
                    first_batch(a.stoker, url, [])["first_batch_seconds"])
                for tag, binary in bins:
                    cache = tmp / f"cache-{r}-{tag.strip() or 'now'}"
                    args = ["--cache-dir", str(cache), "--cache-size", "1G"]
                    cold = first_batch(binary, url, args)
                    assert cold["cache_misses"] == 1, cold
                    times.setdefault(tag + "cold", []).append(cold["first_batch_seconds"])
                    if not tag:
                        warm = first_batch(binary, url, args)
                        assert warm["cache_hits"] == 1, warm
                        times.setdefault("warm", []).append(warm["first_batch_seconds"])
        print(f"shard {size / 1e6:.1f} MB, link {a.rate:g} MB/s, {a.rounds} rounds, medians:")
        for name, v in times.items():
            label = "whole download" if name == "download" else f"first batch, {name}"
            print(f"  {label:28s} {statistics.median(v):7.3f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
