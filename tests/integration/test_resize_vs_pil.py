# SPDX-License-Identifier: MIT
"""stoker's bilinear and bicubic resize (src/image/resize.c) against Pillow itself.

Pillow's Image.resize(size, BILINEAR or BICUBIC, box) is what torchvision's
Resize and RandomResizedCrop run on PIL images (interpolation="bilinear" or
"bicubic"); stk__resize_rgb8 claims to reproduce both.
Each test writes an image as PPM, runs tests/tools/resize_tool (built with the
unit tests) over many boxes and output sizes in one process, and compares
every output with Pillow's, flipped left-right where the case asks.
Bilinear allows differences of one level (the goal is none); bicubic, added
when bilinear was already exact, must be exact: a one-level slip is what a
wrong sum of its negative weights gives. The fraction of exact values is
printed at the end of the module.

Images: real photographs from /usr/share/backgrounds or, without them, the
wallpapers that `make demo` caches under build-data/photos-cache, shrunk to
dataset sizes (plus one at full resolution); then random noise (the worst
case for rounding) of many shapes down to 1x1. Every test runs four times:
with the kernels the CPU selects (AVX2 where present) and with the portable
ones, for each filter (the bicubic's negative weights take other sums).
The tool comes from $STOKER_BUILD_DIR (default build-asan under the
repository root). tests/run_all.sh runs the comparisons (marked `pixels`)
against the release build, which users run and which takes half the time,
and test_extreme_ratios under ASan.
"""
import os
import random
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("STOKER_BUILD_DIR", REPO / "build-asan"))
TOOL = BUILD_DIR / "tests" / "resize_tool"
PHOTO_DIRS = [Path("/usr/share/backgrounds"), REPO / "build-data" / "photos-cache"]
CASES_PER_IMAGE = 40
TIMEOUT_S = 300
SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")

FILTERS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
FLIP = Image.Transpose.FLIP_LEFT_RIGHT

_totals = {"values": 0, "exact": 0, "max_diff": 0, "cases": 0}


@pytest.fixture(scope="module", autouse=True)
def report(request):
    yield
    if _totals["values"]:
        line = (f"resize vs Pillow {Image.__version__}: {_totals['cases']} cases, "
                f"{_totals['values']} values, {100.0 * _totals['exact'] / _totals['values']:.4f}% "
                f"exact, max abs diff {_totals['max_diff']}")
        # Shown even when pytest captures output (it is the figure to report).
        plugins = request.config.pluginmanager
        reporter = plugins.get_plugin("terminalreporter")
        capture = plugins.get_plugin("capturemanager")
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line("\n" + line)
        else:
            print(line)


@pytest.fixture(scope="module", params=["bilinear", "bicubic"])
def resample_filter(request):
    return request.param


@pytest.fixture(scope="module", params=["native", "portable"])
def tool(request, resample_filter):
    """(path of resize_tool, extra environment, Pillow's filter) for one choice of kernels and
    filter."""
    if not (TOOL.is_file() and os.access(TOOL, os.X_OK)):
        pytest.fail(f"no {TOOL}: build the unit tests (ninja -C {BUILD_DIR}) or set "
                    "STOKER_BUILD_DIR", pytrace=False)
    env = {"STOKER_RESIZE_FILTER": resample_filter}
    if request.param == "portable":
        env["STOKER_RESIZE_PORTABLE"] = "1"
    return TOOL, env, FILTERS[resample_filter]


def find_photos():
    for d in PHOTO_DIRS:
        if d.is_dir():
            found = sorted(p for p in d.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg")
                           and "backgrounds" in p.parts)
            if found:
                return found
    return []


PHOTOS = find_photos()


def f32(x):
    return float(np.float32(x))


def random_span(rng, size, style):
    """(lo, hi) inside [0, size] with lo < hi as C floats, as Pillow takes them."""
    while True:
        if style == "int":
            lo = rng.randrange(size)
            hi = rng.randrange(lo + 1, size + 1)
            return lo, hi
        if style == "narrow":  # under two pixels wide: large upscaling factors
            lo = rng.uniform(0, size - 0.01)
            hi = min(size, lo + rng.uniform(0.01, 2.0))
        else:
            lo, hi = sorted(rng.uniform(0, size) for _ in range(2))
            if rng.random() < 0.3:
                lo = 0.0 if rng.random() < 0.5 else lo
                hi = float(size) if rng.random() < 0.5 else hi
        if f32(lo) < f32(hi) and hi <= size:
            return lo, hi


def random_case(rng, w, h):
    """(box or None, (out_w, out_h), flip) for an image of w x h."""
    kind = rng.choice(["full", "int", "float", "rrc", "narrow", "crop"])
    if kind == "full":
        box = None
    elif kind == "rrc":
        # torchvision's RandomResizedCrop: area 8-100%, aspect 3/4-4/3, integers
        for _ in range(10):
            area = w * h * rng.uniform(0.08, 1.0)
            ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
            cw, ch = int(round((area * ratio) ** 0.5)), int(round((area / ratio) ** 0.5))
            if 0 < cw <= w and 0 < ch <= h:
                break
        else:
            cw, ch = w, h
        x0, y0 = rng.randint(0, w - cw), rng.randint(0, h - ch)
        box = (x0, y0, x0 + cw, y0 + ch)
    else:
        style = {"int": "int", "crop": "int", "narrow": "narrow"}.get(kind, "float")
        (x0, x1), (y0, y1) = random_span(rng, w, style), random_span(rng, h, style)
        box = (x0, y0, x1, y1)
    bw, bh = (w, h) if box is None else (box[2] - box[0], box[3] - box[1])
    if kind == "crop":
        size = (int(bw), int(bh))  # no resampling at all: a copy
    else:
        size = rng.choice([
            (224, 224),
            (rng.randint(1, 8), rng.randint(1, 8)),                        # tiny outputs
            (max(1, int(bw * rng.uniform(0.05, 1))), max(1, int(bh * rng.uniform(0.05, 1)))),
            (rng.randint(1, 400), rng.randint(1, 400)),                    # anything
            (max(1, round(bw * 256 / min(bw, bh))), max(1, round(bh * 256 / min(bw, bh)))),
        ])
    if kind == "narrow":
        size = (rng.randint(50, 300), rng.randint(50, 300))
    return box, size, rng.random() < 0.5


