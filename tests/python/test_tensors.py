# SPDX-License-Identifier: MIT
"""stoker.Loader's tensors: the right pixels, labels and dtypes, shared with
the C loader's batch buffers (zero copy), recycled rather than copied.

Reference pixels come from tests/tools/transform_tool, which renders one
JPEG through the same image stage of the C library (eval transform, uint8
NHWC, PPM): the Python path must give exactly those bytes.
"""
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from PIL import Image

import stoker

SIZE = 224
MEAN = (0.485, 0.456, 0.406)  # stoker's defaults (ImageNet)
STD = (0.229, 0.224, 0.225)
TOOL_TIMEOUT_S = 60


def collect(loader):
    """All (images, labels) of one epoch, cloned, concatenated."""
    images, labels = [], []
    for im, lb in loader:
        images.append(im.clone())
        labels.append(lb.clone())
    return torch.cat(images), torch.cat(labels)


def eval_loader(urls, **kw):
    kw.setdefault("batch_size", 16)
    kw.setdefault("image_size", SIZE)
    return stoker.Loader(urls, transform="eval", shuffle=False, threads=2, **kw)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, transform_tool, dataset):
    """uint8 NHWC eval renders of every sample in storage order, by transform_tool."""
    work = tmp_path_factory.mktemp("renders")

    def render(sample):
        src = work / f"{sample.key}.jpg"
        out = work / f"{sample.key}.ppm"
        src.write_bytes(sample.jpg)
        proc = subprocess.run([str(transform_tool), "render", str(src), "eval", str(SIZE), str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL, timeout=TOOL_TIMEOUT_S)
        assert proc.returncode == 0, f"transform_tool on {sample.key}: {proc.stderr}"
        with Image.open(out) as im:
            assert im.mode == "RGB" and im.size == (SIZE, SIZE), (im.mode, im.size)
            return np.asarray(im).copy()

    with ThreadPoolExecutor(4) as ex:
        return torch.from_numpy(np.stack(list(ex.map(render, dataset))))


@pytest.fixture(scope="module")
def uint8_nchw(even_shards):
    return collect(eval_loader(even_shards))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_uint8_images_equal_the_c_render(even_shards, dataset, reference, uint8_nchw, layout):
    if layout == "nchw":
        images, labels = uint8_nchw
    else:
        images, labels = collect(eval_loader(even_shards, layout=layout))
    assert images.dtype == torch.uint8
    if layout == "nchw":
        assert images.shape == (len(dataset), 3, SIZE, SIZE)
        images = images.permute(0, 2, 3, 1)
    else:
        assert images.shape == (len(dataset), SIZE, SIZE, 3)
    for i, s in enumerate(dataset):
        if not torch.equal(images[i], reference[i]):
            diff = (images[i].int() - reference[i].int()).abs()
            pytest.fail(f"{layout}: sample {i} ({s.key}) differs from transform_tool in "
                        f"{int((diff > 0).sum())} values, max {int(diff.max())}")
    assert labels.dtype == torch.int64
    assert labels.tolist() == [s.label for s in dataset]


def test_batches_have_the_asked_size(even_shards, dataset):
    sizes = [(im.shape[0], lb.shape[0]) for im, lb in eval_loader(even_shards, batch_size=32,
                                                                   image_size=32)]
    assert sizes == [(32, 32)] * 3 + [(24, 24)]
    sizes = [im.shape[0] for im, _ in eval_loader(even_shards, batch_size=32, image_size=32,
                                                  drop_last=True)]
    assert sizes == [32] * 3


def expected_float(uint8_nchw, mean=MEAN, std=STD):
    m = torch.tensor(mean, dtype=torch.float64).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).view(1, 3, 1, 1)
    return (uint8_nchw.double() / 255 - m) / s


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_float32_is_normalized_uint8(even_shards, uint8_nchw, layout):
    images, labels = collect(eval_loader(even_shards, dtype=torch.float32, layout=layout))
    assert images.dtype == torch.float32
    if layout == "nhwc":
        images = images.permute(0, 3, 1, 2)
    err = (images.double() - expected_float(uint8_nchw[0])).abs().max().item()
    assert err <= 1e-5, err
    assert torch.equal(labels, uint8_nchw[1])


