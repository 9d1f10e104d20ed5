#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Your own augmentations on stoker's batches: a torchvision Compose as a
per-sample hook and Mixup as a batch hook, in hook processes.

stoker decodes and crops (RandomResizedCrop + flip, in C); each uint8
crop then goes through the Compose in one of --hook-processes processes,
and each assembled batch through Mixup. Every hook call gets `rng`
(rng.torch, rng.numpy, rng.key) keyed by the sample (or the batch), and
the global torch/numpy/random generators are re-seeded from the same key
first, so the classic transforms below, which draw from torch's global
generator, give the same batches whatever the number of processes.

usage: examples/hooks_torchvision.py SHARD... [--hook-processes 2] [--batches 3]
"""
import argparse
import hashlib

import torch
import torchvision.transforms as T

import stoker

AUGMENT = T.Compose([
    T.ColorJitter(0.4, 0.4, 0.4, 0.1),
    T.GaussianBlur(11, sigma=(0.1, 2.0)),
    T.RandomErasing(p=0.25, value=0),
])


def augment(image, rng):
    """image: one uint8 CHW crop; returns the augmented crop (same shape)."""
    return AUGMENT(image)


def mixup(batch, rng, alpha=0.2, classes=1000):
    images, labels = batch
    lam = float(rng.numpy.beta(alpha, alpha))
    perm = torch.randperm(len(labels), generator=rng.torch)
    target = torch.nn.functional.one_hot(labels.clamp(min=0), classes).float()
    images = images.float()
    return lam * images + (1 - lam) * images[perm], lam * target + (1 - lam) * target[perm]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shards", nargs="+")
    parser.add_argument("--hook-processes", type=int, default=2)
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args()
    with stoker.Loader(args.shards, batch_size=32, image_size=224, map=augment,
                       batch_map=mixup, hook_processes=args.hook_processes) as loader:
        for i, (images, targets) in enumerate(loader):
            digest = hashlib.sha256(images.numpy().tobytes()).hexdigest()[:16]
            print(f"batch {i}: images {tuple(images.shape)} {images.dtype}, "
                  f"targets {tuple(targets.shape)}, sha256 {digest}")
            if i + 1 == args.batches:
                break


if __name__ == "__main__":
    main()
