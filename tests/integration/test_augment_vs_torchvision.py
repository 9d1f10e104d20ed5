# SPDX-License-Identifier: MIT
"""The recipe's augmentations against torchvision 0.14 on the same input.

tests/tools/augment_tool applies one operation of src/image/augment_ops.c
to a raw RGB8 image; each test runs torchvision.transforms.functional on a
uint8 tensor with the same parameters (as torchvision's _apply_op passes
them) and bounds the difference: mean absolute difference <= 0.5 and worst
<= 2 levels, except where noted. Then the drawn operations and magnitudes
of TrivialAugmentWide, RandAugment and AutoAugment (ImageNet) are compared
with torchvision's own forward() (its _apply_op recorded instead of
applied) by a chi-square test, and RandomErasing's boxes with its
get_params. The tool comes from $STOKER_BUILD_DIR (default build-asan).
"""
import io
import math
import os
import tarfile
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.autoaugment as autoaugment
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import InterpolationMode, RandomErasing

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("STOKER_BUILD_DIR", REPO / "build-asan"))
TOOL = BUILD_DIR / "tests" / "augment_tool"
# Photographs: the first JPEG of the sample dataset's first shard (make
# sample-data), else a synthetic scene.
SAMPLE_DATA = Path(os.environ.get("STOKER_SAMPLE_DATA", REPO / "build-data" / "sample-data"))

OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
       "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
       "Invert", "Hue", "Grayscale", "Blur"]
POLICY = {"ta_wide": 1, "ra": 2, "imagenet": 3}


def run(*args, stdin=None):
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    p = subprocess.run([str(TOOL), *map(str, args)], input=stdin, capture_output=True, env=env,
                       timeout=300)
    assert p.returncode == 0 and b"runtime error" not in p.stderr, p.stderr.decode()
    return p.stdout


