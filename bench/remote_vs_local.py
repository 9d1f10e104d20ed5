#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Remote shards against local ones: does the loader hide a wide-area round trip?

Serves the shards with an nginx of its own on 127.0.0.1 and puts a delaying
TCP proxy in front of it (tests/integration/servers.py: `delay` each way,
100 ms round trip by default, no bandwidth limit), then runs, alternating
each round:
  local   stoker bench --decode train --threads T SHARD...
  http    the same over http://127.0.0.1:PROXY/SHARD
Page cache warm for both. Prints the median images/s of each, the ratio
http/local (the issue's target is >= 0.95) and the median time to the first
batch.

On a small machine nginx and the proxy take CPU from the decoder, which a
real network and a real server would not. --pin separates them: stoker runs
on every CPU but the last (both contenders alike), nginx and the proxy on
the last, so the figure says whether stoker hides the latency with the same
client CPUs. Without --pin everything shares every CPU.

usage: bench/remote_vs_local.py [--stoker build-rel/stoker] [--rounds 3]
           [--epochs 1] [--samples-per-rank N] [--threads 2]
           [--shards-in-flight 4] [--delay-ms 50] [--pin] SHARD...
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from servers import DelayProxy, Nginx  # noqa: E402


def bench(args, urls):
    """stoker bench's report, plus the CPU seconds stoker used (cpu_s) and
    those this process (the proxy) used meanwhile (proxy_cpu_s): on a small
    shared machine the proxy's CPU is taken from decoding, which a real
    network would not do."""
    cmd = ["taskset", "-c", args.client_cpus] if args.client_cpus else []
    cmd += [args.stoker, "bench", "--json", "--decode", "train", "--threads", str(args.threads),
           "--shards-in-flight", str(args.shards_in_flight), "--epochs", str(args.epochs)]
    if args.samples_per_rank:
        cmd += ["--samples-per-rank", str(args.samples_per_rank)]
    cmd += urls
    before, own = resource.getrusage(resource.RUSAGE_CHILDREN), time.process_time()
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rep = json.loads(out)
    rep["cpu_s"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    rep["proxy_cpu_s"] = time.process_time() - own
    return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--samples-per-rank", type=int, default=0,
                    help="samples per epoch: more than the shards hold makes the epoch "
                         "pass over them again (a larger dataset, one start-up)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shards-in-flight", type=int, default=4)
    ap.add_argument("--delay-ms", type=float, default=50.0, help="added each direction")
    ap.add_argument("--pin", action="store_true",
                    help="stoker on all CPUs but the last, nginx and the proxy on the last")
    ap.add_argument("shards", nargs="+")
    args = ap.parse_args()
    args.client_cpus = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            sys.exit("remote_vs_local: --pin needs at least 2 CPUs")
        args.client_cpus = ",".join(str(c) for c in cpus[:-1])
        os.sched_setaffinity(0, {cpus[-1]})  # the proxy threads, and nginx started below
    shards = [Path(s).resolve() for s in args.shards]
    root = shards[0].parent
    if any(s.parent != root for s in shards):
        sys.exit("remote_vs_local: the shards must be in one directory")
    for s in shards:  # warm the page cache
        with open(s, "rb") as f:
            while f.read(1 << 22):
                pass
    results = {"local": [], "http": []}
    with tempfile.TemporaryDirectory() as prefix, Nginx(root, prefix) as nginx, \
            DelayProxy(nginx.port, delay_s=args.delay_ms / 1000) as proxy:
        remote = [proxy.url(s.name) for s in shards]
        for r in range(args.rounds):
            for name, urls in (("local", [str(s) for s in shards]), ("http", remote)):
                rep = bench(args, urls)
                results[name].append(rep)
                print(f"round {r + 1} {name:5s} {rep['images_per_s']:8.1f} images/s  "
                      f"first batch {rep['first_batch_seconds'] * 1000:6.1f} ms  "
                      f"stoker CPU {1000 * rep['cpu_s'] / rep['images']:.3f} ms/image  "
                      f"proxy CPU {rep['proxy_cpu_s']:.2f} s of {rep['seconds']:.2f} s  "
                      f"retries {rep['retries']}", flush=True)
        gets = sum(1 for e in nginx.access_log() if e[0] == "GET")
    med = {k: statistics.median(r["images_per_s"] for r in v) for k, v in results.items()}
    first = {k: statistics.median(r["first_batch_seconds"] for r in v) for k, v in results.items()}
    cpu = {k: statistics.median(1000 * r["cpu_s"] / r["images"] for r in v)
           for k, v in results.items()}
    print(f"\n{len(shards)} shards, {results['local'][0]['images']} images per run, "
          f"--threads {args.threads} --shards-in-flight {args.shards_in_flight}, "
          f"{2 * args.delay_ms:.0f} ms round trip, {os.cpu_count()} CPUs, {gets} GETs"
          + (f", stoker on CPUs {args.client_cpus}, nginx and proxy on the rest" if args.pin
             else ""))
    for k in ("local", "http"):
        print(f"{k:5s} {med[k]:8.1f} images/s   first batch {first[k] * 1000:6.1f} ms   "
              f"stoker CPU {cpu[k]:.3f} ms/image")
    print(f"ratio http/local {med['http'] / med['local']:.3f} images/s (target >= 0.95), "
          f"{cpu['local'] / cpu['http']:.3f} images per stoker CPU second")


if __name__ == "__main__":
    main()
