# SPDX-License-Identifier: MIT
"""len(loader) against what an epoch yields, and epochs: set_epoch
reshuffles, the same epoch reproduces, the default epoch advances."""
import math

import pytest
import torch

import stoker


def train_loader(urls, **kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("image_size", 32)
    kw.setdefault("threads", 2)
    return stoker.Loader(urls, transform="train", **kw)


def epoch(loader):
    images, labels = [], []
    for im, lb in loader:
        images.append(im.clone())
        labels.append(lb.clone())
    return torch.cat(images), torch.cat(labels)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("samples_per_rank", [8, 37, 48, 59, 83, 200])
def test_len_matches_batches_yielded(uneven_shards, samples_per_rank, drop_last):
    batch = 8
    expected = samples_per_rank // batch if drop_last else math.ceil(samples_per_rank / batch)
    for rank in range(2):
        ld = train_loader(uneven_shards, batch_size=batch, rank=rank, world_size=2,
                          samples_per_rank=samples_per_rank, drop_last=drop_last)
        assert len(ld) == expected
        for ep in range(2):  # the second epoch too (the epoch counter moved on)
            sizes = [im.shape[0] for im, _ in ld]
            assert len(sizes) == len(ld), (rank, ep, sizes)
            assert all(s == batch for s in sizes[:-1]), sizes
            total = expected * batch if drop_last else samples_per_rank
            assert sum(sizes) == total, (rank, ep, sizes)
            assert ld.stats()["samples"] == total * (ep + 1)


def test_len_without_samples_per_rank_counts_the_shards(even_shards):
    """It was a TypeError: len() now builds and remembers the index itself
    (test_habits2.py checks that it is built once)."""
    ld = train_loader(even_shards)
    assert len(ld) == 120 // 8 == sum(1 for _ in ld)


def test_set_epoch_reshuffles_and_reproduces(uneven_shards):
    ld = train_loader(uneven_shards, seed=3)
    ld.set_epoch(5)
    im5, lb5 = epoch(ld)
    ld.set_epoch(6)
    im6, lb6 = epoch(ld)
    ld.set_epoch(5)
    im5b, lb5b = epoch(ld)
    assert torch.equal(lb5, lb5b) and torch.equal(im5, im5b), "epoch 5 did not reproduce"
    assert len(lb5) == len(lb6) == 120
    assert sorted(lb5.tolist()) == sorted(lb6.tolist())  # same samples ...
    assert lb5.tolist() != lb6.tolist(), "set_epoch did not change the order"  # ... new order
    # Another loader with the same seed gives the same epoch; another seed does not.
    other = train_loader(uneven_shards, seed=3)
    other.set_epoch(5)
    im, lb = epoch(other)
    assert torch.equal(lb, lb5) and torch.equal(im, im5)
    other = train_loader(uneven_shards, seed=4)
    other.set_epoch(5)
    assert epoch(other)[1].tolist() != lb5.tolist()


def test_threads_do_not_change_the_sequence(uneven_shards):
    a = epoch(train_loader(uneven_shards, seed=1, threads=1))
    b = epoch(train_loader(uneven_shards, seed=1, threads=2))
    assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])


def test_default_epoch_advances_after_a_full_iteration(uneven_shards):
    ld = train_loader(uneven_shards, seed=2)
    first = epoch(ld)
    second = epoch(ld)
    assert first[1].tolist() != second[1].tolist()
    ref = train_loader(uneven_shards, seed=2)
    ref.set_epoch(0)
    e0 = epoch(ref)
    ref.set_epoch(1)
    e1 = epoch(ref)
    assert torch.equal(first[0], e0[0]) and torch.equal(first[1], e0[1])
    assert torch.equal(second[0], e1[0]) and torch.equal(second[1], e1[1])


def test_stats_tell_where_time_goes(even_shards):
    """stats() carries per-stage times: the image stages fit in decode_ns,
    and the time spent waiting inside next() is at most the wall time."""
    import time
    ld = stoker.Loader(even_shards, batch_size=8, image_size=32, transform="train",
                       dtype="float32", threads=1)
    start = time.monotonic()
    for _ in ld:
        pass
    wall = time.monotonic() - start
    s = ld.stats()
    ld.close()
    assert s["read_ns"] > 0
    assert s["image_decode_ns"] > 0 and s["image_resample_ns"] > 0
    # the conversion to float32 runs inside the resize's last pass and counts there
    assert s["image_convert_ns"] == 0
    assert s["image_decode_ns"] + s["image_resample_ns"] <= s["decode_ns"]
    assert 0 < s["wait_ns"] <= wall * 1e9


def test_report_tells_input_bound_from_consumer_bound(even_shards):
    """A loop that takes its batches as fast as they come is input-bound and
    image decoding limits it; one that sleeps 0.4 s per batch is not. (Its
    first batch waits for the shuffle's first window, here the whole epoch
    of 120 photos read: about 0.1 s on a loaded machine, a few percent of
    nine steps.)"""
    import time
    kw = dict(batch_size=8, image_size=32, transform="train", threads=1)
    fast = stoker.Loader(even_shards, **kw)
    for _ in fast:
        pass
    text = fast.report()
    fast.close()
    assert text.startswith("input-bound: the caller waited for batches"), text
    assert "verdict: image decoding is the limit" in text, text

    slow = stoker.Loader(even_shards, **kw)
    for step, _ in enumerate(slow):
        time.sleep(0.4)
        if step == 8:
            break
    text = slow.report()
    slow.close()
    assert text.startswith("not input-bound"), text
    assert "verdict: the consumer, not the input, sets the pace" in text, text
