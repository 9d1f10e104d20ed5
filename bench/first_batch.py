#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Time and bytes before the first batch (issue 35).

For each start
  fresh    a new loader, clock from its construction to its first batch;
  epoch 2  the second epoch's first batch, clock from the moment the loop
           took the first epoch's last batch (the boundary a training loop
           sees with no evaluation in between);
  resume   a new loader restored at the middle of epoch 0 (stoker only:
           WebDataset has no resume);
and each contender
  stoker          stoker.Loader defaults (train transform, 224 px);
  stoker index=   the same with a dataset index (`stoker index`);
  stoker sequential  the defaults with sequential_start=1: the first batch
                  waits for the shuffle window, read in storage order (what
                  the defaults did before the first batches were read by
                  offset while the window fills);
  stoker W=100    the defaults with shuffle_buffer=100 and no index: a
                  window shorter than the epoch, so a resume has samples
                  to jump over (without an index, after a scan of the
                  local shards' tar headers);
  stoker prefetch the defaults with Loader.start_prefetch() called where
                  the clock would start, and the clock started --busy-s
                  later (the model built, the checkpoint loaded, the
                  evaluation run meanwhile): what is left of the wait;
  WebDataset      WebDataset(shardshuffle=100).shuffle(1000), PIL decode,
                  torchvision RandomResizedCrop(224) + flip + ToTensor,
                  DataLoader(batch_size, num_workers=threads), the checkout
                  given by --webdataset (it is not part of stoker);
locally and over http through nginx behind a proxy that adds --delay-ms
each way (100 ms round trip by default; tests/integration/servers.py), it
prints the seconds to the first batch and the bytes read before it (stoker:
its bytes_read counter; WebDataset: the bytes its shard streams handed
over). The reference the targets use, "one batch alone", is the first batch
of an unshuffled stoker loader (shuffle=False, shards_in_flight=1): one
batch's samples read and decoded on the same threads, from the same place
(local disk, or over the same http link: its round trips are part of
reading one batch there). "/ local" divides every row by the local one.

Mixing: distinct labels in the first batch of a fresh start, over --rounds
seeds, against a uniform permutation's batch of the same size, on the
sample set as it is and on a copy written in class order (what
tests/python/test_mixing.py builds small), local only.

Prints medians of --rounds alternating rounds and the issue's targets as
ratios. The page cache is warm for every contender.

usage: bench/first_batch.py [--stoker build-rel/stoker] [--webdataset DIR]
           [--rounds 3] [--threads 2] [--batch-size 64] [--delay-ms 50]
           [--busy-s 2] SHARD...
"""
import argparse
import collections
import ctypes
import io
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from servers import DelayProxy, Nginx  # noqa: E402

import torch  # noqa: E402
import stoker  # noqa: E402


def stoker_loader(urls, a, seed, **options):
    options.setdefault("threads", a.threads)
    return stoker.Loader(urls, batch_size=a.batch_size, image_size=224, seed=seed, **options)


def stoker_bytes(loader):
    return loader.stats()["bytes_read"]


def stoker_run(urls, a, seed, start, prefetch=False, **options):
    """(seconds, bytes read, labels of the first batch) for one start. With
    prefetch, start_prefetch() is called where the clock would start and the
    clock starts --busy-s later: the caller built its model (fresh), loaded
    its checkpoint (resume) or evaluated (epoch 2) meanwhile."""
    def clock_from(loader, t):
        if not prefetch:
            return t
        loader.start_prefetch()
        time.sleep(a.busy_s)
        return time.monotonic()

    if start == "fresh":
        t = time.monotonic()
        loader = stoker_loader(urls, a, seed, **options)
        t, before = clock_from(loader, t), 0
    elif start == "epoch 2":
        loader = stoker_loader(urls, a, seed, **options)
        for _ in loader:
            pass
        before = stoker_bytes(loader)
        t = clock_from(loader, time.monotonic())
    else:  # resume at the middle of epoch 0
        probe = stoker_loader(urls, a, seed, **options)
        state = dict(probe.state_dict(), batch=a.mid_batch)
        probe.close()
        t = time.monotonic()
        loader = stoker_loader(urls, a, seed, **options)
        loader.load_state_dict(state)
        t, before = clock_from(loader, t), 0
    _, labels = next(iter(loader))
    took, read = time.monotonic() - t, stoker_bytes(loader) - before
    loader.close()
    return took, read, labels.tolist()


class CountingStream:
    """A shard stream that adds what it hands over to a counter shared with
    the DataLoader's worker processes."""

    def __init__(self, stream, counter):
        self.stream, self.counter = stream, counter

    def read(self, n=-1):
        data = self.stream.read(n)
        with self.counter.get_lock():
            self.counter.value += len(data)
        return data

    def __getattr__(self, name):
        return getattr(self.stream, name)


def webdataset_pipeline(urls, a, seed, counter):
    import torchvision.transforms as T
    import webdataset as wds

    # Count what its shard streams hand over: remote ones come from
    # gopen.gopen (the package's `gopen` is the function, hence sys.modules),
    # local ones from the builtin open() in cache.StreamingOpen.
    for module, name in (("webdataset.gopen", "gopen"), ("webdataset.cache", "open")):
        module = sys.modules[module]
        opener = getattr(module, name, open)
        if not getattr(opener, "counted", False):
            def counted(url, *args, _opener=opener, **kw):
                return CountingStream(_opener(url, *args, **kw), counter)
            counted.counted = True
            setattr(module, name, counted)
    augment = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    random.seed(seed)
    torch.manual_seed(seed)
    ds = (wds.WebDataset(urls, shardshuffle=100, seed=seed,
                         workersplitter=wds.split_by_worker, empty_check=False)
          .shuffle(1000).decode("pil").to_tuple("jpg", "cls").map_tuple(augment, int))
    return torch.utils.data.DataLoader(ds, batch_size=a.batch_size, num_workers=a.threads)


def webdataset_run(urls, a, seed, start, counter):
    counter.value = 0
    t = time.monotonic()
    loader = webdataset_pipeline(urls, a, seed, counter)
    if start == "epoch 2":
        for _ in loader:
            pass
        t, before = time.monotonic(), counter.value
    else:
        before = 0
    _, labels = next(iter(loader))
    return time.monotonic() - t, counter.value - before, labels.tolist()


def one_batch_alone(urls, a):
    """The first batch of an unshuffled loader on one shard: one batch's
    samples read and decoded, with the loader's start-up."""
    took, read, _ = stoker_run(urls[:1], a, 0, "fresh", shuffle=False, shards_in_flight=1)
    return took, read


def permutation_distinct(labels, batch, draws=2000):
    rng = random.Random(0)
    return statistics.mean(len(set(rng.sample(labels, batch))) for _ in range(draws))


def shard_labels(paths):
    out = []
    for p in paths:
        with tarfile.open(p) as t:
            out += [int(t.extractfile(m).read()) for m in t if m.name.endswith(".cls")]
    return out


def write_class_sorted(paths, out_dir):
    """The same samples in class order, as many shards as the input."""
    samples = collections.defaultdict(dict)
    for p in paths:
        with tarfile.open(p) as t:
            for m in t:
                key, ext = m.name.rsplit(".", 1)
                samples[(p, key)][ext] = t.extractfile(m).read()
    ordered = sorted(samples.values(), key=lambda s: int(s["cls"]))
    per = -(-len(ordered) // len(paths))
    out = []
    for i in range(len(paths)):
        path = out_dir / f"sorted-{i:06d}.tar"
        with tarfile.open(path, "w") as t:
            for j, s in enumerate(ordered[i * per:(i + 1) * per]):
                for ext, data in s.items():
                    info = tarfile.TarInfo(f"{i * per + j:08d}.{ext}")
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        out.append(str(path))
    return out


def index(stoker_bin, urls, path):
    subprocess.run([stoker_bin, "index", "-q", "-o", str(path), *urls], check=True)
    return str(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--webdataset", help="a WebDataset checkout's src/ (put on sys.path); "
                                         "without it WebDataset is left out")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--delay-ms", type=float, default=50.0, help="added each direction")
    ap.add_argument("--busy-s", type=float, default=2.0,
                    help="what the caller does after start_prefetch() (model build, "
                         "evaluation) before it asks for the first batch")
    ap.add_argument("shards", nargs="+")
    a = ap.parse_args()
    if a.webdataset:
        sys.path.insert(0, a.webdataset)
    shards = [Path(s).resolve() for s in a.shards]
    root = shards[0].parent
    if any(s.parent != root for s in shards):
        sys.exit("first_batch: the shards must be in one directory")
    for s in shards:  # warm the page cache
        s.read_bytes()
    a.mid_batch = len(shard_labels([str(s) for s in shards])) // a.batch_size // 2
    counter = multiprocessing.Value(ctypes.c_uint64, 0)
    tmp = Path(tempfile.mkdtemp(prefix="stk-first-batch-"))
    results = collections.defaultdict(list)  # (where, contender, start) -> [(s, bytes)]
    try:
        local = [str(s) for s in shards]
        with Nginx(root, tmp / "nginx") as nginx, \
                DelayProxy(nginx.port, delay_s=a.delay_ms / 1000) as proxy:
            remote = [proxy.url(s.name) for s in shards]
            where = {"local": (local, index(a.stoker, local, tmp / "local.json")),
                     "http": (remote, index(a.stoker, remote, tmp / "http.json"))}
            for r in range(a.rounds):
                for name, (urls, idx) in where.items():
                    results[(name, "one batch alone", "fresh")].append(one_batch_alone(urls, a))
                    for start in ("fresh", "epoch 2", "resume"):
                        for contender, opts in (
                                ("stoker", {}), ("stoker index=", {"index": idx}),
                                ("stoker sequential", {"sequential_start": True}),
                                ("stoker W=100", {"shuffle_buffer": 100}),
                                ("stoker prefetch", {"prefetch": True})):
                            took, read, _ = stoker_run(urls, a, r, start, **opts)
                            results[(name, contender, start)].append((took, read))
                        if a.webdataset and start != "resume":
                            took, read, _ = webdataset_run(urls, a, r, start, counter)
                            results[(name, "WebDataset", start)].append((took, read))
                    print(f"round {r + 1} {name} done", flush=True)
        sample_bytes = sum(s.stat().st_size for s in shards) / len(shard_labels(local))
        print(f"\n{len(shards)} shards, {sample_bytes / 1e3:.0f} KB a sample, batch "
              f"{a.batch_size}, {a.threads} threads, http {2 * a.delay_ms:.0f} ms round trip, "
              f"{os.cpu_count()} CPUs; medians of {a.rounds} rounds:")
        med = {k: (statistics.median(t for t, _ in v), statistics.median(b for _, b in v))
               for k, v in results.items()}
        alone = {name: med[(name, "one batch alone", "fresh")][0] for name in where}
        print(f"{'':6s} {'contender':17s} {'start':8s} {'seconds':>8s} {'/ alone':>8s} "
              f"{'/ local':>8s} {'MB read':>8s} {'samples':>8s}")
        for (name, contender, start), (took, read) in med.items():
            print(f"{name:6s} {contender:17s} {start:8s} {took:8.3f} {took / alone[name]:8.2f} "
                  f"{took / alone['local']:8.2f} {read / 1e6:8.1f} {read / sample_bytes:8.0f}")
        print("targets: fresh first batch <= 2x one batch alone; the second epoch's first "
              "batch no later than one batch alone; resume reads <= what the design needs "
              "(index=: the samples of one batch, no window; without: the batch's window, "
              "up to 2 x shuffle_buffer samples before it, and locally the shards' tar "
              "headers)")

        print("\nfirst-batch mixing, local fresh starts (distinct labels per batch; "
              f"mean of {a.rounds} seeds):")
        sorted_urls = write_class_sorted(shards, tmp)
        for set_name, urls in (("sample set", local), ("class-sorted copy", sorted_urls)):
            idx = index(a.stoker, urls, tmp / f"{set_name[:5]}.json")
            perm = permutation_distinct(shard_labels(urls), a.batch_size)
            row = {"permutation": perm}
            for contender, opts in (("stoker", {}), ("stoker index=", {"index": idx})):
                row[contender] = statistics.mean(
                    len(set(stoker_run(urls, a, r, "fresh", **opts)[2])) for r in range(a.rounds))
            if a.webdataset:
                row["WebDataset"] = statistics.mean(
                    len(set(webdataset_run(urls, a, r, "fresh", counter)[2]))
                    for r in range(a.rounds))
            print(f"  {set_name:18s} " + "  ".join(
                f"{k} {v:.1f} ({v / perm:.2f}x)" for k, v in row.items()))
        print("target: the first batch >= 0.9x a permutation's distinct labels")
        print(json.dumps({" / ".join(k): v for k, v in med.items()}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
