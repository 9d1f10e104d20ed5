# SPDX-License-Identifier: MIT
"""Every augmentation of the training recipe (src/image/augment*.c, mix.c) on
the inputs that reach their edge cases: images of 1x1 and 2x3 pixels (crops
and boxes of zero or one pixel, blur kernels larger than the image),
grayscale, grayscale with alpha, palette, CMYK JPEG (Adobe's inverted
form) and 16-bit PNG (grey and RGB). Run with STOKER_BIN=build-asan/stoker
it is the sanitizer suite of the recipe: the `run` fixture fails on any
AddressSanitizer or UndefinedBehaviorSanitizer report, and the epoch must
deliver every sample (none may be skipped as bad).

Inputs are generated here: Pillow writes the JPEGs and 8-bit PNGs, and
16-bit RGB PNGs (which Pillow cannot write) are encoded with zlib."""
import io
import json
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

SAMPLES = 48  # per shard: enough draws for every TrivialAugmentWide op to come up


def png16(pixels):
    """A 16-bit PNG of an (h, w) or (h, w, 3) uint16 array."""
    h, w = pixels.shape[:2]
    colour = 2 if pixels.ndim == 3 else 0
    rows = pixels.astype(">u2").reshape(h, -1)
    raw = b"".join(b"\0" + row.tobytes() for row in rows)

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, colour, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def pillow(mode, size, fmt, seed, **save):
    rng = np.random.default_rng(seed)
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4, "CMYK": 4}
    w, h = size
    if mode == "P":
        im = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).quantize(16)
    else:
        shape = (h, w) if channels[mode] == 1 else (h, w, channels[mode])
        im = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)
    out = io.BytesIO()
    im.save(out, fmt, **save)
    return out.getvalue()


def image_of(kind, seed):
    """(extension, bytes) of one input of the given kind."""
    rng = np.random.default_rng(seed)
    if kind == "rgb-1x1-jpg":
        return "jpg", pillow("RGB", (1, 1), "JPEG", seed)
    if kind == "rgb-2x3-jpg":
        return "jpg", pillow("RGB", (2, 3), "JPEG", seed)
    if kind == "rgb-3x2-progressive-jpg":
        return "jpg", pillow("RGB", (3, 2), "JPEG", seed, progressive=True)
    if kind == "gray-jpg":
        return "jpg", pillow("L", (17, 11), "JPEG", seed)
    if kind == "cmyk-jpg":
        return "jpg", pillow("CMYK", (19, 13), "JPEG", seed)
    if kind == "cmyk-1x1-jpg":
        return "jpg", pillow("CMYK", (1, 1), "JPEG", seed)
    if kind == "rgb-1x1-png":
        return "png", pillow("RGB", (1, 1), "PNG", seed)
    if kind == "rgba-2x3-png":
        return "png", pillow("RGBA", (2, 3), "PNG", seed)
    if kind == "gray-alpha-png":
        return "png", pillow("LA", (5, 7), "PNG", seed)
    if kind == "palette-png":
        return "png", pillow("P", (9, 4), "PNG", seed)
    if kind == "gray16-png":
        return "png", png16(rng.integers(0, 65536, (13, 9), dtype=np.uint16))
    if kind == "gray16-1x1-png":
        return "png", png16(rng.integers(0, 65536, (1, 1), dtype=np.uint16))
    if kind == "rgb16-png":
        return "png", png16(rng.integers(0, 65536, (6, 10, 3), dtype=np.uint16))
    if kind == "rgb16-2x3-png":
        return "png", png16(rng.integers(0, 65536, (3, 2, 3), dtype=np.uint16))
    raise AssertionError(kind)


KINDS = ["rgb-1x1-jpg", "rgb-2x3-jpg", "rgb-3x2-progressive-jpg", "gray-jpg", "cmyk-jpg",
         "cmyk-1x1-jpg", "rgb-1x1-png", "rgba-2x3-png", "gray-alpha-png", "palette-png",
         "gray16-png", "gray16-1x1-png", "rgb16-png", "rgb16-2x3-png"]

# Each recipe op alone (with probability 1 where it has one), then the whole
# torchvision v2 recipe, and the eval transform.
OPS = {
    "ta_wide": ["--auto-augment", "ta_wide", "--augment-interpolation", "bilinear"],
    "randaugment": ["--auto-augment", "ra", "--ra-magnitude", "9"],
    "autoaugment_imagenet": ["--auto-augment", "imagenet"],
    "color_jitter": ["--color-jitter", "0.4", "--hue-jitter", "0.5"],
    "grayscale": ["--grayscale", "1"],
    "blur": ["--blur-kernel", "23"],
    "random_erase": ["--random-erase", "1", "--random-erase-value", "random"],
    "mixup": ["--mixup-alpha", "0.8"],
    "cutmix": ["--cutmix-alpha", "1.0", "--dtype", "float32", "--layout", "nhwc"],
    "recipe_v2": ["--recipe", "torchvision-v2", "--size", "7", "--dtype", "bfloat16"],
    "eval": ["--decode", "eval", "--size", "3", "--eval-resize", "4"],
}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """A shard of SAMPLES inputs per kind, and "all": every kind in turn."""
    from conftest import write_shard
    out, every = {}, []
    root = tmp_path_factory.mktemp("recipe-inputs")
    for k, kind in enumerate(KINDS):
        samples = []
        for i in range(SAMPLES):
            ext, data = image_of(kind, 1000 * k + i)
            samples.append({"__key__": f"{i:04d}", ext: data, "cls": str(i % 5)})
            every.append({"__key__": f"{kind}-{i:04d}", ext: data, "cls": str(i % 5)})
        out[kind] = write_shard(root / f"{kind}.tar", samples)
    out["all"] = write_shard(root / "all.tar", every)
    return out


def bench_all(run, shard, args, samples):
    """A train epoch of the shard with args: every sample delivered, none bad."""
    proc = run(["bench", "--json", "--decode", "train", "--batch-size", "16", "--threads", "2",
                *args, shard], timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = proc.stdout.splitlines()
    assert len(report) == 1, proc.stdout
    stats = json.loads(report[0])
    assert stats["samples"] == samples, stats
    assert stats["samples_skipped"] == 0, stats


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("kind", KINDS)
def test_recipe_op_on_input_kind(run, shards, kind, op):
    bench_all(run, shards[kind], ["--size", "5", *OPS[op]], SAMPLES)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("size", ["1", "2"])
def test_recipe_op_on_tiny_outputs(run, shards, size, op):
    """The ops work on the output crop: outputs of 1x1 and 2x2 pixels are
    where their borders, kernels and boxes degenerate."""
    bench_all(run, shards["all"], [*OPS[op], "--size", size], SAMPLES * len(KINDS))
