#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What equal steps cost when the loader is given nothing but URLs.

Starts N gloo ranks (torch.distributed on 127.0.0.1), each with
stoker.Loader(SHARDS, batch_size=B), in two modes, alternated for --rounds:

  agree   no samples_per_rank or index: the ranks agree on every step (one
          all_reduce of one int over gloo, see python/stoker/base/ranks.py);
  count   samples_per_rank= set to the steps the agree run made, so the
          ranks have equal steps by count and never talk.

Each rank takes the batches as fast as they come (train transform, 224,
uint8, one decode thread per rank), which is the harshest case: with no
training step to hide in, every microsecond of agreeing shows. The cost is
the median wall time per step with agreement against without. The
issue's bound: at most 1% of a step at the sample set's speed.

usage: bench/ddp_agreement.py [--ranks 2] [--batch-size 64] [--epochs 2] [--rounds 3] SHARD...
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RANK = r'''
import json, sys, time, torch, torch.distributed as dist, stoker
rank, world, port, batch, epochs, per_rank = (int(a) for a in sys.argv[1:7])
shards = json.loads(sys.argv[7])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
loader = stoker.Loader(shards, batch_size=batch, threads=1, samples_per_rank=per_rank or None)
steps, start = 0, time.perf_counter()
for epoch in range(epochs):
    loader.set_epoch(epoch)
    for images, labels in loader:
        steps += 1
wall = time.perf_counter() - start
# The agreement alone, ranks already in step: 200 back-to-back all_reduces.
flag = torch.zeros(1, dtype=torch.int32)
dist.barrier()
t = time.perf_counter()
for _ in range(200):
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
one = (time.perf_counter() - t) / 200
print(json.dumps({"steps": steps, "wall": wall, "all_reduce": one}))
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(args, shards, per_rank):
    """One run of every rank; returns the slowest rank's wall time and steps."""
    env = dict(os.environ, LOCAL_WORLD_SIZE=str(args.ranks))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "build-rel" / "python")] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), str(args.ranks), str(port),
                               str(args.batch_size), str(args.epochs), str(per_rank), shards],
                              stdout=subprocess.PIPE, text=True, env=env)
             for r in range(args.ranks)]
    out = [json.loads(p.communicate(timeout=1800)[0]) for p in procs]
    steps = {o["steps"] for o in out}
    if len(steps) != 1:
        sys.exit(f"ranks made different numbers of steps: {[o['steps'] for o in out]}")
    return max(o["wall"] for o in out), steps.pop(), max(o["all_reduce"] for o in out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("shards", nargs="+")
    args = ap.parse_args()
    shards = json.dumps([os.path.abspath(s) for s in args.shards])
    per_step = {"agree": [], "count": []}
    per_rank = 0
    all_reduce = []
    for rnd in range(args.rounds):
        wall, steps, one = run_ranks(args, shards, 0)
        all_reduce.append(one)
        per_step["agree"].append(wall / steps)
        # The same steps per epoch, known in advance: no agreement at all.
        per_rank = per_rank or steps // args.epochs * args.batch_size
        wall, count_steps, _ = run_ranks(args, shards, per_rank)
        if count_steps != steps:
            sys.exit(f"count mode made {count_steps} steps, agree mode {steps}")
        per_step["count"].append(wall / steps)
        print(f"round {rnd + 1}: {steps} steps; agree {per_step['agree'][-1] * 1e3:.2f} ms/step, "
              f"count {per_step['count'][-1] * 1e3:.2f} ms/step")
    agree, count = (statistics.median(per_step[m]) for m in ("agree", "count"))
    print(f"{args.ranks} gloo ranks, batch {args.batch_size}, {args.rounds} rounds (median): "
          f"{agree * 1e3:.2f} ms per step agreeing, {count * 1e3:.2f} ms by count; "
          f"agreement costs {100 * (agree - count) / count:+.2f}% of a step (bound: 1%)")
    one = statistics.median(all_reduce)
    print(f"one agreement alone (all_reduce of one int, ranks in step): {one * 1e6:.0f} us = "
          f"{100 * one / count:.3f}% of a step")


if __name__ == "__main__":
    main()