def test_float32_custom_mean_std(even_shards, uint8_nchw):
    mean, std = (0.5, 0.25, 0.0), (0.5, 0.125, 2.0)
    images, _ = collect(eval_loader(even_shards, dtype=torch.float32, mean=mean, std=std))
    err = (images.double() - expected_float(uint8_nchw[0], mean, std)).abs().max().item()
    assert err <= 1e-5, err


@pytest.mark.parametrize("dtype,mantissa_bits", [(torch.float16, 10), (torch.bfloat16, 7)])
def test_half_precision_close(even_shards, uint8_nchw, dtype, mantissa_bits):
    images, labels = collect(eval_loader(even_shards, dtype=dtype))
    assert images.dtype == dtype
    exact = expected_float(uint8_nchw[0])
    # Rounding to the nearest representable value: at most half an ulp
    # (2**-bits relative), plus float32's own error.
    bound = exact.abs() * 2.0 ** -mantissa_bits + 1e-5
    err = (images.double() - exact).abs()
    worst = (err - bound).max().item()
    assert worst <= 0, f"{dtype}: max error {err.max().item()} beyond half an ulp"
    assert torch.equal(labels, uint8_nchw[1])


# --------------------------------------------------------------------------
# Zero copy

class SpyLoader:
    """Stands in for stoker.loader.loader._CLoader and records, for every batch it hands
    out, the address and size of its images and labels buffers."""
    records = []

    def __init__(self, *args, **kw):
        self._real = stoker._ext._stoker.Loader(*args, **kw)

    def next(self):
        batch = self._real.next()
        if batch is not None:
            rec = {}
            for name in ("images", "labels"):
                arr = np.frombuffer(getattr(batch, name), dtype=np.uint8)
                rec[name] = (arr.ctypes.data, arr.nbytes)
            rec["size"] = batch.size
            SpyLoader.records.append(rec)
        return batch

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.fixture
def spy(monkeypatch):
    SpyLoader.records = []
    monkeypatch.setattr(stoker.loader.loader, "_CLoader", SpyLoader)
    return SpyLoader.records


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_tensors_are_the_batch_buffers(even_shards, spy, dtype):
    loader = eval_loader(even_shards, image_size=32, dtype=dtype, max_batches=3)
    n = 0
    for images, labels in loader:
        rec = spy[n]
        assert images.data_ptr() == rec["images"][0]
        assert images.numel() * images.element_size() == rec["images"][1]
        # Labels are a copy (a few bytes), so that keeping them keeps no image buffer.
        assert labels.data_ptr() != rec["labels"][0]
        assert labels.numel() * labels.element_size() == rec["labels"][1] == 8 * rec["size"]
        assert images.is_contiguous() and images.shape[0] == rec["size"]
        n += 1
    assert n == len(spy) == 8


def test_tensor_writes_reach_the_buffer(even_shards):
    """The tensor is the buffer itself, not a copy of it."""
    c = stoker._ext._stoker.Loader(even_shards, transform="eval", image_size=32, batch_size=8,
                              shuffle=0, threads=1)
    batch = c.next()
    raw = np.frombuffer(batch.images, dtype=np.uint8)
    images = torch.frombuffer(batch.images, dtype=torch.uint8)
    before = int(raw[5])
    images[5] = (before + 1) % 256
    assert int(raw[5]) == (before + 1) % 256
    labels_raw = np.frombuffer(batch.labels, dtype=np.int64)
    torch.frombuffer(batch.labels, dtype=torch.int64)[0] = 12345
    assert labels_raw[0] == 12345
    del raw, images, labels_raw, batch
    c.close()


@pytest.mark.parametrize("max_batches", [2, 3, 4])
def test_buffers_are_recycled(even_shards, spy, max_batches):
    """Across epochs, the tensors are always views of the same at most
    max_batches ring buffers of the C loader (not fresh copies)."""
    loader = eval_loader(even_shards, image_size=32, batch_size=8, max_batches=max_batches)
    image_ptrs, label_ptrs, batches = set(), set(), 0
    for _ in range(3):
        for images, labels in loader:
            assert images.data_ptr() == spy[batches]["images"][0]
            image_ptrs.add(images.data_ptr())
            label_ptrs.add(spy[batches]["labels"][0])
            batches += 1
            del images, labels
    assert batches == 3 * 15
    assert 1 <= len(image_ptrs) <= max_batches, sorted(image_ptrs)
    assert 1 <= len(label_ptrs) <= max_batches, sorted(label_ptrs)
