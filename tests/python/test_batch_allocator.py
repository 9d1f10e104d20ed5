# SPDX-License-Identifier: MIT
"""Caller-supplied batch memory (the mechanism behind pin_memory=True):
every batch lives in a buffer the allocator returned, buffers are reused,
and they are released when the loader goes away."""
import gc
import subprocess
import sys
import weakref

import numpy as np
import pytest
import torch

import stoker


@pytest.fixture(name="shard")
def shard_fixture(noise_shard):
    return noise_shard


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


RESIZE_BYTEARRAY = r"""
import gc, sys
import torch
import stoker

made = []

def allocate(nbytes):
    made.append(bytearray(nbytes))
    return made[-1]

shard = sys.argv[1]
loader = stoker.Loader([shard], batch_size=4, image_size=16, batch_allocator=allocate,
                       max_batches=2, threads=2, shuffle=False)
it = iter(loader)
first = next(it)[0].clone()
assert made
for buf in made:
    for resize in (lambda: buf.extend(b"x" * (1 << 20)), lambda: buf.__delitem__(slice(None))):
        try:
            resize()
        except BufferError:
            continue
        print("resized a buffer the loader writes into")
        sys.exit(1)
# The batches are intact: the same pixels as a loader with its own memory.
ref = next(iter(stoker.Loader([shard], batch_size=4, image_size=16, shuffle=False)))[0]
assert torch.equal(first, ref)
rest = [im.clone() for im, _ in it]
assert len(rest) == 9
del it
loader.close()
del loader
gc.collect()
for buf in made:  # released with the loader: resizable again
    buf.extend(b"x")
print("done")
"""


def test_buffer_stays_exported_while_the_loader_uses_it(shard, clean_env_factory):
    """The loader keeps the allocator's buffer export (Py_buffer) until it
    frees the memory: a bytearray cannot be resized (its memory moved or
    freed) under the decode threads that write into it. In a subprocess: a
    resize that succeeds corrupts that process's heap."""
    proc = subprocess.run([sys.executable, "-c", RESIZE_BYTEARRAY, shard],
                          env=clean_env_factory(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stdout


def failing_loader(shard, allocate):
    return stoker.Loader([shard], batch_size=4, image_size=16, batch_allocator=allocate)


def test_allocator_that_raises_is_named_with_its_error(shard):
    def allocate(nbytes):
        raise RuntimeError("no pinned memory left on this node")

    ld = failing_loader(shard, allocate)
    for _ in range(2):  # and again: the same clear error, not "out of memory"
        with pytest.raises(stoker.Error) as info:
            next(iter(ld))
        message = str(info.value)
        assert "batch_allocator" in message and "no pinned memory left" in message, message
        assert "out of memory" not in message
        assert isinstance(info.value.__cause__, RuntimeError)
        assert not isinstance(info.value, MemoryError)


SHARED = bytearray(1 << 20)


@pytest.mark.parametrize("result, error, words", [
    (lambda n: bytearray(1), ValueError, ["1 bytes", "needs"]),
    (lambda n: SHARED, ValueError, ["already holds another batch buffer"]),
    (lambda n: bytes(n), TypeError, ["writable"]),
    (lambda n: 42, TypeError, ["int", "buffer"]),
    (lambda n: np.zeros((n, 2), dtype=np.uint8)[:, 0], TypeError, ["contiguous"]),
])
def test_allocator_returning_a_bad_buffer_says_what_is_wrong(shard, result, error, words):
    with pytest.raises(error) as info:
        for _ in failing_loader(shard, result):  # the first buffer may be fine: all of them
            pass
    message = str(info.value)
    assert "batch_allocator" in message and "out of memory" not in message, message
    for w in words:
        assert w in message, message


ALLOC_VS_RELEASE = r"""
import sys, threading
import numpy as np
import stoker

sys.setswitchinterval(1.0)  # the GIL changes hands only where this script lets it
inside, go_on, calls = threading.Event(), threading.Event(), [0]

def allocate(nbytes):
    calls[0] += 1
    if calls[0] == 2:  # the second buffer: wait until the main thread holds a batch to drop
        inside.set()
        go_on.wait(30)
    return np.zeros(nbytes, dtype=np.uint8)

c = stoker._ext._stoker.Loader([sys.argv[1]], transform="eval", batch_size=1, image_size=8,
                          threads=2, max_batches=4, batch_allocator=allocate)
batch = c.next()
assert inside.wait(30)  # a loader thread is in the allocator for batch 1's buffer
go_on.set()  # it now waits for the GIL, which this thread keeps while it drops batch 0
del batch
n = 1
while c.next() is not None:
    n += 1
assert n == 40, n
c.close()
print("done")
"""


def test_allocating_while_batches_are_released_does_not_deadlock(shard, clean_env_factory):
    """The allocator runs on a loader thread and takes the GIL; a batch is
    released (back into the ring) with the GIL held. The ring must not hold
    its lock while calling the allocator, or the two wait for each other."""
    proc = subprocess.run([sys.executable, "-c", ALLOC_VS_RELEASE, shard], env=clean_env_factory(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stdout


def test_pin_memory_without_cuda_warns_and_goes_on(shard):
    """As torch's DataLoader does: the same script runs on a machine without CUDA."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: pinned memory works here")  # not counted as passing
    with pytest.warns(UserWarning, match="no CUDA device"):
        loader = stoker.Loader([shard], pin_memory=True, image_size=16, threads=1)
    images, labels = next(iter(loader))
    assert images.shape[1:] == (3, 16, 16) and not images.is_pinned()
    loader.close()
