#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""User hooks (Loader(map=)): hook processes against one, and against
torchvision's DataLoader with the same Compose.

One run, the contenders alternating (order reversed every other round), each
child pinned with taskset(1) to the same two cores (hook processes and
DataLoader workers inherit the mask):
  python-1, python-2  a GIL-holding pure-Python hook (a loop over pixels'
               sums, SPIN iterations per sample) on 64 px crops, with 1 and 2
               hook processes, threads=1: the target is 2 processes >= 1.8x 1.
  stoker       transform="train" (RandomResizedCrop 224 + flip, in C) and
               map= GaussianBlur(11) ten times (torchvision, on the uint8
               crop), 2 hook processes, threads=1.
  dataloader   torch DataLoader(num_workers=2, batch 64, prefetch_factor 2,
               persistent_workers) over stoker.Samples (the same shards; PIL
               decode) with Compose([RandomResizedCrop(224),
               RandomHorizontalFlip(), PILToTensor(), GaussianBlur(11) x 10]):
               the target is stoker >= 1.0x.
  dataloader-malloc  the same DataLoader with the malloc settings that
               stoker gives its hook processes (MALLOC_MMAP_THRESHOLD_=64M,
               MALLOC_TRIM_THRESHOLD_=256M in its environment): how much of
               stoker's lead is that setting, which a DataLoader user can
               have too by exporting the two variables before starting Python.
Each child times one epoch after its first two batches (the processes are
started and warm), and reads the PSS (/proc/PID/smaps_rollup) of itself and
its descendants (stoker's fork server and hook processes, or the
DataLoader's workers) at the end of that epoch.
Prints the median images/s of each, the median of the per-round ratios, the
PSS sums, and the CPU ms per image of the trainer and of its hook processes,
from which the ceiling of python-2 / python-1 on two free cores follows
(figures that the other load on a shared machine does not change).
torch.set_num_threads(1) everywhere.

usage: bench/hooks_vs_dataloader.py [--rounds 3] [--cores 0,1] SHARD...
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BATCH = 64
SPIN = 100000  # about 8 ms a sample on one core: a ColorJitter-sized hook (TRANSFORMS.md 1B)


def spin(image, rng):
    """Pure Python, holds the GIL all along."""
    total = 0
    for i in range(SPIN):
        total += i * i % 7
    return image


def blur10(image, rng):
    return _BLUR(image)


def crop_blur10(image, rng):
    """The whole decoded image (transform=None): RandomResizedCrop 224 + flip,
    then blur10."""
    return _CROP_BLUR(image)


def _compose_blur(crop=False):
    from torchvision import transforms as T
    first = [T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip()] if crop else []
    return T.Compose(first + [T.GaussianBlur(11, sigma=(0.1, 2.0)) for _ in range(10)])


_BLUR = _compose_blur()
_CROP_BLUR = _compose_blur(crop=True)


def pss_kib(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total


def descendants(pid):
    """Children, theirs, ...: stoker's hook processes are children of its
    fork server, a child of the trainer."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in f.read().split():
                out += [int(child)] + descendants(int(child))
    return out


def cpu_s(pids):
    """User + system CPU seconds of the processes so far."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def timed(batches, pids_of):
    """Images/s over the epoch after its first two batches; PSS at its end;
    CPU ms per image of the trainer (pids[0]) and of the rest."""
    it = iter(batches)
    next(it)
    next(it)
    pids = pids_of()
    n, start = 0, time.perf_counter()
    trainer, others = cpu_s(pids[:1]), cpu_s(pids[1:])
    for batch in it:
        n += len(batch[0])
    seconds = time.perf_counter() - start
    trainer, others = cpu_s(pids[:1]) - trainer, cpu_s(pids[1:]) - others
    return {"images_per_s": n / seconds, "pss_mib": pss_kib(pids) / 1024,
            "images_per_cpu_s": n / (trainer + others),
            "trainer_cpu_ms": 1000 * trainer / n, "others_cpu_ms": 1000 * others / n}


def child(kind, shards):
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import stoker
    from hooks_vs_dataloader import blur10 as blur_hook, spin as spin_hook
    if kind.startswith("python-"):
        loader = stoker.Loader(shards, batch_size=BATCH, image_size=64, threads=1,
                               map=spin_hook, hook_processes=int(kind[-1]))
    elif kind == "stoker":
        loader = stoker.Loader(shards, batch_size=BATCH, image_size=224, threads=1,
                               map=blur_hook, hook_processes=2)
    if not kind.startswith("dataloader"):
        with loader:
            return timed(loader, lambda: [os.getpid()] + descendants(os.getpid()))
    from torchvision import transforms as T
    import io

    from PIL import Image
    compose = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()] +
                        [T.GaussianBlur(11, sigma=(0.1, 2.0)) for _ in range(10)])

    class Decoded(torch.utils.data.IterableDataset):
        def __init__(self):
            self.samples = stoker.Samples(shards, decode_cls=True)

        def __iter__(self):
            for s in self.samples:
                yield compose(Image.open(io.BytesIO(s["jpg"])).convert("RGB")), s["cls"]

    samples = Decoded()
    loader = torch.utils.data.DataLoader(samples, batch_size=BATCH, num_workers=2,
                                         prefetch_factor=2, persistent_workers=True,
                                         worker_init_fn=lambda _: torch.set_num_threads(1))
    return timed(loader, lambda: [os.getpid()] + descendants(os.getpid()))


