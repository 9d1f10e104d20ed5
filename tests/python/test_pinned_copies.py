# SPDX-License-Identifier: MIT
"""pin_memory=True: a batch's buffer stays out of the loader's ring until the
GPU has copied it. `images.cuda(non_blocking=True)` only queues the copy; on
an H200 a ring buffer handed back as soon as the loop dropped the tensor was
rewritten by the decoders before its copy ran in 14 of 16 batches
(bench/gpu_resnet50.py's race check). Here a fake CUDA queue stands in for
the GPU: copies run only when an event after them is waited for, so they
run as late as a slow GPU would run them, and each copy checks that the
buffer still holds the batch the loop was given."""
import ctypes

import numpy as np
import torch

import stoker
from stoker.loader import pinned as _pinned


class FakeQueue:
    """A CUDA stream that runs its work only when an event after it is awaited."""

    def __init__(self):
        self.work = []   # queued callables, in stream order
        self.done = 0    # how many of them ran

    def run_until(self, position):
        while self.done < position:
            self.work[self.done]()
            self.done += 1


def fake_cuda(monkeypatch, queue):
    class Event:
        def record(self, stream=None):
            self.position = len(queue.work)

        def query(self):
            return queue.done >= self.position

        def synchronize(self):
            queue.run_until(self.position)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: None)
    monkeypatch.setattr(_pinned.torch.cuda, "Event", Event)
    # Ordinary memory for the ring: what is under test is when it is reused.
    monkeypatch.setattr(stoker.loader.loader, "_pinned_buffer",
                        lambda n: np.zeros(n, dtype=np.uint8))


def pinned_loader(shard, max_batches, **options):
    """10 batches of 4 an epoch, through the ring pin_memory=True sets up."""
    return stoker.Loader([shard], batch_size=4, image_size=16, threads=2, pin_memory=True,
                         max_batches=max_batches, **options)


def test_buffer_is_not_reused_before_its_copy_ran(noise_shard, monkeypatch):
    queue = FakeQueue()
    fake_cuda(monkeypatch, queue)
    copies = []

    def copy(pointer, expected):
        copies.append(ctypes.string_at(pointer, len(expected)) == expected)

    loader = pinned_loader(noise_shard, 3, shuffle=False)
    delivered = 0
    for epoch in range(2):
        loader.set_epoch(epoch)
        for images, labels in loader:
            # images.cuda(non_blocking=True): the copy is queued, not run.
            data = images.numpy().tobytes()
            queue.work.append(lambda p=images.data_ptr(), d=data: copy(p, d))
            delivered += 1
    del images, labels
    loader.close()  # waits for the copies still queued
    queue.run_until(len(queue.work))  # the GPU catches up (nothing left with the fix)
    assert delivered == 20 and len(copies) == 20
    assert all(copies), f"{copies.count(False)} of 20 copies read a rewritten buffer: {copies}"


def test_the_loop_waits_only_for_the_oldest_batch(noise_shard, monkeypatch):
    """With the GPU behind, at most max_batches - 1 buffers are held (one is
    left for the loader, so no BusyError); each wait is for the oldest."""
    queue = FakeQueue()
    fake_cuda(monkeypatch, queue)
    loader = pinned_loader(noise_shard, 3)
    for images, _ in loader:
        queue.work.append(lambda: None)
        assert len(loader._in_flight._held) <= 2
    assert queue.done >= 10 - 2  # all but the last two had to be waited for
    loader.close()
    assert queue.done == len(queue.work)


def test_buffers_are_let_go_once_the_gpu_has_passed(noise_shard, monkeypatch):
    queue = FakeQueue()
    fake_cuda(monkeypatch, queue)
    loader = pinned_loader(noise_shard, 4)
    for images, _ in loader:
        queue.work.append(lambda: None)
        queue.run_until(len(queue.work))  # a GPU that keeps up
    assert len(loader._in_flight._held) <= 1
    loader.close()
