#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Decoding offloaded to a Dask worker: does a CPU host add its core?

Starts a dask-scheduler and one dask-worker (1 thread, stoker decoding with
1 thread) pinned to the last CPU, and runs a trainer process pinned to the
first CPU, alternating each round:
  local    stoker.Loader(threads=1): the trainer's core alone
  cluster  the same Loader with cluster=SCHEDULER: the trainer's core plus
           the worker's
Train transform, 224 px, uint8, batch 64, default shuffle, the same shards,
index and seed; page cache warm. The trainer's loop only takes the batches
(no model), so it measures how fast batches arrive. Images/s are timed over
a steady-state window that skips the first --skip batches (longer than
every buffer: the local ring, the tasks in flight) and the last --skip
(the epoch's tail, where one side runs out of ranges before the other);
the whole epoch's rate is printed too. Also printed: bytes moved per image
from the worker, samples read per sample delivered, and the time to the
first batch. Ratios are per round, medians over rounds.

usage: bench/cluster_offload.py [--rounds 3] [--samples-per-rank 32000]
           [--skip 64] SHARD...
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TRAINER = r"""
import json, sys, time, stoker
a = json.loads(sys.argv[1])
loader = stoker.Loader(a["shards"], batch_size=64, image_size=224, transform="train", threads=1,
                       seed=1, samples_per_rank=a["samples"], index=a["index"],
                       cluster=a.get("cluster"))
times = []
start = time.perf_counter()
for images, labels in loader:
    times.append(time.perf_counter())
stats = loader.stats()
print(json.dumps({"start": start, "times": times, "cluster": stats.get("cluster"),
                  "samples_read": stats["samples_read"], "samples": stats["samples"]}))
loader.close()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc, deadline):
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"cluster_offload: a Dask process exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit("cluster_offload: the Dask scheduler did not start")


def run_trainer(args, env, mode, address):
    spec = {"shards": args.shards, "samples": args.samples_per_rank, "index": args.index}
    if mode == "cluster":
        spec["cluster"] = address
    out = subprocess.run(["taskset", "-c", args.trainer_cpu, sys.executable, "-c", TRAINER,
                          json.dumps(spec)], check=True, stdout=subprocess.PIPE, text=True,
                         env=env).stdout
    rep = json.loads(out)
    t = rep["times"]
    skip = args.skip
    if len(t) <= 2 * skip + 1:
        sys.exit(f"cluster_offload: {len(t)} batches, too few for --skip {skip}")
    rep["steady"] = 64 * (len(t) - 2 * skip - 1) / (t[-skip - 1] - t[skip])
    rep["whole"] = rep["samples"] / (t[-1] - rep["start"])
    rep["first_batch_s"] = t[0] - rep["start"]
    return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples-per-rank", type=int, default=32000,
                    help="samples in the epoch (more than the shards hold: passes over them again)")
    ap.add_argument("--skip", type=int, default=64, help="batches left out at each end")
    ap.add_argument("--stoker", default=str(REPO / "build-rel" / "stoker"))
    ap.add_argument("shards", nargs="+")
    args = ap.parse_args()
    args.shards = [os.path.abspath(s) for s in args.shards]
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("cluster_offload: needs at least 2 CPUs")
    args.trainer_cpu, worker_cpu = str(cpus[0]), str(cpus[-1])
    env = dict(os.environ, STOKER_WORKER_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "build-rel" / "python")] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        args.index = os.path.join(tmp, "index.json")
        subprocess.run([args.stoker, "index", "-o", args.index] + args.shards, check=True,
                       stdout=subprocess.DEVNULL)
        port = free_port()
        address = f"tcp://127.0.0.1:{port}"
        log = open(os.path.join(tmp, "dask.log"), "wb")
        try:
            procs.append(subprocess.Popen(
                ["taskset", "-c", worker_cpu, "dask-scheduler", "--host", "127.0.0.1", "--port",
                 str(port), "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT, env=env))
            wait_for_port(port, procs[0], time.monotonic() + 60)
            procs.append(subprocess.Popen(
                ["taskset", "-c", worker_cpu, "dask-worker", address, "--nthreads", "1",
                 "--no-nanny", "--no-dashboard", "--memory-limit", "0", "--preload", "stoker"],
                stdout=log, stderr=subprocess.STDOUT, env=env))
            time.sleep(3)
            rounds = []
            for r in range(args.rounds):
                local = run_trainer(args, env, "local", address)
                cluster = run_trainer(args, env, "cluster", address)
                rounds.append((local, cluster))
                c = cluster["cluster"]
                print(f"round {r + 1}: local {local['steady']:.0f} images/s, cluster "
                      f"{cluster['steady']:.0f} images/s ({cluster['steady'] / local['steady']:.2f}x); "
                      f"{c['batches_cluster']} of {c['batches_cluster'] + c['batches_local']} "
                      f"batches from the worker", flush=True)
        finally:
            for p in reversed(procs):
                p.kill()
                p.wait()

    def med(f):
        return statistics.median(f(lo, cl) for lo, cl in rounds)

    cores = len(cpus)
    print(f"\ntrainer on CPU {args.trainer_cpu} (1 decode thread), one Dask worker (1 thread) and "
          f"the scheduler on CPU {worker_cpu}; {cores} CPUs; {args.samples_per_rank} samples per "
          f"epoch, batch 64, train 224 uint8; medians of {args.rounds} rounds")
    print("| contender | images/s (steady) | images/s (whole epoch) | first batch s |")
    print("|---|---:|---:|---:|")
    print(f"| trainer alone | {med(lambda lo, cl: lo['steady']):,.0f} | "
          f"{med(lambda lo, cl: lo['whole']):,.0f} | {med(lambda lo, cl: lo['first_batch_s']):.2f} |")
    print(f"| trainer + 1 Dask worker | {med(lambda lo, cl: cl['steady']):,.0f} | "
          f"{med(lambda lo, cl: cl['whole']):,.0f} | {med(lambda lo, cl: cl['first_batch_s']):.2f} |")
    print(f"\nratio (steady): {med(lambda lo, cl: cl['steady'] / lo['steady']):.2f}x  "
          f"(whole epoch {med(lambda lo, cl: cl['whole'] / lo['whole']):.2f}x; target >= 1.7x)")
    print(f"share of batches from the worker: "
          f"{med(lambda lo, cl: cl['cluster']['batches_cluster'] / (cl['cluster']['batches_cluster'] + cl['cluster']['batches_local'])):.0%}")
    print(f"bytes moved per image from the worker: "
          f"{med(lambda lo, cl: cl['cluster']['bytes_per_image']):,.0f}")
    print(f"samples read per sample delivered: local alone "
          f"{med(lambda lo, cl: lo['samples_read'] / lo['samples']):.2f}, with the worker "
          f"{med(lambda lo, cl: cl['cluster']['read_per_sample']):.2f}")


if __name__ == "__main__":
    main()
