# SPDX-License-Identifier: MIT
"""bench/jpeg_floor.c, the libjpeg-turbo reference of the decode benchmark:
it measures every mode on every kind of JPEG the sample set has, and refuses
files it could not time honestly (corrupt or truncated), naming them."""
import io
import json
import subprocess

import pytest
from PIL import Image

from conftest import assert_no_crash

MODES = ["entropy_crop", "entropy_full", "full_rgb", "half_rgb", "crop_scaled_rgb",
         "crop_pow2_rgb"]


@pytest.fixture
def jpeg_floor(stoker):
    path = stoker.parent / "jpeg_floor"
    assert path.is_file(), f"{path} missing: meson builds it beside {stoker}"
    return path


def photo_like(size, seed):
    """An image with edges and gradients, so every coefficient band is used."""
    img = Image.radial_gradient("L").resize(size).convert("RGB")
    noise = Image.effect_noise(size, 40 + seed).convert("RGB")
    return Image.blend(img, noise, 0.5).rotate(seed * 17, expand=False)


def jpeg(img, **kw):
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90, **kw)
    return out.getvalue()


@pytest.fixture
def good_files(tmp_path):
    kinds = {
        "baseline420.jpg": jpeg(photo_like((500, 375), 1), subsampling=2),
        "baseline444.jpg": jpeg(photo_like((375, 500), 2), subsampling=0),
        "progressive.jpg": jpeg(photo_like((433, 421), 3), progressive=True),
        "gray.jpg": jpeg(photo_like((300, 600), 4).convert("L")),
        "small.jpg": jpeg(photo_like((64, 48), 5)),  # smaller than the output
    }
    paths = []
    for name, data in kinds.items():
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    return paths


def run_floor(jpeg_floor, paths, seconds="0.05"):
    proc = subprocess.run([str(jpeg_floor), "--seconds", seconds, *paths],
                          capture_output=True, text=True, timeout=120)
    assert_no_crash(proc)
    return proc


def test_every_mode_measures_every_file(jpeg_floor, good_files):
    proc = run_floor(jpeg_floor, good_files)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [x["mode"] for x in lines] == MODES
    for x in lines:
        # whole passes over the files, timed for at least --seconds
        assert x["images"] >= len(good_files) and x["images"] % len(good_files) == 0, x
        assert x["seconds"] >= 0.05, x
        assert x["images_per_s"] == pytest.approx(x["images"] / x["seconds"], rel=0.01), x


@pytest.mark.parametrize("damage", ["not_jpeg", "truncated"])
def test_bad_files_are_refused_by_name(jpeg_floor, good_files, tmp_path, damage):
    data = open(good_files[0], "rb").read()
    bad = tmp_path / f"{damage}.jpg"
    bad.write_bytes(b"GIF89a" + data[6:] if damage == "not_jpeg" else data[: len(data) // 2])
    proc = run_floor(jpeg_floor, [good_files[1], str(bad)])
    assert proc.returncode == 1
    assert proc.stdout == ""  # nothing timed
    assert str(bad) in proc.stderr


def test_usage_error(jpeg_floor):
    proc = run_floor(jpeg_floor, [], seconds="0")
    assert proc.returncode == 2
    assert "usage" in proc.stderr
