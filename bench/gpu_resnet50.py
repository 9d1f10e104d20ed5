#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""End to end on a GPU: how much of a compiled ResNet-50's speed a loader feeds.

One process, one compiled model, every contender on the same training loop
(issue 25; BENCHMARKING.md "End to end on a GPU"):

  ceiling    torch.compile'd ResNet-50, bf16 autocast, channels_last, SGD,
             batch 256, synthetic uint8 NCHW batches already on the GPU,
             normalized on the GPU (inside the compiled model).
  h2d        one batch's host-to-device copy (38.5 MB of uint8) from pinned
             and from pageable memory, timed with CUDA events on a side
             stream with the GPU otherwise idle; then the training loop fed
             from host memory: pinned + copy on the training stream (what
             `images.cuda(non_blocking=True)` does), pinned + copy on a side
             stream one batch ahead, and pageable: if a copy overlaps
             compute, its loop runs at the ceiling.
  race       whether a pinned batch is still intact when the GPU copies it:
             stoker's pin_memory loop with the GPU held back (a 0.2 s
             torch.cuda._sleep before each copy, as a slow step does), each
             batch's sum on the CPU when it arrives against the sum of what
             reached the GPU; also with a pinned ring the loader does not
             hold back (batch_allocator=, as pin_memory=True was before).
  stoker     stoker.Loader(transform="train", uint8 NCHW, pin_memory=True,
             drop_last=True) with --threads decode threads (4, 8, 12), the
             batches copied with `.cuda(non_blocking=True)` in the loop as
             README's example does; and 12 threads with the copy on a side
             stream one batch ahead. The report's limiting stage is kept.
  dataloader torchvision's DataLoader over an ImageFolder copy of the same
             JPEGs: Compose([RandomResizedCrop(224), RandomHorizontalFlip(),
             PILToTensor()]) (uint8: the same loop normalizes on the GPU;
             ToTensor + Normalize on the CPU would only be slower),
             shuffle, pin_memory=True, persistent_workers, prefetch_factor 2,
             drop_last, with 4, 8 and 12 workers.

