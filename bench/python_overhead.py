#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What iterating stoker from Python costs, against the C benchmark.

Runs, alternating, on the same shards, threads and transform:
  C       `stoker bench --decode train --json` (batches released in C);
  Python  `for images, labels in stoker.Loader(...)`, touching nothing but
          the tensors' shapes, in a fresh /usr/bin/python3 process;
  fields  with --fields jpg,cls,__key__: the same loop over
          stoker.Loader(..., fields=(...)) batches (tuples), as a third run
          per round.
All include start-up and first batch; several epochs per run amortize it.
Target: Python >= 97% of C throughput.

usage: PYTHONPATH=build-rel/python bench/python_overhead.py [--threads 2] [--epochs 4]
           [--rounds 3] [--fields jpg,cls,__key__] [--stoker build-rel/stoker] SHARD...
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import sys, time, torch, stoker
shards, threads, epochs, batch = sys.argv[1].split(','), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fields = tuple(sys.argv[5].split(',')) if len(sys.argv) > 5 else None
start = time.perf_counter()
loader = stoker.Loader(shards, batch_size=batch, transform='train', threads=threads, seed=0,
                       fields=fields)
n = 0
for epoch in range(epochs):
    loader.set_epoch(epoch)
    for images, *rest in loader:
        n += images.shape[0]
print(n / (time.perf_counter() - start))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--fields", help="also time Loader(fields=...), e.g. jpg,cls,__key__")
    ap.add_argument("shards", nargs="+")
    args = ap.parse_args()
    c_cmd = [args.stoker, "bench", "--json", "--decode", "train", "--threads", str(args.threads),
             "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), *args.shards]
    py_cmd = [sys.executable, "-c", CHILD, ",".join(args.shards), str(args.threads),
              str(args.epochs), str(args.batch_size)]
    rates = {"c": [], "py": [], "fields": []}
    for r in range(args.rounds):
        order = [("c", c_cmd), ("py", py_cmd)]
        if args.fields:
            order.append(("fields", py_cmd + [args.fields]))
        for name, cmd in (order if r % 2 == 0 else order[::-1]):
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            if name == "c":
                rates[name].append(json.loads(out)["images_per_s"])
            else:
                rates[name].append(float(out.strip().splitlines()[-1]))
    c_rates, py_rates = rates["c"], rates["py"]
    c, py = statistics.median(c_rates), statistics.median(py_rates)
    print(f"{os.cpu_count()} cores, {args.threads} threads, {args.epochs} epochs per run, "
          f"{args.rounds} rounds, train transform 224, uint8 NCHW, batch {args.batch_size}")
    print(f"  C   stoker bench        {c:8.0f} images/s  (runs: {', '.join(f'{x:.0f}' for x in c_rates)})")
    print(f"  Python stoker.Loader    {py:8.0f} images/s  (runs: {', '.join(f'{x:.0f}' for x in py_rates)})")
    if args.fields:
        f = statistics.median(rates["fields"])
        print(f"  fields={args.fields:<14} {f:8.0f} images/s  "
              f"(runs: {', '.join(f'{x:.0f}' for x in rates['fields'])})")
    ratio = py / c
    print(f"  Python / C = {ratio:.3f}: target >= 0.97 {'met' if ratio >= 0.97 else 'NOT met'}")
    if args.fields:
        print(f"  Python with fields / C = {f / c:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
