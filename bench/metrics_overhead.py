#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What watching a loader costs: throughput with metrics collection on and
off, alternating, on the same shards. Target: "on" within 1% of "off".

Two comparisons, each a ratio of medians over --rounds alternating runs:
  C       `stoker bench --json` (raw samples: the per-batch path, where a
          per-batch cost shows most) from --baseline, a build without shuffle
          quality counting (e.g. main before issue 15), against --stoker
          with --plot (k_eff counting in the sequencer plus a counter
          snapshot every 0.25 s);
  Python  `for images, labels in stoker.Loader(...)` plain, against the
          same loop with prometheus_port= scraped every 0.5 s by an HTTP
          client thread and stoker.tensorboard() called every step (a stats
          copy and stoker.rates() per step), in fresh processes.
Without --baseline the C comparison is skipped (the counters cannot be
turned off in one build: they are plain atomic adds). Besides the ratio of
medians it prints the median of the per-round ratios (each "on" run against
the "off" run beside it, which a machine whose load drifts affects less)
and, for Python, the time spent inside stoker.tensorboard() and in scrapes
as a share of the run: the direct cost, whatever the noise.

usage: PYTHONPATH=build-rel/python bench/metrics_overhead.py [--baseline OTHER/stoker]
           [--stoker build-rel/stoker] [--rounds 5] [--epochs 4] [--threads 2] SHARD...
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, threading, time, urllib.request, stoker
shards, threads, epochs, watch = sys.argv[1].split(','), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == 'on'

class Writer:  # what SummaryWriter.add_scalar receives, kept in memory
    def __init__(self):
        self.n = 0
    def add_scalar(self, tag, value, step):
        self.n += 1

start = time.perf_counter()
loader = stoker.Loader(shards, batch_size=64, transform='train', threads=threads, seed=0,
                       prometheus_port=0 if watch else None)
done = threading.Event()
def scrape():
    while not done.wait(0.5):
        urllib.request.urlopen(f'http://127.0.0.1:{loader.prometheus_port}/metrics').read()
scraper = threading.Thread(target=scrape)
if watch:
    scraper.start()
writer, n, step, spent = Writer(), 0, 0, 0.0
for epoch in range(epochs):
    loader.set_epoch(epoch)
    for images, labels in loader:
        n += images.shape[0]
        step += 1
        if watch:
            t = time.perf_counter()
            stoker.tensorboard(writer, loader, step)
            spent += time.perf_counter() - t
wall = time.perf_counter() - start
done.set()
if watch:
    scraper.join()
    # Serving one scrape, timed here on this thread: the endpoint's cost.
    t = time.perf_counter()
    for _ in range(20):
        stoker.prometheus_text(loader.stats(), 'rank="0"')
    spent += (time.perf_counter() - t) / 20 * (wall / 0.5)
loader.close()
print(n / wall, spent / wall)
"""


def median_ratio(rates):
    on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
    paired = statistics.median(a / b for a, b in zip(rates["on"], rates["off"]))
    return on, off, on / off, paired


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--baseline", help="a stoker binary built without the metrics")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--c-epochs", type=int, default=20, help="epochs of the raw C runs")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("shards", nargs="+")
    args = ap.parse_args()

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline:
            common = ["bench", "--json", "--threads", str(args.threads), "--epochs",
                      str(args.c_epochs), *args.shards]
            cmds = {"off": [args.baseline, *common],
                    "on": [args.stoker, *common, "--plot", f"{tmp}/plot.svg"]}
            rates = {"on": [], "off": []}
            for r in range(args.rounds):
                for name in (("off", "on") if r % 2 == 0 else ("on", "off")):
                    out = subprocess.run(cmds[name], check=True, capture_output=True,
                                         text=True).stdout
                    rates[name].append(json.loads(out)["samples_per_s"])
            results["C bench, raw samples/s"] = (rates, median_ratio(rates))

        rates = {"on": [], "off": []}
        direct = []
        for r in range(args.rounds):
            for name in (("off", "on") if r % 2 == 0 else ("on", "off")):
                out = subprocess.run([sys.executable, "-c", CHILD, ",".join(args.shards),
                                      str(args.threads), str(args.epochs), name],
                                     check=True, capture_output=True, text=True).stdout
                rate, share = map(float, out.split())
                rates[name].append(rate)
                if name == "on":
                    direct.append(share)
        results["Python Loader, train images/s"] = (rates, median_ratio(rates))

    for what, (rates, (on, off, ratio, paired)) in results.items():
        print(f"{what}: off {off:.0f}, on {on:.0f} (median of {args.rounds}): "
              f"on/off = {ratio:.3f}, median per-round on/off = {paired:.3f}")
        print(f"  runs off: {[round(x) for x in rates['off']]}")
        print(f"  runs on:  {[round(x) for x in rates['on']]}")
    print(f"Python: tensorboard() every step and a scrape every 0.5 s take "
          f"{100 * statistics.median(direct):.3f}% of the run's wall time (median)")


if __name__ == "__main__":
    main()