def run_tool(tool, tmp_path, im, cases):
    """stoker's outputs for cases, as uint8 arrays of shape (h, w, 3)."""
    tool, tool_env, _ = tool
    src = tmp_path / "in.ppm"
    im.save(src)
    w, h = im.size
    args, outs = [str(tool), str(src)], []
    for i, (box, size, flip) in enumerate(cases):
        box = box or (0, 0, w, h)
        out = tmp_path / f"out{i}.ppm"
        args += [repr(float(v)) for v in box] + [str(size[0]), str(size[1]), str(int(flip)),
                                                   str(out)]
        outs.append(out)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1", **tool_env)
    proc = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    for marker in SANITIZER_MARKERS:
        assert marker not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    return [np.asarray(Image.open(p).convert("RGB")) for p in outs]


def compare(tool, tmp_path, im, cases):
    got = run_tool(tool, tmp_path, im, cases)
    failures = []
    for (box, size, flip), mine in zip(cases, got):
        ref = im.resize(size, tool[2], box=box)
        if flip:
            ref = ref.transpose(FLIP)
        ref = np.asarray(ref)
        assert mine.shape == ref.shape
        diff = np.abs(mine.astype(np.int16) - ref.astype(np.int16))
        worst = int(diff.max())
        _totals["cases"] += 1
        _totals["values"] += diff.size
        _totals["exact"] += int((diff == 0).sum())
        _totals["max_diff"] = max(_totals["max_diff"], worst)
        allowed = 0 if tool[2] == FILTERS["bicubic"] else 1
        if worst > allowed:
            failures.append(f"{im.size} box={box} size={size} flip={flip}: max diff {worst}, "
                            f"{int((diff > allowed).sum())} values off by more than {allowed}")
    assert not failures, "\n".join(failures)


def case_list(seed, w, h, n=CASES_PER_IMAGE):
    rng = random.Random(seed)
    return [random_case(rng, w, h) for _ in range(n)]


def load_photo(path, long_side):
    im = Image.open(path).convert("RGB")
    if long_side:
        scale = long_side / max(im.size)
        im = im.resize((max(1, round(im.size[0] * scale)), max(1, round(im.size[1] * scale))),
                       Image.Resampling.LANCZOS)
    return im


def photo_params():
    if not PHOTOS:
        return [pytest.param(None, 0, id="no-photos")]
    rng = random.Random(1)
    chosen = sorted(rng.sample(PHOTOS, min(6, len(PHOTOS))))
    params = []
    for i, p in enumerate(chosen):
        long_side = (500, 640, 375, 800, 333, 1024)[i % 6]
        params.append(pytest.param(p, long_side, id=f"{p.stem}-{long_side}"))
    params.append(pytest.param(chosen[0], 0, id=f"{chosen[0].stem}-full"))
    return params


@pytest.mark.pixels
@pytest.mark.parametrize("path,long_side", photo_params())
def test_photographs(tool, tmp_path, path, long_side):
    if path is None:  # no photographs on this machine: a smooth synthetic one
        rng = np.random.default_rng(7)
        small = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
        im = Image.fromarray(small).resize((500, 375), Image.Resampling.BICUBIC)
    else:
        im = load_photo(path, long_side)
    n = 8 if long_side == 0 else CASES_PER_IMAGE  # full resolution: a few cases
    compare(tool, tmp_path, im, case_list(zlib.crc32(f"{path}:{long_side}".encode()), *im.size, n=n))


@pytest.mark.pixels
@pytest.mark.parametrize("w,h", [(1, 1), (1, 7), (9, 1), (2, 3), (5, 5), (17, 13), (64, 48),
                                 (500, 375), (375, 500), (1000, 750)])
def test_random_noise(tool, tmp_path, w, h):
    rng = np.random.default_rng(w * 1000 + h)
    im = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    compare(tool, tmp_path, im, case_list(w * 7919 + h, w, h))


def test_extreme_ratios(tool, tmp_path):
    """Downscaling by hundreds, upscaling by hundreds, one-pixel outputs."""
    rng = np.random.default_rng(11)
    im = Image.fromarray(rng.integers(0, 256, (300, 2000, 3), dtype=np.uint8))
    cases = [(None, (3, 2), False), (None, (1, 1), True), (None, (2000, 1), False),
             (None, (1, 300), True), ((0.5, 0.5, 1.5, 1.25), (400, 300), True),
             ((1999.0, 299.0, 2000.0, 300.0), (256, 256), False),
             ((10.25, 20.75, 1900.5, 21.0), (7, 50), False),
             ((0, 0, 2000, 300), (2000, 300), True)]
    compare(tool, tmp_path, im, cases)
