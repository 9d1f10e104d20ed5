# SPDX-License-Identifier: MIT
"""Pinned batch buffers stay out of the loader's ring until the GPU has read them.

With pin_memory=True, `images.cuda(non_blocking=True)` returns before the copy
has read the batch: the copy waits in the CUDA stream behind the work queued
before it. The images tensor is a view of one of the loader's ring buffers, and
the buffer went back to the ring as soon as the loop dropped the tensor, so a
decode thread could overwrite it while its copy was still queued: the GPU then
trained on parts of a later batch (bench/gpu_resnet50.py's race check). Torch's
own pinned batches are safe because its host allocator reuses a block only
after the copies recorded on it are done; the ring's buffers are never freed,
so the loader has to wait itself.

When the loop asks for the next batch it has queued the copy of the last one
(docs/python.md's loop, the copy on the current stream), so an event recorded then on
the current stream passes once that copy is done; the last batch's buffer is
held until it has. A copy on another stream must be waited for by the current
stream before the next batch is asked for (or the batch kept until then).
"""
import collections

import torch


class InFlight:
    """Buffers of batches whose copies to the GPU may not have run yet."""

    def __init__(self, max_batches):
        # Holding max_batches buffers would leave the loader none to deliver
        # (stoker.BusyError); at that depth the loop waits for the oldest.
        self._limit = max(1, max_batches - 1)
        self._held = collections.deque()

    def asked_next(self, buffer):
        """The loop asks for the next batch: hold buffer until the GPU has
        passed this point of the current stream; let go of those it passed."""
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream())
        self._held.append((event, buffer))
        while self._held and (len(self._held) > self._limit or self._held[0][0].query()):
            self._let_go_of_oldest()

    def drain(self):
        """Wait for every held buffer's copy (the loader is closing)."""
        while self._held:
            self._let_go_of_oldest()

    def _let_go_of_oldest(self):
        event, buffer = self._held.popleft()
        event.synchronize()  # before the buffer goes: decoders write into it at once
        del buffer