def main():
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(sys.argv[2], sys.argv[3:])), flush=True)
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", default="0,1")
    parser.add_argument("--only", choices=("python", "blur"), help="one pair of contenders")
    parser.add_argument("shards", nargs="+")
    args = parser.parse_args()
    pairs = [("python-2", "python-1"), ("stoker", "dataloader", "dataloader-malloc")]
    pairs = [p for p in pairs if args.only in (None, "python" if "python-1" in p else "blur")]
    results = {k: [] for pair in pairs for k in pair}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # glibc reads these when the process starts: the DataLoader's workers,
    # forks of the child, inherit what the child started with.
    malloc_env = dict(env, MALLOC_MMAP_THRESHOLD_=str(64 << 20),
                      MALLOC_TRIM_THRESHOLD_=str(256 << 20))
    for r in range(args.rounds):
        for pair in pairs:
            for kind in (pair if r % 2 == 0 else pair[::-1]):
                out = subprocess.run(["taskset", "-c", args.cores, sys.executable,
                                      os.path.abspath(__file__), "--child", kind] + args.shards,
                                     check=True, capture_output=True, text=True,
                                     env=malloc_env if kind == "dataloader-malloc" else env)
                results[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"round {r} {kind}: {results[kind][-1]}", flush=True)
    print(f"\nunder taskset -c {args.cores}, {args.rounds} rounds, medians:")
    for kind, runs in results.items():
        print(f"  {kind:11s} {statistics.median(x['images_per_s'] for x in runs):8.1f} images/s"
              f"   PSS {statistics.median(x['pss_mib'] for x in runs):7.0f} MiB")
    for a, b, target in (("python-2", "python-1", 1.8), ("stoker", "dataloader", 1.0),
                         ("stoker", "dataloader-malloc", 1.0)):
        if a not in results:
            continue
        ratio = statistics.median(x["images_per_s"] / y["images_per_s"]
                                  for x, y in zip(results[a], results[b]))
        verdict = "met" if ratio >= target else "NOT met"
        print(f"  {a} / {b}: {ratio:.2f}x (target >= {target}x: {verdict})")
    if "python-1" in results:
        # The figure the load on the machine does not change: CPU per image.
        # Two hook processes share the two cores with the trainer (stoker's
        # decode and the hooks' dispatch), so on cores of its own the run
        # reaches at most 2h / (h + t) times one process (h: hook processes'
        # CPU per image, t: the trainer's).
        h = statistics.median(x["others_cpu_ms"] for x in results["python-1"])
        t = statistics.median(x["trainer_cpu_ms"] for x in results["python-1"])
        print(f"  CPU per image (python-1): hook process {h:.2f} ms, trainer {t:.2f} ms: the "
              f"ceiling of python-2 / python-1 on 2 free cores is 2h/(h+t) = "
              f"{2 * h / (h + t):.2f}x")
    if "stoker" not in results:
        return
    cpu = statistics.median(x["images_per_cpu_s"] / y["images_per_cpu_s"]
                            for x, y in zip(results["stoker"], results["dataloader"]))
    print(f"  images per CPU second (trainer + hook processes, main + workers): stoker / "
          f"DataLoader {cpu:.2f}x (less sensitive than images/s to other load on the cores)")
    pss = statistics.median(x["pss_mib"] / y["pss_mib"]
                            for x, y in zip(results["stoker"], results["dataloader"]))
    print(f"  PSS stoker (trainer + hook processes) / DataLoader (main + workers): {pss:.2f}x")


if __name__ == "__main__":
    main()
