# SPDX-License-Identifier: MIT
"""stoker.Samples: raw WebDataset samples as dicts, alone and under a torch
DataLoader with worker processes (each sample exactly once)."""
import collections
import warnings

import pytest
import torch

import stoker


def expected_dict(sample):
    return {"__key__": sample.key, "__url__": sample.url, "cls": sample.cls, "jpg": sample.jpg}


def check_samples(got, dataset, urls_of=None):
    """got holds every sample of dataset exactly once, with the tar bytes."""
    by_key = {s.key: s for s in dataset}
    counts = collections.Counter(d["__key__"] for d in got)
    dup = [k for k, c in counts.items() if c > 1]
    assert not dup, f"samples seen more than once: {dup[:10]}"
    missing = sorted(set(by_key) - set(counts))
    assert not missing, f"{len(missing)} samples never seen: {missing[:10]}"
    assert len(got) == len(dataset)
    for d in got:
        s = by_key[d["__key__"]]
        want = expected_dict(s)
        if urls_of is not None:
            want["__url__"] = urls_of[s.key]
        assert set(d) == set(want), (sorted(d), sorted(want))
        for k in want:
            assert d[k] == want[k], f"{s.key}: {k} differs from the tar member"
        assert isinstance(d["jpg"], bytes) and isinstance(d["__key__"], str)


def test_samples_in_storage_order(even_shards, dataset):
    got = list(stoker.Samples(even_shards, shuffle=False))
    assert [d["__key__"] for d in got] == [s.key for s in dataset]
    check_samples(got, dataset)


@pytest.mark.parametrize("workers,shuffle,which", [
    (2, False, "uneven"), (3, False, "uneven"), (2, True, "uneven"), (3, True, "even")])
def test_dataloader_workers_see_every_sample_once(even_shards, dataset, uneven_shards,
                                                  uneven_dataset, workers, shuffle, which):
    urls, samples = (uneven_shards, uneven_dataset) if which == "uneven" else (even_shards, dataset)
    ds = stoker.Samples(urls, shuffle=shuffle, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "suggested max number of worker" on small machines
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, timeout=60)
        got = list(dl)
    check_samples(got, samples)
    if not shuffle:
        # Each worker reads whole shards in storage order.
        by_url = collections.defaultdict(list)
        for d in got:
            by_url[d["__url__"]].append(d["__key__"])
        for url, keys in by_url.items():
            assert keys == [s.key for s in samples if s.url == url], url


def test_ranks_and_workers_split_the_samples(uneven_shards, uneven_dataset):
    got = []
    for rank in range(2):
        ds = stoker.Samples(uneven_shards, shuffle=True, rank=rank, world_size=2)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, timeout=60)
        got.extend(dl)
    check_samples(got, uneven_dataset)


def test_samples_set_epoch(uneven_shards, uneven_dataset):
    ds = stoker.Samples(uneven_shards, shuffle=True, seed=9)
    ds.set_epoch(3)
    a = [d["__key__"] for d in ds]
    ds.set_epoch(3)
    b = [d["__key__"] for d in ds]
    ds.set_epoch(4)
    c = [d["__key__"] for d in ds]
    assert a == b
    assert a != c and sorted(a) == sorted(c) == sorted(s.key for s in uneven_dataset)
