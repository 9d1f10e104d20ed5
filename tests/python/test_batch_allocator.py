"""Caller-supplied batch memory (the mechanism behind pin_memory=True):
every batch lives in a buffer the allocator returned, buffers are reused,
and they are released when the loader goes away."""
import gc
import io
import tarfile
import weakref

import numpy as np
import pytest
import torch
from PIL import Image

import stoker


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    path = tmp_path_factory.mktemp("alloc") / "shard.tar"
    rng = np.random.default_rng(1)
    with tarfile.open(path, "w") as tar:
        for n in range(40):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(buf, "JPEG")
            for ext, data in (("jpg", buf.getvalue()), ("cls", str(n).encode())):
                info = tarfile.TarInfo(f"{n:04d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_batches_live_in_allocator_buffers(shard):
    made = []

    def allocate(nbytes):
        buf = np.zeros(nbytes, dtype=np.uint8)
        made.append(buf)
        return buf

    loader = stoker.Loader([shard], batch_size=4, image_size=16, batch_allocator=allocate,
                           max_batches=3, threads=2)
    pointers = set()
    for epoch in range(3):
        for images, labels in loader:
            pointers.add(images.data_ptr())
    assert 1 <= len(made) <= 3
    bases = {buf.ctypes.data for buf in made}
    assert pointers <= bases
    alive = [weakref.ref(buf) for buf in made]
    del made[:], images, labels
    assert any(ref() is not None for ref in alive)  # the loader still holds them
    loader.close()
    del loader
    gc.collect()
    assert all(ref() is None for ref in alive)  # released with the loader


def test_allocator_failure_is_an_error_not_a_crash(shard):
    loader = stoker.Loader([shard], batch_size=4, image_size=16,
                           batch_allocator=lambda nbytes: bytearray(1))  # too small
    with pytest.raises(MemoryError):
        next(iter(loader))


def test_pin_memory_without_cuda_is_refused(shard):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: pinned memory works here")  # not counted as passing
    with pytest.raises(ValueError, match="CUDA"):
        stoker.Loader([shard], pin_memory=True)
