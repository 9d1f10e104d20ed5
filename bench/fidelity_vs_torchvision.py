#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""How far stoker's fast path (region + DCT-scaled JPEG decode) lands from
torchvision, per dct_margin, on real photographs.

For each JPEG (a random sample of --images of them), draws --boxes
RandomResizedCrop boxes with torchvision's own get_params (train) or takes
the eval transform's box, renders them through tests/transform_tool
(uint8 NHWC, from a build with tests, default build-rel) at every margin
given, and compares with torchvision on the PIL image: train
F.resized_crop(box, size) + hflip on odd images, eval
Compose([Resize(int(size / 0.875)), CenterCrop(size)]). Prints, per margin,
the mean absolute difference in 8-bit levels: its mean over boxes, 99th
percentile and worst. tests/integration/test_image_vs_torchvision.py bounds
the same figures on its own images; this measures a data set's.

usage: bench/fidelity_vs_torchvision.py [--mode train|eval] [--margins 1,1.25,1.5]
                                        [--images 300] [--boxes 4] JPEG_OR_DIR...
"""
import argparse
import glob
import os
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image


def jpegs(paths):
    out = []
    for p in paths:
        out += sorted(glob.glob(os.path.join(p, "**", "*.jpg"), recursive=True)) \
            if os.path.isdir(p) else [p]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", default="build-rel/tests/transform_tool")
    ap.add_argument("--mode", choices=("train", "eval"), default="train")
    ap.add_argument("--margins", default="1,1.25,1.5")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--boxes", type=int, default=4, help="train boxes per image")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    if not os.access(args.tool, os.X_OK):
        sys.exit(f"{args.tool} not found (build the tests: ninja -C build-rel)")
    files = jpegs(args.paths)
    if not files:
        sys.exit("no JPEGs found")
    files = random.Random(args.seed).sample(files, min(args.images, len(files)))
    margins = args.margins.split(",")
    size = args.size
    eval_reference = T.Compose([T.Resize(int(size / 0.875)), T.CenterCrop(size)])

    with tempfile.TemporaryDirectory(prefix="fidelity-") as tmp:
        def one(i):
            path = files[i]
            try:
                img = Image.open(path).convert("RGB")
            except OSError as e:  # e.g. a truncated file: neither side renders it
                print(f"skipped {path}: {e}", file=sys.stderr)
                return None
            if args.mode == "train":
                torch.manual_seed(args.seed * 1000003 + i)
                crop = T.RandomResizedCrop(size)
                boxes = [tuple(crop.get_params(img, crop.scale, crop.ratio)) + (i % 2,)
                         for _ in range(args.boxes)]
                refs = []
                for top, left, h, w, flip in boxes:
                    ref = F.resized_crop(img, top, left, h, w, [size, size])
                    refs.append(np.asarray(F.hflip(ref) if flip else ref, dtype=np.int16))
            else:
                boxes, refs = [None], [np.asarray(eval_reference(img), dtype=np.int16)]
            maes = {}
            for m in margins:
                cmd = [args.tool, "--dct-margin", m, "render", path, args.mode, str(size)]
                outs = [os.path.join(tmp, f"{i}_{k}.ppm") for k in range(len(boxes))]
                for box, out in zip(boxes, outs):
                    cmd += ([str(int(x)) for x in box] if box else []) + [out]
                subprocess.run(cmd, check=True)
                maes[m] = [float(np.abs(np.asarray(Image.open(out).convert("RGB"),
                                                   dtype=np.int16) - ref).mean())
                           for out, ref in zip(outs, refs)]
            return maes

        with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
            results = [r for r in ex.map(one, range(len(files))) if r is not None]
    for m in margins:
        v = np.array([x for r in results for x in r[m]])
        print(f"{args.mode} {size}, dct_margin {m}: {len(v)} {'boxes' if args.mode == 'train' else 'images'} "
              f"of {len(results)} photos: MAE mean {v.mean():.3f}, p99 {np.percentile(v, 99):.3f}, "
              f"worst {v.max():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