Steady state: each loader first runs more batches than all its buffers hold
(stoker: max_batches; DataLoader: workers x prefetch_factor, + the pin
thread's), then a window of --seconds is timed between two
torch.cuda.synchronize() calls, crossing epoch boundaries (an epoch of
25,000 images is about 4 s at the ceiling). Cores: the process's CPU time
(and its DataLoader workers') over the window's wall time.

Writes the results as JSON (--json) after every stage, so a run cut off
still leaves what it measured, and prints a table at the end.
--cpu-rehearsal runs every stage on the CPU (eager model, small batches and
images, pin_memory off, short windows) to check the script end to end
without a GPU.

usage: bench/gpu_resnet50.py --data DIR [--imagefolder DIR] [--json FILE]
                             [--budget SECONDS] [--cpu-rehearsal]
"""
import argparse
import glob
import itertools
import json
import multiprocessing
import os
import platform
import sys
import tarfile
import time
import traceback

import torch
import torch.nn.functional as F
import torchvision
from torchvision import transforms as T

import stoker

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
PREFETCH = 2
RACE_SLEEP_S = 0.2


class Setup:
    """What differs between the GPU run and the CPU rehearsal."""

    def __init__(self, rehearsal):
        self.rehearsal = rehearsal
        self.device = torch.device("cpu" if rehearsal else "cuda")
        self.batch = 4 if rehearsal else 256
        self.size = 32 if rehearsal else 224
        self.seconds = 2.0 if rehearsal else 10.0
        self.ceiling_seconds = 2.0 if rehearsal else 8.0
        self.h2d_seconds = 1.0 if rehearsal else 5.0
        self.pin = not rehearsal
        self.compile = not rehearsal
        self.race_batches = 6 if rehearsal else 16
        self.max_warmup = 2 if rehearsal else 1000

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()


class Results:
    """The JSON record, written again after every stage."""

    def __init__(self, path, budget):
        self.path = path
        self.start = time.monotonic()
        self.budget = budget
        self.data = {"stages": {}, "skipped": [], "errors": {}}

    def left(self):
        return self.budget - (time.monotonic() - self.start)

    def put(self, name, value):
        self.data["stages"][name] = value
        self.save()

    def save(self):
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


def log(msg):
    print("gpu_resnet50: " + msg, flush=True)


# ---------------------------------------------------------------------------
# The model and its training step


class Net(torch.nn.Module):
    """ResNet-50 taking uint8 NCHW batches: normalization on the device."""

    def __init__(self):
        super().__init__()
        self.net = torchvision.models.resnet50()
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1) * 255)
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1) * 255)

    def forward(self, x):
        x = ((x.float() - self.mean) / self.std).contiguous(memory_format=torch.channels_last)
        return self.net(x)


def make_step(setup):
    net = Net().to(setup.device).to(memory_format=torch.channels_last)
    extra = {"fused": True} if setup.device.type == "cuda" else {}
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4, **extra)
    forward = torch.compile(net, dynamic=False) if setup.compile else net

    def step(x, y):
        with torch.autocast(setup.device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


# ---------------------------------------------------------------------------
# Feeding the step: where the host-to-device copy goes


def same_stream(batches, device):
    """The copy as README's loop writes it: on the training stream."""
    for x, y in batches:
        yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def side_stream(batches, device):
    """The copy of batch k+1 on a side stream while step k computes.

    The host batch is kept until its copy's event has completed, so a
    loader's ring cannot hand its buffer to a decoder while the copy reads it.
    """
    if device.type != "cuda":
        yield from same_stream(batches, device)
        return
    stream = torch.cuda.Stream()
    pending = None
    for x, y in batches:
        with torch.cuda.stream(stream):
            gx, gy = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(stream)
        if pending is not None:
            px, py, pdone, _host = pending
            current = torch.cuda.current_stream()
            current.wait_event(pdone)
            px.record_stream(current)
            py.record_stream(current)
            yield px, py
            pdone.synchronize()  # long done: issued a whole step ago
        pending = (gx, gy, done, (x, y))


def endless(loader):
    """Batches across epochs (stoker.Loader needs set_epoch per epoch)."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for batch in loader:
            yield batch
        epoch += 1


def cpu_seconds(children):
    """CPU time of this process and, if asked, of its child processes."""
    t = os.times()
    total = t.user + t.system
    if children:
        import psutil
        for c in psutil.Process().children(recursive=True):
            try:
                ct = c.cpu_times()
                total += ct.user + ct.system
            except psutil.Error:
                pass
    return total


def window(setup, step, batches, warmup, seconds, children=False):
    """Steady-state images/s: warmup batches, then a timed window."""
    it = iter(batches)
    warmup = min(warmup, setup.max_warmup)
    for _ in range(warmup):
        step(*next(it))
    setup.sync()
    c0 = cpu_seconds(children)
    t0 = time.perf_counter()
    n = 0
    while True:
        step(*next(it))
        n += 1
        if time.perf_counter() - t0 >= seconds and n >= warmup:
            break
    setup.sync()
    wall = time.perf_counter() - t0
    cores = (cpu_seconds(children) - c0) / wall
    return {"images_per_s": n * setup.batch / wall, "batches": n, "seconds": wall,
            "cores": cores, "warmup_batches": warmup}


def synthetic(setup, where, pinned=False):
    """A few distinct random uint8 batches, cycled (never zeros)."""
    g = torch.Generator().manual_seed(0)
    xs = [torch.randint(0, 256, (setup.batch, 3, setup.size, setup.size), dtype=torch.uint8,
                        generator=g) for _ in range(4)]
    ys = [torch.randint(0, 1000, (setup.batch,), generator=g) for _ in range(4)]
    if pinned:
        xs, ys = [x.pin_memory() for x in xs], [y.pin_memory() for y in ys]
    xs, ys = [x.to(where) for x in xs], [y.to(where) for y in ys]
    i = 0
    while True:
        yield xs[i % 4], ys[i % 4]
        i += 1


# ---------------------------------------------------------------------------
# Stages


def stage_ceiling(setup, step, res):
    t = time.perf_counter()
    it = synthetic(setup, setup.device)
    step(*next(it))  # compiles forward and backward
    setup.sync()
    compile_s = time.perf_counter() - t
    log(f"first step (compile) {compile_s:.1f} s")
    r = window(setup, step, it, 20, setup.ceiling_seconds)
    r["compile_seconds"] = compile_s
    return r


def copy_ms(setup, src, n=20):
    """Mean ms per copy of src to the device on an idle side stream."""
    dst = torch.empty_like(src, device=setup.device)
    stream = torch.cuda.Stream()
    times, walls = [], []
    with torch.cuda.stream(stream):
        for i in range(n + 3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t = time.perf_counter()
            a.record(stream)
            dst.copy_(src, non_blocking=True)
            b.record(stream)
            b.synchronize()
            if i >= 3:
                times.append(a.elapsed_time(b))
                walls.append((time.perf_counter() - t) * 1e3)
    times.sort()
    walls.sort()
    return {"event_ms_median": times[len(times) // 2], "wall_ms_median": walls[len(walls) // 2],
            "gb_per_s": src.numel() / times[len(times) // 2] / 1e6}


def stage_h2d(setup, step, res):
    out = {}
    if setup.device.type == "cuda":
        x = torch.randint(0, 256, (setup.batch, 3, setup.size, setup.size), dtype=torch.uint8)
        out["copy_pinned"] = copy_ms(setup, x.pin_memory())
        out["copy_pageable"] = copy_ms(setup, x)
        log(f"copy per batch: pinned {out['copy_pinned']}, pageable {out['copy_pageable']}")
    s = setup.h2d_seconds
    out["loop_no_copy"] = window(setup, step, synthetic(setup, setup.device), 10, s)
    out["loop_pinned_same_stream"] = window(
        setup, step, same_stream(synthetic(setup, "cpu", setup.pin), setup.device), 10, s)
    out["loop_pinned_side_stream"] = window(
        setup, step, side_stream(synthetic(setup, "cpu", setup.pin), setup.device), 10, s)
    out["loop_pageable_same_stream"] = window(
        setup, step, same_stream(synthetic(setup, "cpu", False), setup.device), 10, s)
    return out


def make_loader(setup, shards, threads, **extra):
    if "batch_allocator" not in extra:
        extra["pin_memory"] = setup.pin
    return stoker.Loader(shards, batch_size=setup.batch, image_size=setup.size,
                         transform="train", dtype=torch.uint8, threads=threads,
                         drop_last=True, seed=1, **extra)


def stage_stoker(setup, step, shards, threads, feed):
    loader = make_loader(setup, shards, threads)
    try:
        probe = next(iter(endless(loader)))[0]
        pinned = bool(probe.is_pinned()) if setup.device.type == "cuda" else False
        del probe
        warmup = 4 * loader._max_batches + 4
        before = loader.stats()
        r = window(setup, step, feed(endless(loader), setup.device), warmup, setup.seconds)
        r["rates_whole_run"] = stoker.rates(loader.stats(), before)
        r["report"] = loader.report()
        r["images_pinned"] = pinned
        r["threads"] = threads
        return r
    finally:
        loader.close()


def stage_decode_only(setup, shards, threads):
    """The loader alone: batches taken and dropped, nothing copied."""
    loader = make_loader(setup, shards, threads)
    try:
        r = window(setup, lambda x, y: None, endless(loader), 4 * loader._max_batches + 4,
                   setup.h2d_seconds)
        r["report"] = loader.report()
        r["threads"] = threads
        return r
    finally:
        loader.close()


def stage_dataloader(setup, step, root, workers):
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder
    tf = T.Compose([T.RandomResizedCrop(setup.size), T.RandomHorizontalFlip(), T.PILToTensor()])
    dl = DataLoader(ImageFolder(root, transform=tf), batch_size=setup.batch, shuffle=True,
                    num_workers=workers, pin_memory=setup.pin, drop_last=True,
                    persistent_workers=True, prefetch_factor=PREFETCH,
                    worker_init_fn=_one_thread)

    def forever():
        while True:
            yield from dl

    try:
        warmup = workers * PREFETCH + 8
        r = window(setup, step, same_stream(forever(), setup.device), warmup, setup.seconds,
                   children=True)
        r["workers"] = workers
        return r
    finally:
        if dl._iterator is not None:
            dl._iterator._shutdown_workers()  # free the cores for the next stage


def _one_thread(_worker_id):
    torch.set_num_threads(1)


def stage_race(setup, shards, res):
    """Sums of each pinned batch on arrival against what reached the GPU:
    stoker's pin_memory=True, and the same pinned ring without the loader
    holding buffers until their copies ran (batch_allocator= pinned memory,
    which is what pin_memory=True did before)."""
    out = {}
    cuda = setup.device.type == "cuda"

    def pinned(nbytes):
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=setup.pin).numpy()

    variants = [("pin_memory", same_stream, {}),
                ("unprotected_ring", same_stream, {"batch_allocator": pinned}),
                ("pin_memory_side_stream", side_stream, {})]
    for name, feed, extra in variants:
        loader = make_loader(setup, shards, 12, **extra)
        try:
            host_sums, dev_sums = [], []

            def arriving():
                for x, y in endless(loader):
                    host_sums.append(int(x.sum(dtype=torch.int64)))
                    yield x, y

            it = feed(arriving(), setup.device)
            for _ in range(setup.race_batches):
                if cuda:
                    torch.cuda._sleep(int(RACE_SLEEP_S * 1.98e9))
                gx, _ = next(it)
                dev_sums.append(gx.sum(dtype=torch.int64))
            setup.sync()
            dev = [int(s) for s in dev_sums]
            bad = sum(1 for a, b in zip(host_sums, dev) if a != b)
            out[name] = {"batches": len(dev), "corrupted": bad}
            log(f"race {name}: {bad} of {len(dev)} batches differ on the GPU")
        finally:
            it = None
            loader.close()
    return out


# ---------------------------------------------------------------------------
# Data


def _extract_shard(args):
    shard, root = args
    n = 0
    with tarfile.open(shard) as tar:
        pending = {}
        for m in tar:
            if not m.isfile():
                continue
            key, _, ext = m.name.rpartition(".")
            pending.setdefault(key, {})[ext] = tar.extractfile(m).read()
            s = pending[key]
            if "jpg" in s and "cls" in s:
                d = os.path.join(root, "%03d" % int(s["cls"]))
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, key + ".jpg"), "wb") as f:
                    f.write(s["jpg"])
                del pending[key]
                n += 1
    return n


def make_imagefolder(shards, root):
    """The shards' JPEGs as root/LABEL/KEY.jpg, one process per core."""
    if os.path.exists(os.path.join(root, ".complete")):
        return
    with multiprocessing.Pool() as pool:
        n = sum(pool.map(_extract_shard, [(s, root) for s in shards]))
    open(os.path.join(root, ".complete"), "w").close()
    log(f"ImageFolder copy: {n} JPEGs in {root}")


def describe_data(shards):
    sizes = []
    for shard in shards:
        with tarfile.open(shard) as tar:
            sizes += [m.size for m in tar if m.name.endswith(".jpg")]
    return {"images": len(sizes), "shards": len(shards),
            "mean_jpeg_bytes": sum(sizes) / len(sizes)}


def host_info(setup):
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "cores": os.cpu_count(),
            "stoker": stoker._ext._stoker.version}
    if setup.device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info


# ---------------------------------------------------------------------------


def run(args, setup, res):
    shards = sorted(glob.glob(os.path.join(args.data, "*.tar")))
    if not shards:
        sys.exit(f"gpu_resnet50: no shards in {args.data}")
    res.data["host"] = host_info(setup)
    res.data["data"] = describe_data(shards)
    res.data["batch"] = setup.batch
    res.data["image_size"] = setup.size
    log(f"host {res.data['host']}, data {res.data['data']}")
    if not args.stages or any(s.startswith("dataloader") for s in args.stages):
        make_imagefolder(shards, args.imagefolder)
    torch.backends.cudnn.benchmark = True
    step = make_step(setup)
    plan = [("ceiling", 60, lambda: stage_ceiling(setup, step, res)),
            ("h2d", 30, lambda: stage_h2d(setup, step, res)),
            ("race", 20, lambda: stage_race(setup, shards, res))]
    for n, w in itertools.zip_longest(args.threads, args.workers):
        if n:
            plan.append((f"stoker_{n}", 18,
                         lambda n=n: stage_stoker(setup, step, shards, n, same_stream)))
        if w:
            plan.append((f"dataloader_{w}", 20,
                         lambda w=w: stage_dataloader(setup, step, args.imagefolder, w)))
    plan.append(("stoker_12_side_stream", 18,
                 lambda: stage_stoker(setup, step, shards, 12, side_stream)))
    for n in args.decode_only:
        plan.append((f"decode_{n}", 10, lambda n=n: stage_decode_only(setup, shards, n)))
    if args.stages:
        plan = [p for p in plan if p[0] in args.stages]
    for name, needs, fn in plan:
        if res.left() < needs and name != "ceiling":
            res.data["skipped"].append(name)
            log(f"skipping {name}: {res.left():.0f} s left")
            continue
        log(f"{name} ({res.left():.0f} s left)")
        try:
            res.put(name, fn())
        except Exception:
            res.data["errors"][name] = traceback.format_exc()
            res.save()
            log(f"{name} failed:\n{traceback.format_exc()}")
            if name == "ceiling":
                raise


def table(res):
    st = res.data["stages"]
    ceiling = st.get("ceiling", {}).get("images_per_s")
    rows = []

    def row(label, r):
        if not r:
            return
        frac = f"{r['images_per_s'] / ceiling:.1%}" if ceiling else "-"
        rows.append(f"| {label} | {r['images_per_s']:,.0f} | {frac} | {r['cores']:.1f} |")

    row("ceiling (synthetic uint8 on the GPU)", st.get("ceiling"))
    h = st.get("h2d", {})
    row("synthetic, pinned host, copy on the training stream", h.get("loop_pinned_same_stream"))
    row("synthetic, pinned host, copy on a side stream ahead", h.get("loop_pinned_side_stream"))
    row("synthetic, pageable host, copy on the training stream",
        h.get("loop_pageable_same_stream"))
    def numbered(prefix):
        return sorted((int(k[len(prefix):]), v) for k, v in st.items()
                      if k.startswith(prefix) and k[len(prefix):].isdigit())

    for n, r in numbered("stoker_"):
        row(f"stoker, {n} threads, pin_memory", r)
    row("stoker, 12 threads, pin_memory, copy on a side stream ahead",
        st.get("stoker_12_side_stream"))
    for n, r in numbered("dataloader_"):
        row(f"DataLoader, {n} workers, pin_memory", r)
    for n, r in numbered("decode_"):
        row(f"stoker alone, {n} threads, no model", r)
    lines = ["| feeding | images/s | of ceiling | cores used |", "|---|---:|---:|---:|"] + rows
    for k in ("copy_pinned", "copy_pageable"):
        if k in h:
            c = h[k]
            lines.append(f"{k}: {c['event_ms_median']:.2f} ms per batch on the GPU "
                         f"({c['gb_per_s']:.1f} GB/s), {c['wall_ms_median']:.2f} ms wall")
    for k, v in st.get("race", {}).items():
        lines.append(f"race check, {k}: {v['corrupted']} of {v['batches']} batches changed "
                     "before the GPU copied them")
    for n, r in numbered("stoker_"):
        if r:
            verdict = [ln for ln in r["report"].splitlines() if ln.startswith(("verdict",
                                                                                "input-bound"))]
            lines.append(f"stoker {n} threads report: " + " / ".join(verdict))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="directory of train-*.tar shards")
    p.add_argument("--imagefolder", help="where the ImageFolder copy goes (default DATA-folder)")
    p.add_argument("--json", help="results file, rewritten after every stage")
    p.add_argument("--budget", type=float, default=380, help="seconds for all stages")
    p.add_argument("--stages", type=lambda v: v.split(","),
                   help="only these stages (comma-separated names, as in the JSON)")
    numbers = lambda v: [int(n) for n in v.split(",") if n]  # noqa: E731
    p.add_argument("--threads", type=numbers, default=[12, 8, 4], metavar="N,N",
                   help="stoker's decode threads, one stage each (alternating with --workers)")
    p.add_argument("--workers", type=numbers, default=[12, 8, 4], metavar="N,N",
                   help="the DataLoader's workers, one stage each")
    p.add_argument("--decode-only", type=numbers, default=[], metavar="N,N",
                   help="also the loader alone (no model) with N threads")
    p.add_argument("--cpu-rehearsal", action="store_true",
                   help="run every stage on the CPU, small and short, to check the script")
    args = p.parse_args()
    args.imagefolder = args.imagefolder or args.data.rstrip("/") + "-folder"
    setup = Setup(args.cpu_rehearsal)
    res = Results(args.json, args.budget)
    try:
        run(args, setup, res)
    finally:
        res.data["seconds"] = time.monotonic() - res.start
        res.save()
        print(table(res), flush=True)
    return 1 if res.data["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
