#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Decode + train transform: stoker against torchvision's DataLoader + PIL.

Measures, in one run, on the same JPEGs, alternating the contenders each round
(the order is reversed every other round), each pinned with taskset(1) to the
first N cores (the whole process tree: DataLoader workers inherit the mask):
  torchvision  ImageFolder over the shards' JPEGs (extracted once into a
               temporary directory, class dir = the .cls label) with the
               standard train transform Compose([RandomResizedCrop(224),
               RandomHorizontalFlip(), ToTensor(), Normalize(mean, std)]) and
               DataLoader(batch_size=64, shuffle=True, num_workers=N,
               persistent_workers=True, prefetch_factor=2, drop_last=True);
               torch.set_num_threads(1) in the main process and the workers,
               OMP_NUM_THREADS=1. Steady state: the first 2*N*prefetch_factor
               batches (the prefetch buffers) are skipped, then a window of at
               least as many batches is timed, crossing epoch boundaries.
  stoker       `stoker bench --decode train --size 224 --threads N` with
               --dtype float32 (normalized NCHW, the same output as
               ToTensor+Normalize), --dtype uint8 (what stoker users feed the
               GPU, which normalizes) and --full-decode float32 (whole image
               decoded at full scale, then cropped: the baseline for the
               region + DCT-scaled decode). images_per_s from its JSON; that
               timing includes start-up and the first batch, amortized by
               running enough epochs to take >= --stoker-seconds (so stoker's
               figure is, if anything, low).
  PIL          the same train transform in one process on one core, no
               DataLoader: a per-core reference.
  libjpeg-turbo  build-rel/jpeg_floor (bench/jpeg_floor.c) on one core, the
               JPEGs in memory: libjpeg-turbo alone, with nothing of stoker's
               reading, resampling or conversion, on the crop boxes stoker's
               train transform draws for the same samples (jpeg_floor --list
               gives it each JPEG's shard and position): entropy decoding of
               only the MCU rows above the bottom of the boxes (a ceiling on
               the images/s of any train decode built on libjpeg-turbo), a
               full decode, the boxes' regions at the smallest DCT scale
               leaving >= 224 px (libjpeg-turbo's own region + DCT-scaled
               decode: the floor), and at the scale stoker picks.
The shards are read once first (page cache warm). Prints medians over the
rounds and ratios (medians of the per-round ratios), the best round of
stoker at 1 thread against the floor's best round, the N-thread ratios
against torchvision, and checks the targets: stoker train uint8, 1 thread
pinned to one core, >= 0.80x libjpeg-turbo's region + DCT-scaled rate
(issues 14 and 23; best of the rounds, and the median of per-round ratios
beside it), and stoker 2 threads >= 1.8x 1 thread. `make bench-decode` runs
it on the sample set and on the small photos (--name says which).

usage: bench/decode_vs_torchvision.py [--stoker build-rel/stoker] [--rounds 3]
                                      [--floor build-rel/jpeg_floor] [--name SET]
                                      [--threads 1,2] [--quick] SHARD...
"""
import argparse
import glob
import io
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

BATCH = 64
SIZE = 224
PREFETCH = 2
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


# ---------------------------------------------------------------------------
# Children: run as `decode_vs_torchvision.py --child KIND ...` under taskset.

def train_transform():
    from torchvision import transforms as T
    return T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(),
                      T.ToTensor(), T.Normalize(MEAN, STD)])


def _worker_init(worker_id):
    import torch
    torch.set_num_threads(1)
    want = int(os.environ["DVT_CORES"])
    have = len(os.sched_getaffinity(0))
    if have != want:
        raise RuntimeError(f"DataLoader worker {worker_id} may run on {have} cores, not {want}")


def child_torchvision(args):
    import torch
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder
    torch.set_num_threads(1)
    start = time.perf_counter()
    loader = DataLoader(ImageFolder(args.root, transform=train_transform()),
                        batch_size=BATCH, shuffle=True, num_workers=args.n,
                        persistent_workers=True, prefetch_factor=PREFETCH,
                        drop_last=True, worker_init_fn=_worker_init)
    warmup = 2 * args.n * PREFETCH
    stop = warmup + args.window
    seen = 0
    epochs = 0
    first = t0 = t1 = None
    while t1 is None:
        for images, _ in loader:
            seen += 1
            if first is None:
                first = time.perf_counter() - start
            if seen == warmup:
                t0 = time.perf_counter()
            elif seen == stop:
                t1 = time.perf_counter()
                break
            assert images.shape == (BATCH, 3, SIZE, SIZE) and images.dtype == torch.float32
        epochs += 1
    print(json.dumps({"images_per_s": args.window * BATCH / (t1 - t0),
                      "first_batch_seconds": first, "warmup_batches": warmup,
                      "timed_batches": args.window, "epochs_touched": epochs + 1,
                      "batches_per_epoch": len(loader)}))


def child_pil(args):
    import torch
    from torchvision.datasets.folder import pil_loader
    torch.set_num_threads(1)
    files = sorted(glob.glob(os.path.join(args.root, "*", "*.jpg")))
    tf = train_transform()
    warm = 20
    n = args.window
    for i in range(warm):
        tf(pil_loader(files[i % len(files)]))
    t0 = time.perf_counter()
    for i in range(n):
        tf(pil_loader(files[(warm + i) % len(files)]))
    print(json.dumps({"images_per_s": n / (time.perf_counter() - t0)}))


# ---------------------------------------------------------------------------
# Parent.

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def extract(shards, root):
    """Write every KEY.jpg to root/LABEL/KEY.jpg; return (sizes, dims, list)
    with list lines "SHARD POSITION PATH" for jpeg_floor --list: the
    sample's shard and its number in the shard, which key stoker's crop
    draws."""
    from PIL import Image
    sizes, dims, listing = [], [], []
    for index, shard in enumerate(shards):
        pending = {}
        positions = {}  # key -> number in the shard, in tar order
        with tarfile.open(shard) as tar:
            for m in tar:
                if not m.isfile():
                    continue
                key, _, ext = m.name.rpartition(".")
                positions.setdefault(key, len(positions))
                if ext not in ("jpg", "cls"):
                    continue
                data = tar.extractfile(m).read()
                pending.setdefault(key, {})[ext] = data
                s = pending[key]
                if "jpg" in s and "cls" in s:
                    label = s["cls"].decode().strip()
                    d = os.path.join(root, label)
                    os.makedirs(d, exist_ok=True)
                    name = f"{os.path.basename(shard)}-{key.replace('/', '_')}.jpg"
                    with open(os.path.join(d, name), "wb") as f:
                        f.write(s["jpg"])
                    listing.append(f"{index} {positions[key]} {os.path.join(d, name)}")
                    sizes.append(len(s["jpg"]))
                    dims.append(Image.open(io.BytesIO(s["jpg"])).size)
                    del pending[key]
    return sizes, dims, listing


def run_json(cmd, env):
    """Run cmd; return its last JSON line (jpeg_floor: its lines by mode, the
    first one's figure as images_per_s), plus the CPU time its process tree
    used over its wall time ("cpu_s", "wall_s")."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [json.loads(x) for x in out.strip().splitlines()]
    r = lines[-1]
    if "mode" in r:
        r = {"modes": {x["mode"]: x["images_per_s"] for x in lines},
             "images_per_s": lines[0]["images_per_s"]}
    r["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    r["wall_s"] = wall
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--floor", default="build-rel/jpeg_floor")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2",
                    help="comma-separated N: stoker threads = DataLoader workers = cores")
    ap.add_argument("--window", type=int, default=40,
                    help="torchvision batches timed after the warm-up (default 40; "
                         "the warm-up is 2*N*prefetch_factor batches)")
    ap.add_argument("--stoker-seconds", type=float, default=10.0,
                    help="minimum duration of one stoker run (sets --epochs)")
    ap.add_argument("--pil-images", type=int, default=400)
    ap.add_argument("--name", default="",
                    help="what to call the set of shards in the output (e.g. sample, small)")
    ap.add_argument("--quick", action="store_true",
                    help="short smoke run: 1 round, small windows (figures are rough)")
    ap.add_argument("--child", choices=("torchvision", "pil"), help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("shards", nargs="*")
    args = ap.parse_args()
    if args.child == "torchvision":
        return child_torchvision(args)
    if args.child == "pil":
        return child_pil(args)

    if args.quick:
        args.rounds, args.window, args.stoker_seconds, args.pil_images = 1, 8, 2.0, 60
    if not args.shards:
        args.shards = sorted(glob.glob("build-data/sample-data/train-*.tar"))
    if not args.shards:
        sys.exit("no shards given and none in build-data/sample-data (run `make demo`)")
    for prog in (args.stoker, args.floor):
        if not os.access(prog, os.X_OK):
            sys.exit(f"{prog} not found (run `ninja -C build-rel`)")
    if not shutil.which("taskset"):
        sys.exit("taskset(1) is required to pin the contenders")
    with tempfile.TemporaryDirectory(prefix="dvt-",
                                     dir=os.path.dirname(os.path.abspath(args.shards[0]))) as tmp:
        return measure(args, tmp)


def measure(args, root):
    allowed = sorted(os.sched_getaffinity(0))
    ns = [int(x) for x in args.threads.split(",")]
    ns = [n for n in ns if n <= len(allowed)]
    if not ns:
        sys.exit("not enough cores for --threads")
    for s in args.shards:  # warm the page cache
        with open(s, "rb") as f:
            while f.read(1 << 22):
                pass
    sizes, dims, listing = extract(args.shards, root)
    list_path = os.path.join(root, "jpeg_floor.list")
    with open(list_path, "w") as f:
        f.write("\n".join(listing) + "\n")
    count = len(sizes)
    if count < BATCH * 2:
        sys.exit("too few images")
    load_start = os.getloadavg()[0]

    me = os.path.abspath(__file__)
    py = sys.executable

    def pin(n):
        return ["taskset", "-c", ",".join(str(c) for c in allowed[:n])]

    def env(n):
        e = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", DVT_CORES=str(n))
        return e

    stoker_variants = (("stoker float32", ["--dtype", "float32"]),
                       ("stoker uint8", ["--dtype", "uint8"]),
                       ("stoker float32 --full-decode", ["--dtype", "float32", "--full-decode"]))

    def stoker_cmd(n, flags, epochs):
        return pin(n) + [args.stoker, "bench", "--decode", "train", "--size", str(SIZE),
                         "--threads", str(n), "--batch-size", str(BATCH), "--epochs",
                         str(epochs), "--json", *flags, *args.shards]

    # Calibrate stoker's epoch counts (also warms the binary and the cache).
    contenders = []  # (name, n, kind, cmd)
    stoker_epochs = {}
    for n in ns:
        contenders.append(("torchvision DataLoader", n, "tv",
                           pin(n) + [py, me, "--child", "torchvision", "--root", root,
                                     "--n", str(n), "--window", str(args.window)]))
        for name, flags in stoker_variants:
            r = run_json(stoker_cmd(n, flags, 1), env(n))
            epochs = max(1, math.ceil(args.stoker_seconds / r["seconds"]))
            stoker_epochs[(name, n)] = epochs
            contenders.append((name, n, "stoker", stoker_cmd(n, flags, epochs)))
    contenders.insert(0, ("PIL transform, no DataLoader", 1, "pil",
                          pin(1) + [py, me, "--child", "pil", "--root", root,
                                    "--window", str(args.pil_images)]))
    contenders.insert(1, ("libjpeg-turbo alone", 1, "floor",
                          pin(1) + [args.floor, "--seconds", str(args.stoker_seconds / 4),
                                    "--list", list_path]))
    floor = []  # per round: images/s by jpeg_floor mode

    rates = {(c[0], c[1]): [] for c in contenders}
    extra = {(c[0], c[1]): [] for c in contenders}
    busy = {(c[0], c[1]): [] for c in contenders}
    t_start = time.perf_counter()
    for rnd in range(args.rounds):
        order = contenders if rnd % 2 == 0 else contenders[::-1]
        for name, n, kind, cmd in order:
            r = run_json(cmd, env(n))
            if kind == "floor":
                floor.append(r["modes"])
            rates[(name, n)].append(r["images_per_s"])
            extra[(name, n)].append(r.get("first_batch_seconds"))
            busy[(name, n)].append(r["cpu_s"] / (r["wall_s"] * n))
    elapsed = time.perf_counter() - t_start
    load_end = os.getloadavg()[0]

    def med(key):
        return statistics.median(rates[key])

    def ratio(a, b):  # median of the per-round ratios a/b
        return statistics.median(x / y for x, y in zip(rates[a], rates[b]))

    ws = [w for w, _ in dims]
    hs = [h for _, h in dims]
    if args.name:
        print(f"=== set: {args.name} ===")
    print(f"machine: {os.cpu_count()} cores (nproc), {len(allowed)} usable, CPU {cpu_model()}; "
          f"load average {load_start:.2f} at start, {load_end:.2f} at end")
    print(f"data: {count} JPEGs from {len(args.shards)} shards, mean {statistics.mean(sizes) / 1024:.0f} KiB, "
          f"{min(ws)}..{max(ws)} x {min(hs)}..{max(hs)} px (w x h), "
          f"mean {statistics.mean(ws):.0f} x {statistics.mean(hs):.0f}; page cache warm")
    print(f"run: {args.rounds} rounds in {elapsed:.0f} s, alternating; torchvision: skip "
          f"2*N*{PREFETCH} batches, time {args.window}; stoker epochs per run: "
          + ", ".join(f"{k[0].replace('stoker ', '')} N={k[1]}: {v}" for k, v in stoker_epochs.items()))
    print(f"output: {SIZE}x{SIZE} RandomResizedCrop + flip, batch {BATCH}; "
          "images/s = median over rounds; ratios = median of per-round ratios; cpu use = "
          "CPU time of the process tree / (wall time x N), start-up included (well under "
          "100% means an idle pipeline or other load on the pinned cores)")
    print()
    print(f"{'contender':32s} {'N':>2s} {'images/s':>9s} {'per core':>9s} {'min..max':>13s} "
          f"{'vs torchvision':>15s} {'fast/full':>10s} {'cpu use':>8s}")
    for name, n, kind, _ in contenders:
        if kind == "floor":
            continue
        key = (name, n)
        m = med(key)
        spread = f"{min(rates[key]):.0f}..{max(rates[key]):.0f}"
        tv = ("torchvision DataLoader", n)
        vs = f"{ratio(key, tv):.2f}x" if tv in rates else "-"
        ff = "-"
        if name == "stoker float32" and ("stoker float32 --full-decode", n) in rates:
            ff = f"{ratio(key, ('stoker float32 --full-decode', n)):.2f}x"
        cpu = f"{100 * statistics.median(busy[key]):.0f}%"
        print(f"{name:32s} {n:2d} {m:9.0f} {m / n:9.0f} {spread:>13s} {vs:>15s} {ff:>10s} {cpu:>8s}")

    tv_first = {n: statistics.median(extra[("torchvision DataLoader", n)]) for n in ns}
    st_first = {n: statistics.median(extra[("stoker float32", n)]) for n in ns}
    print()
    print("first batch (s), median: "
          + ", ".join(f"torchvision N={n} {tv_first[n]:.2f} (excluded)" for n in ns) + "; "
          + ", ".join(f"stoker float32 N={n} {st_first[n]:.2f} (included)" for n in ns))

    def floor_med(mode):
        return statistics.median(f[mode] for f in floor)

    print()
    print("libjpeg-turbo alone, 1 core, images/s (bench/jpeg_floor.c; the same JPEGs in memory, "
          "the crop boxes stoker draws for them):")
    print(f"  entropy decoding of the MCU rows above each crop's bottom  "
          f"{floor_med('entropy_crop'):6.0f}  (a ceiling for any decoder on libjpeg-turbo)")
    print(f"  entropy decoding of whole images                            "
          f"{floor_med('entropy_full'):6.0f}")
    print(f"  full decode to RGB                                          "
          f"{floor_med('full_rgb'):6.0f}")
    print(f"  whole image at scale 4/8                                    "
          f"{floor_med('half_rgb'):6.0f}")
    print(f"  crop region at the smallest scale >= {SIZE} px                 "
          f"{floor_med('crop_scaled_rgb'):6.0f}  "
          f"({statistics.median(f['crop_scaled_rgb'] / f['full_rgb'] for f in floor):.2f}x "
          "full decode; the floor)")
    print(f"  the same at stoker's scale (n = 1, 2, 4, 8; >= 1.25x {SIZE} px)"
          f"{floor_med('crop_pow2_rgb'):6.0f}")

    def vs_floor(name, mode="crop_scaled_rgb"):  # median of per-round ratios
        return statistics.median(x / f[mode] for x, f in zip(rates[(name, 1)], floor))

    def best_vs_floor(name, mode="crop_scaled_rgb"):  # best round of each
        return max(rates[(name, 1)]) / max(f[mode] for f in floor)

    if 1 in ns:
        print()
        print("stoker train transform, 1 thread pinned to 1 core, against libjpeg-turbo alone on "
              "the same JPEGs and boxes:")
        print(f"  floor (crop_scaled_rgb): best of {args.rounds} "
              f"{max(f['crop_scaled_rgb'] for f in floor):6.0f} images/s")
        for name in ("stoker uint8", "stoker float32"):
            print(f"  {name:15s} best of {args.rounds} {max(rates[(name, 1)]):6.0f} images/s = "
                  f"{best_vs_floor(name):.2f}x the floor's best")
        for name in ("stoker uint8", "stoker float32"):
            print(f"  {name:15s} {med((name, 1)):6.0f} images/s = "
                  f"{vs_floor(name):.2f}x the floor (region + DCT-scaled), "
                  f"{vs_floor(name, 'crop_pow2_rgb'):.2f}x libjpeg-turbo at stoker's scale; "
                  f"{ratio((name, 1), ('torchvision DataLoader', 1)):.2f}x torchvision per core")

    for n in ns:
        if n == 1:
            continue
        print()
        print(f"{n} threads = {n} DataLoader workers, {n} pinned cores, against torchvision: "
              + ", ".join(f"{name} {ratio((name, n), ('torchvision DataLoader', n)):.2f}x"
                          for name in ("stoker uint8", "stoker float32")))

    def target(text, value, goal):
        print(f"target: {text} >= {goal}x: {'met' if value >= goal else 'NOT met'} ({value:.2f}x)")

    print()
    if 1 in ns:
        target("stoker uint8, 1 thread / libjpeg-turbo region + DCT-scaled decode, 1 core, "
               f"best of {args.rounds}", best_vs_floor("stoker uint8"), 0.80)
        target("the same, median of the per-round ratios", vs_floor("stoker uint8"), 0.80)
    if 1 in ns and 2 in ns:
        for name in ("stoker uint8", "stoker float32"):
            v = statistics.median(b / a for a, b in zip(rates[(name, 1)], rates[(name, 2)]))
            target(f"{name} 2 threads / 1 thread", v, 1.8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