def photo(w, h):
    """A natural image of w x h: a photograph if one is installed, else a
    smooth synthetic scene with edges (the ops' rounding shows on both)."""
    shards = sorted(SAMPLE_DATA.glob("*.tar"))
    if shards:
        with tarfile.open(shards[0]) as tar:
            member = next(m for m in tar if m.name.endswith(".jpg"))
            im = Image.open(io.BytesIO(tar.extractfile(member).read())).convert("RGB")
        return np.asarray(im.resize((w, h), Image.BILINEAR))
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                    ((x // 8 + y // 8) % 2) * 200 + 20], axis=-1)
    return img.astype(np.uint8)


def noise(w, h, seed):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def ours(img, op, magnitude, bilinear):
    h, w, _ = img.shape
    out = run("op", w, h, OPS.index(op), repr(float(magnitude)), int(bilinear),
              stdin=img.tobytes())
    return np.frombuffer(out, np.uint8).reshape(h, w, 3)


def theirs(img, op, magnitude, bilinear):
    t = torch.from_numpy(img.copy()).permute(2, 0, 1).contiguous()
    if op in ("Hue", "Grayscale", "Blur"):
        out = (F.adjust_hue(t, magnitude) if op == "Hue" else
               F.rgb_to_grayscale(t, num_output_channels=3) if op == "Grayscale" else
               F.gaussian_blur(t, [int(bilinear)] * 2, [magnitude] * 2))
        return out.permute(1, 2, 0).numpy()
    mode = InterpolationMode.BILINEAR if bilinear else InterpolationMode.NEAREST
    out = autoaugment._apply_op(t, op, magnitude, interpolation=mode, fill=None)
    return out.permute(1, 2, 0).numpy()


# Magnitudes: both ends and the middle of TrivialAugmentWide's range, both
# signs, and RandAugment's smaller steps.
CASES = [("Identity", 0.0)]
for name in ("ShearX", "ShearY"):
    CASES += [(name, m) for m in (0.99, -0.99, 0.3, -0.1485)]
for name in ("TranslateX", "TranslateY"):
    CASES += [(name, m) for m in (32.0, -32.0, 13.6, -5.5)]
CASES += [("Rotate", m) for m in (135.0, -135.0, 30.0, -9.0, 90.0)]
for name in ("Brightness", "Color", "Contrast", "Sharpness"):
    CASES += [(name, m) for m in (0.99, -0.99, 0.5, -0.33, 0.9)]
CASES += [("Posterize", b) for b in (8, 6, 4, 2, 1)]
CASES += [("Solarize", t) for t in (255.0, 127.5, 0.0, 8.5)]
CASES += [("AutoContrast", 0.0), ("Equalize", 0.0), ("Invert", 0.0), ("Grayscale", 0.0)]
CASES += [("Hue", h) for h in (0.5, -0.5, 0.1, -0.27, 0.0)]
BLURS = [(k, s) for k in (3, 9, 23) for s in (0.1, 0.8, 2.0)]
GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}


def compare(img, op, magnitude, bilinear):
    a = ours(img, op, magnitude, bilinear).astype(int)
    b = theirs(img, op, magnitude, bilinear).astype(int)
    diff = np.abs(a - b)
    return diff.mean(), diff.max(), (diff > 2).mean()


@pytest.mark.parametrize("size", [(176, 176), (37, 53)])
@pytest.mark.parametrize("op,magnitude", CASES)
def test_op_matches_torchvision(op, magnitude, size):
    w, h = size
    for bilinear in ((False, True) if op in GEOMETRIC else (False,)):
        for img in (photo(w, h), noise(w, h, w * 31 + h)):
            mean, worst, over = compare(img, op, magnitude, bilinear)
            if op in GEOMETRIC and not bilinear:
                # Nearest sampling: where torch's float32 grid lands on a
                # half pixel and ours on the other side, the pixel is the
                # neighbour's, so a few pixels may differ by anything.
                assert mean <= 0.5 and over <= 0.002, (op, magnitude, mean, worst, over)
            else:
                assert mean <= 0.5 and worst <= 2, (op, magnitude, bilinear, mean, worst)


@pytest.mark.parametrize("size", [(176, 176), (37, 53)])
@pytest.mark.parametrize("kernel,sigma", BLURS)
def test_blur_matches_torchvision(kernel, sigma, size):
    """GaussianBlur: torch sums the 2-D kernel in its own order, we run two
    1-D passes, so a value on a rounding boundary may move by one."""
    w, h = size
    for img in (photo(w, h), noise(w, h, 5)):
        mean, worst, _ = compare(img, "Blur", sigma, kernel)
        assert mean <= 0.5 and worst <= 2, (kernel, sigma, mean, worst)


def test_magnitude_tables_match_torchvision():
    for policy, space in (("ta_wide", autoaugment.TrivialAugmentWide()._augmentation_space(31)),
                          ("ra", autoaugment.RandAugment()._augmentation_space(31, (160, 176))),
                          ("imagenet", autoaugment.AutoAugment()._augmentation_space(10, (160, 176)))):
        got = {}
        for line in run("table", POLICY[policy], 31, 176, 160).decode().splitlines():
            op, b, m = line.split()
            got[(OPS[int(op)], int(b))] = float(m)
        for name, (mags, _) in space.items():
            if mags.ndim == 0:
                continue
            for b, m in enumerate(mags.tolist()):
                assert got[(name, b)] == pytest.approx(float(m), rel=1e-6, abs=1e-6), (policy, name, b)


def torchvision_draws(transform, n):
    """(op, magnitude) tuples per call of torchvision's own forward()."""
    seen, calls = [], []
    real = autoaugment._apply_op

    def record(img, op_name, magnitude, interpolation, fill):
        calls.append((op_name, round(float(magnitude), 4)))
        return img

    autoaugment._apply_op = record
    try:
        torch.manual_seed(0)
        img = torch.zeros(3, 160, 176, dtype=torch.uint8)
        for _ in range(n):
            calls.clear()
            transform(img)
            seen.append(tuple(calls))
    finally:
        autoaugment._apply_op = real
    return seen


def stoker_draws(policy, n, num_ops=2, magnitude=9):
    out = run("draws", POLICY[policy], n, 7, 31, num_ops, magnitude, 176, 160).decode()
    seen = []
    for line in out.split("\n")[:n]:
        steps = []
        for word in line.split():
            op, m = word.split(":")
            steps.append((OPS[int(op)], round(float(m), 4)))
        seen.append(tuple(steps))
    return seen


def chi_square_p(a, b):
    """Two-sample chi-square over the categories seen (rare ones pooled)."""
    ca, cb = Counter(a), Counter(b)
    keys = sorted(set(ca) | set(cb), key=repr)
    rows, pooled = [], [0, 0]
    for k in keys:
        if ca[k] + cb[k] < 20:
            pooled[0] += ca[k]
            pooled[1] += cb[k]
        else:
            rows.append([ca[k], cb[k]])
    if sum(pooled) > 0:
        rows.append(pooled)
    return contingency_p(np.array(rows, dtype=float)), len(rows)


def contingency_p(table):
    """p-value of Pearson's chi-square test of independence on a k x 2
    table (scipy is not installed: the chi-square tail is torch's
    regularized upper incomplete gamma)."""
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    stat = ((table - expected) ** 2 / expected).sum()
    df = (table.shape[0] - 1) * (table.shape[1] - 1)
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64),
                                         torch.tensor(stat / 2.0, dtype=torch.float64)))


