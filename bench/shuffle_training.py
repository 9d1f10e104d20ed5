# SPDX-License-Identifier: MIT
"""Train a small CNN on class-sorted and on mixed shards of the same samples
(issue 19): the validation accuracy must be within 2 points.

The sample set's shards are unpacked into an ImageFolder tree (a fifth of
every class held out for validation), then packed twice with `stoker pack`:
`--sorted` (each shard a few classes) and by default (shuffled). The same
CNN, seed and epochs train through stoker.Loader with its default order
options on each; a mixed validation set is scored after the last epoch.
Also printed: distinct classes per batch of the first epoch against a
uniform permutation of the same labels.

Usage: PYTHONPATH=build-rel/python python3 bench/shuffle_training.py \
           --stoker build-rel/stoker [--epochs 5] SHARD...
"""
import argparse
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time

import torch

import stoker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mixing  # noqa: E402  (bench/mixing.py)

LIMIT_POINTS = 2.0


def unpack(shards, root):
    """Shards -> root/train/CLASS/KEY.jpg and root/val/CLASS/KEY.jpg (every
    fifth sample of a class in key order held out)."""
    by_class = {}
    for path in shards:
        with tarfile.open(path) as tf:
            members = {}
            for m in tf.getmembers():
                key, _, ext = m.name.partition(".")
                members.setdefault(key, {})[ext] = tf.extractfile(m).read()
        for key, parts in members.items():
            by_class.setdefault(int(parts["cls"]), []).append((key, parts["jpg"]))
    for label, items in by_class.items():
        for i, (key, jpg) in enumerate(sorted(items)):
            d = os.path.join(root, "val" if i % 5 == 4 else "train", f"class{label:03d}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, os.path.basename(key) + ".jpg"), "wb") as f:
                f.write(jpg)
    return len(by_class)


def pack(stoker_bin, tree, out, *extra):
    os.makedirs(out)
    subprocess.run([stoker_bin, "pack", "-q", "--max-samples", "200", *extra, "-o",
                    os.path.join(out, "s-%04d.tar"), tree], check=True, stdout=subprocess.DEVNULL)
    return sorted(os.path.join(out, n) for n in os.listdir(out))


def model(classes):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, classes))


def to_input(images):
    return images.float().div_(255).sub_(0.5)


def train(train_shards, val_shards, classes, samples, args):
    torch.manual_seed(args.seed)
    net = model(classes)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    loader = stoker.Loader(train_shards, image_size=args.size, seed=args.seed,
                           threads=args.threads)
    # The rate decays to 0 over the run (cosine), as training recipes do:
    # at a constant rate the last steps' noise moves the final accuracy by
    # about as much as the 2 points compared here.
    steps = args.epochs * -(-samples // 64)  # batches of 64, the last partial
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps)))
    first_epoch = []
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        net.train()
        for images, labels in loader:
            if epoch == 0:
                first_epoch.extend(labels.tolist())
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(to_input(images)), labels)
            loss.backward()
            opt.step()
            sched.step()
    report = loader.report()
    loader.close()
    net.eval()
    right = total = 0
    val = stoker.Loader(val_shards, image_size=args.size, transform="eval",
                        threads=args.threads, shuffle=False)
    with torch.no_grad():
        for images, labels in val:
            right += int((net(to_input(images)).argmax(1) == labels).sum())
            total += len(labels)
    val.close()
    return right / total, first_epoch, report


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shards", nargs="+")
    ap.add_argument("--stoker", default="build-rel/stoker")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--size", type=int, default=64, help="image side for the CNN")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="stoker-shuffle-") as tmp:
        classes = unpack(args.shards, tmp)
        val = pack(args.stoker, os.path.join(tmp, "val"), os.path.join(tmp, "val-shards"))
        results = {}
        for name, extra in (("sorted", ("--sorted",)), ("mixed", ())):
            shards = pack(args.stoker, os.path.join(tmp, "train"), os.path.join(tmp, name),
                          *extra)
            start = time.monotonic()
            samples = sum(len(f) for _, _, f in os.walk(os.path.join(tmp, "train")))
            accuracy, labels, report = train(shards, val, classes, samples, args)
            per_batch = mixing.classes_per_batch(labels, 64)
            uniform = mixing.uniform_classes_per_batch(labels, 64)
            results[name] = accuracy
            print(f"{name:6s} shards ({len(shards)}): validation accuracy {accuracy:.3f}; "
                  f"classes per batch of 64 in epoch 0: mean {mixing.mean(per_batch):.1f}, "
                  f"first {per_batch[0]}, min {min(per_batch)} (uniform permutation "
                  f"{uniform:.1f}); {time.monotonic() - start:.0f} s")
            for line in report.splitlines():
                if line.startswith(("labels:", "hint: batches mix labels")):
                    print("       " + line)
    gap = 100 * abs(results["mixed"] - results["sorted"])
    print(f"{classes} classes, {args.epochs} epochs, seed {args.seed}, {args.size} px: "
          f"sorted vs mixed differ by {gap:.1f} points (limit {LIMIT_POINTS:.0f}): "
          f"{'PASS' if gap <= LIMIT_POINTS else 'FAIL'}")
    return 0 if gap <= LIMIT_POINTS else 1


if __name__ == "__main__":
    sys.exit(main())
