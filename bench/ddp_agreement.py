#!/usr/bin/python3
"""What equal steps cost when the loader is given nothing but URLs.

Starts N gloo ranks (torch.distributed on 127.0.0.1), each with
stoker.Loader(SHARDS, batch_size=B) and no samples_per_rank or index, so
the ranks agree on every step (one all_reduce of one int over gloo, see
python/stoker/_ranks.py). Each rank takes the batches as fast as they come
(train transform, 224, uint8, one decode thread per rank) for --epochs
epochs and reports the time per step and the time spent agreeing. The
issue's bound: agreeing costs at most 1% of a step at the sample set's
speed.

usage: bench/ddp_agreement.py [--ranks 2] [--batch-size 64] [--epochs 2] SHARD...
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RANK = r'''
import json, sys, time, torch.distributed as dist, stoker
rank, world, port, batch, epochs = (int(a) for a in sys.argv[1:6])
shards = json.loads(sys.argv[6])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
loader = stoker.Loader(shards, batch_size=batch, threads=1)
steps, start = 0, time.perf_counter()
for epoch in range(epochs):
    loader.set_epoch(epoch)
    for images, labels in loader:
        steps += 1
wall = time.perf_counter() - start
print(json.dumps({"steps": steps, "wall": wall, "agree_ns": loader._agree.ns,
                  "agreements": loader._agree.steps}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("shards", nargs="+")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, LOCAL_WORLD_SIZE=str(args.ranks))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "build-rel" / "python")] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    shards = json.dumps([os.path.abspath(s) for s in args.shards])
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), str(args.ranks), str(port),
                               str(args.batch_size), str(args.epochs), shards],
                              stdout=subprocess.PIPE, text=True, env=env)
             for r in range(args.ranks)]
    out = [json.loads(p.communicate(timeout=1800)[0]) for p in procs]
    for r, o in enumerate(out):
        per_step = o["wall"] / o["steps"]
        agree = o["agree_ns"] / 1e9 / o["agreements"]
        print(f"rank {r}: {o['steps']} steps in {o['wall']:.1f} s ({per_step * 1e3:.1f} ms per "
              f"step); agreeing {agree * 1e6:.0f} us per step = {100 * agree / per_step:.2f}% "
              "of a step")
    print("(agreeing includes waiting for the slowest rank to reach the step: with ranks that "
          "decode at different speeds that wait is the imbalance, not the all_reduce)")


if __name__ == "__main__":
    main()