@pytest.mark.parametrize("policy", ["ta_wide", "ra", "imagenet"])
def test_draws_follow_torchvision(policy):
    n = 40000
    transform = {"ta_wide": autoaugment.TrivialAugmentWide(),
                 "ra": autoaugment.RandAugment(num_ops=2, magnitude=9),
                 "imagenet": autoaugment.AutoAugment()}[policy]
    theirs_ = torchvision_draws(transform, n)
    ours_ = stoker_draws(policy, n)
    # Single steps (op, magnitude): the distribution of each step.
    p, cells = chi_square_p([s for d in ours_ for s in d], [s for d in theirs_ for s in d])
    assert cells > 10 and p > 0.01, (policy, p, cells)
    # Whole draws (which ops together, how many): AutoAugment's pairs and
    # their probabilities.
    p, cells = chi_square_p(ours_, theirs_)
    assert p > 0.01, (policy, p, cells)


def test_draw_distribution_detects_a_wrong_space():
    """The chi-square test can fail: RandAugment at magnitude 9 against
    TrivialAugmentWide's draws is rejected."""
    n = 20000
    p, _ = chi_square_p([s for d in stoker_draws("ra", n) for s in d],
                        [s for d in torchvision_draws(autoaugment.TrivialAugmentWide(), n)
                         for s in d])
    assert p < 1e-6


