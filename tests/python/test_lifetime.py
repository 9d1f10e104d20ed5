# SPDX-License-Identifier: MIT
"""Batch lifetime: held tensors stay valid and unchanged, holding too many
raises BusyError (no hang, no corruption), dropped ones go back to the
loader, and nothing grows over many epochs."""
import gc
from collections import deque

import pytest
import torch

import stoker


def loader(urls, **kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("image_size", 32)
    kw.setdefault("transform", "eval")
    kw.setdefault("shuffle", False)
    kw.setdefault("threads", 2)
    return stoker.Loader(urls, **kw)


def reference_epoch(urls, **kw):
    return [(im.clone(), lb.clone()) for im, lb in loader(urls, **kw)]


@pytest.mark.parametrize("max_batches", [2, 4])
def test_held_batches_stay_unchanged(even_shards, max_batches):
    """Keep each batch for max_batches - 1 further steps (the most the caller
    may hold while asking for the next one): it must not change meanwhile,
    as the loader goes on filling its other buffers."""
    ref = reference_epoch(even_shards)
    held = deque(maxlen=max_batches - 1)
    n = 0
    for images, labels in loader(even_shards, max_batches=max_batches):
        held.append((n, images, labels, images.clone(), labels.clone()))
        del images, labels
        for i, im, lb, im0, lb0 in held:
            assert torch.equal(im, im0), f"batch {i} changed while held, at step {n}"
            assert torch.equal(lb, lb0), f"labels of batch {i} changed while held, at step {n}"
            assert torch.equal(im, ref[i][0]) and torch.equal(lb, ref[i][1]), i
        n += 1
    assert n == len(ref) == 15


def test_holding_max_batches_raises_busy(even_shards):
    max_batches = 3
    ld = loader(even_shards, max_batches=max_batches)
    held = []
    it = iter(ld)
    for _ in range(max_batches):
        images, labels = next(it)
        held.append((images, labels, images.clone(), labels.clone()))
    del images, labels
    with pytest.raises(stoker.BusyError) as info:
        next(it)
    message = str(info.value)
    assert str(max_batches) in message and "batch" in message, message
    assert isinstance(info.value, stoker.Error)
    # Nothing held was touched.
    for i, (im, lb, im0, lb0) in enumerate(held):
        assert torch.equal(im, im0) and torch.equal(lb, lb0), i
    # Once they are dropped, a new epoch runs to the end.
    del held, info
    gc.collect()
    assert sum(im.shape[0] for im, _ in ld) == 120


def test_dropping_every_batch_with_max_batches_1(even_shards):
    """max_batches=1: the caller drops each batch before asking for the next,
    so the loader always has its one buffer back. BUG: Loader.__iter__ keeps
    the previous batch's tensors in its local variables `images`/`labels`
    while it calls next() for the following batch, so the previous batch is
    still "held" and next() raises BusyError on the second batch."""
    ld = loader(even_shards, max_batches=1)
    n = 0
    for images, labels in ld:
        n += images.shape[0]
        del images, labels
    assert n == 120


def test_holding_one_batch_with_max_batches_2(even_shards):
    """max_batches=2: keeping batch 0 while going through the rest (dropping
    each) holds at most 2 batches at any time. Fails for the same reason as
    above: the iterator's own reference to the previous batch counts."""
    ref = reference_epoch(even_shards)
    ld = loader(even_shards, max_batches=2)
    first = None
    n = 0
    for images, labels in ld:
        if first is None:
            first = (images, labels)
        n += 1
        del images, labels
    assert n == len(ref)
    assert torch.equal(first[0], ref[0][0]) and torch.equal(first[1], ref[0][1])


def test_tensors_outlive_the_loader(even_shards):
    """A tensor keeps its memory alive after the loader object is gone and
    after close()."""
    ref = reference_epoch(even_shards)
    ld = loader(even_shards)
    it = iter(ld)
    images, labels = next(it)
    images2, labels2 = next(it)
    ld.close()
    del it, ld
    gc.collect()
    garbage = [torch.full((8, 3, 32, 32), 7, dtype=torch.uint8) for _ in range(50)]
    assert torch.equal(images, ref[0][0]) and torch.equal(labels, ref[0][1])
    assert torch.equal(images2, ref[1][0]) and torch.equal(labels2, ref[1][1])
    del images, labels, images2, labels2, garbage
    gc.collect()


def test_closed_loader_refuses_to_iterate(even_shards):
    ld = loader(even_shards)
    ld.close()
    with pytest.raises(ValueError, match="closed"):
        next(iter(ld))


def vm_rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.serial  # RSS is measured
def test_memory_is_freed_when_batches_are_dropped(even_shards):
    ld = loader(even_shards, batch_size=16, image_size=224, dtype=torch.float32,
                transform="train", shuffle=True)
    rss, samples = {}, []
    for epoch in range(1, 11):
        n = 0
        for images, labels in ld:
            n += images.shape[0]
            assert labels.shape[0] == images.shape[0]
        del images, labels
        assert n == 120
        samples.append(ld.stats()["samples"])
        gc.collect()
        rss[epoch] = vm_rss_kib()
    assert samples == [120 * e for e in range(1, 11)], samples
    assert ld.stats()["batches"] == 10 * 8
    growth_mib = (rss[10] - rss[2]) / 1024
    assert growth_mib < 30, f"RSS grew by {growth_mib:.1f} MiB from epoch 2 to 10: {rss}"


REINIT = r"""
import sys
import stoker

urls = sys.argv[1:]
c = stoker._ext._stoker.Loader(urls, transform="eval", image_size=16, batch_size=4, shuffle=0)
held = c.next()
try:
    c.__init__(urls, transform="eval", image_size=16, batch_size=2)
except RuntimeError as e:
    assert "already" in str(e) or "in use" in str(e), e
else:
    print("__init__ replaced the loader under a held batch")
    sys.exit(1)
# The loader and the held batch are the ones from before.
assert c.info()["batch_size"] == 4 and held.size == 4
n = 1
while c.next() is not None:
    n += 1
assert n == 30, n
del held
c.close()
print("done")
"""


def test_init_again_is_refused(even_shards, clean_env_factory):
    """Calling __init__ again on a live C loader used to free it under the
    batches still held (a use-after-free when they are released): it is
    refused, and the loader goes on. In a subprocess: before the fix the
    release could crash the interpreter."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", REINIT, *even_shards], env=clean_env_factory(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stdout