def test_erasing_boxes_follow_torchvision():
    n, w, h = 20000, 176, 160
    ours_ = run("erase", 0.5, n, 3, w, h).decode().splitlines()
    torch.manual_seed(1)
    t = torch.zeros(3, h, w)
    eraser = RandomErasing(p=0.5)
    theirs_ = []
    for _ in range(n):
        if torch.rand(1) < 0.5:
            i, j, bh, bw, _ = eraser.get_params(t, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=[0])
            theirs_.append(None if (bh, bw) == (h, w) else (i, j, bh, bw))
        else:
            theirs_.append(None)
    mine = [None if l == "-" else tuple(map(int, l.split())) for l in ours_]
    # Erased share, and the box area and height in deciles.
    def feats(boxes):
        out = []
        for b in boxes:
            if b is None:
                out.append("none")
            else:
                out.append((min(9, b[2] * b[3] * 10 // (w * h // 3)), min(9, b[2] * 10 // h)))
        return out
    p, cells = chi_square_p(feats(mine), feats(theirs_))
    assert cells > 10 and p > 0.01, (p, cells)
    for b in mine:
        if b is not None:
            assert 0 <= b[0] and b[0] + b[2] <= h and 0 <= b[1] and b[1] + b[3] <= w


def normal_cells(values):
    """Standard normal numbers binned by twentieths of probability (the
    normal's quantiles), so every cell expects the same count."""
    edges = torch.distributions.Normal(0.0, 1.0).icdf(torch.arange(1, 20) / 20.0)
    return torch.bucketize(torch.as_tensor(values, dtype=torch.float32), edges).tolist()


def test_erasing_random_values_follow_torchvision():
    """RandomErasing(value="random") fills its box with torch.empty(...).normal_(): stoker's
    numbers (the same stream the erase draws from) against torch's, by chi-square over cells
    of equal probability, plus the tails beyond 3 sigma."""
    n = 60000
    ours_ = np.array(run("normals", n, 7).decode().split(), dtype=np.float64)
    torch.manual_seed(2)
    theirs_ = torch.empty(n).normal_().numpy()
    p, cells = chi_square_p(normal_cells(ours_), normal_cells(theirs_))
    assert cells == 20 and p > 0.01, (p, cells)
    tails = lambda v: ["tail" if abs(x) > 3 else "body" for x in v]  # noqa: E731
    p, _ = chi_square_p(tails(ours_), tails(theirs_))
    assert p > 0.01, p
    # Pairs are independent (Box-Muller's two outputs): no correlation.
    assert abs(np.corrcoef(ours_[0::2], ours_[1::2])[0, 1]) < 0.02


def test_erasing_value_test_can_fail():
    """The same test rejects uniform numbers of the normal's variance."""
    n = 60000
    wrong = (np.random.default_rng(3).random(n) - 0.5) * math.sqrt(12)
    theirs_ = torch.empty(n).normal_().numpy()
    p, _ = chi_square_p(normal_cells(wrong), normal_cells(theirs_))
    assert p < 1e-6


def reference_mix(mixup_alpha, cutmix_alpha, n, w, h):
    """The draws of the classification reference's collate: RandomChoice of
    RandomMixup(p=1) and RandomCutmix(p=1), with their lambda and box math
    (pytorch/vision references/classification/transforms.py)."""
    torch.manual_seed(5)
    out = []
    for _ in range(n):
        cutmix = bool(torch.randint(2, (1,)).item())
        alpha = cutmix_alpha if cutmix else mixup_alpha
        lam = float(torch._sample_dirichlet(torch.tensor([alpha, alpha]))[0])
        if not cutmix:
            out.append((0, lam, 0, 0, 0, 0))
            continue
        r_x, r_y = int(torch.randint(w, (1,))), int(torch.randint(h, (1,)))
        r = 0.5 * math.sqrt(1.0 - lam)
        rw, rh = int(r * w), int(r * h)
        x1, y1 = max(r_x - rw, 0), max(r_y - rh, 0)
        x2, y2 = min(r_x + rw, w), min(r_y + rh, h)
        out.append((1, 1.0 - (x2 - x1) * (y2 - y1) / (w * h), x1, y1, x2, y2))
    return out


def mix_features(draws, w, h):
    feats = []
    for kind, lam, x1, y1, x2, y2 in draws:
        if kind == 0:
            feats.append(("mixup", min(9, int(lam * 10))))
        else:
            feats.append(("cutmix", min(9, int(lam * 10)), min(4, x1 * 5 // w),
                          min(4, (x2 - x1) * 5 // (w + 1))))
    return feats


def test_mix_draws_follow_the_reference():
    n, w, h = 20000, 176, 176
    ours_ = [tuple(float(v) if i == 1 else int(v) for i, v in enumerate(l.split()))
             for l in run("mix", 0.2, 1.0, 0.5, n, 11, w, h).decode().splitlines()]
    theirs_ = reference_mix(0.2, 1.0, n, w, h)
    p, cells = chi_square_p(mix_features(ours_, w, h), mix_features(theirs_, w, h))
    assert cells > 20 and p > 0.01, (p, cells)
    # Mixup's lambda ~ Beta(0.2, 0.2): mean 1/2, variance 1/(4 * 1.4)
    lams = np.array([d[1] for d in ours_ if d[0] == 0])
    assert abs(lams.mean() - 0.5) < 0.02 and abs(lams.var() - 1 / 5.6) < 0.01
    for kind, lam, x1, y1, x2, y2 in ours_:
        if kind:
            assert 0 <= x1 <= x2 <= w and 0 <= y1 <= y2 <= h
            assert lam == pytest.approx(1 - (x2 - x1) * (y2 - y1) / (w * h))


def test_mix_distribution_test_can_fail():
    """Mixup alone (alpha 0.2) is told apart from the reference's choice."""
    n, w, h = 20000, 176, 176
    ours_ = [tuple(float(v) if i == 1 else int(v) for i, v in enumerate(l.split()))
             for l in run("mix", 0.2, 0, 0.5, n, 11, w, h).decode().splitlines()]
    p, _ = chi_square_p(mix_features(ours_, w, h), mix_features(reference_mix(0.2, 1.0, n, w, h), w, h))
    assert p < 1e-6


def test_color_jitter_draws_follow_torchvision():
    """ColorJitter(0.4, 0.4, 0.4, 0.1) then RandomGrayscale(0.2): the order
    of the four, each factor's decile, and the grayscale share."""
    from torchvision.transforms import ColorJitter
    n = 20000
    ours_ = []
    for line in run("jitter", 0.4, 0.1, 0.2, n, 9).decode().split("\n")[:n]:
        steps = [w.split(":") for w in line.split()]
        ours_.append([(OPS[int(op)], float(m)) for op, m in steps])
    torch.manual_seed(2)
    jitter = ColorJitter(0.4, 0.4, 0.4, 0.1)
    names = ["Brightness", "Contrast", "Color", "Hue"]
    theirs_ = []
    for _ in range(n):
        order, *factors = jitter.get_params(jitter.brightness, jitter.contrast, jitter.saturation,
                                            jitter.hue)
        steps = [(names[i], factors[i] - 1 if i < 3 else factors[i]) for i in order.tolist()]
        if torch.rand(1) < 0.2:
            steps.append(("Grayscale", 0.0))
        theirs_.append(steps)

    def order(d):
        return [tuple(s[0] for s in steps) for steps in d]

    def deciles(d):
        out = []
        for steps in d:
            for name, m in steps:
                lo, hi = (-0.1, 0.1) if name == "Hue" else (-0.4, 0.4)
                out.append((name, min(9, int((m - lo) / (hi - lo) * 10))))
        return out
    for feats in (order, deciles):
        p, cells = chi_square_p(feats(ours_), feats(theirs_))
        assert cells > 10 and p > 0.01, (feats.__name__, p, cells)
