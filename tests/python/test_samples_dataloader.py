# SPDX-License-Identifier: MIT
"""stoker.Samples as a DataLoader user writes it: samples_per_rank counts a
rank's samples whatever num_workers is, every new iteration of the same
object is a new epoch (as WebDataset's), set_epoch() reaches persistent
workers, too few shards for the workers is a clear error, and .cls can come
as an int."""
import collections
import warnings

import pytest
import torch

import stoker

TIMEOUT_S = 60


def loader(ds, workers, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "suggested max number of worker" on small machines
        return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                           timeout=TIMEOUT_S if workers else 0, **kw)


def keys(iterable):
    return [d["__key__"] for d in iterable]


@pytest.mark.parametrize("workers", [0, 1, 2, 4])
@pytest.mark.parametrize("per_rank", [50, 120, 200])
def test_samples_per_rank_is_per_rank_not_per_worker(even_shards, dataset, workers, per_rank):
    """Shards of equal size (6 x 20): the rank's count exactly, and no sample
    twice while the shards hold enough (4 workers hold 2, 2, 1 and 1 shards)."""
    ds = stoker.Samples(even_shards, samples_per_rank=per_rank, seed=4)
    got = keys(loader(ds, workers))
    assert len(got) == per_rank
    counts = collections.Counter(got)
    if per_rank <= len(dataset):
        assert max(counts.values()) == 1, "a sample came twice within the rank's quota"
    else:  # cycles through the rank's shards: every sample at least once
        assert set(counts) == {s.key for s in dataset}


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("per_rank", [1, 50, 119, 300])
def test_samples_per_rank_uneven_shards(uneven_shards, workers, per_rank):
    ds = stoker.Samples(uneven_shards, samples_per_rank=per_rank, seed=4)
    assert len(keys(loader(ds, workers))) == per_rank


def test_samples_per_rank_with_ranks_and_workers(even_shards):
    got = []
    for rank in range(2):
        ds = stoker.Samples(even_shards, samples_per_rank=33, rank=rank, world_size=2)
        mine = keys(loader(ds, 3))
        assert len(mine) == 33 and len(set(mine)) == 33
        got += mine
    assert len(set(got)) == 66, "the ranks share samples"


def test_a_rank_reads_the_same_shards_whatever_num_workers(even_shards):
    def urls(rank, workers):
        ds = stoker.Samples(even_shards, rank=rank, world_size=2)
        return {d["__url__"] for d in loader(ds, workers)}
    for rank in range(2):
        assert urls(rank, 0) == urls(rank, 3)


def test_fewer_samples_than_workers(uneven_shards):
    ds = stoker.Samples(uneven_shards, samples_per_rank=2)
    assert len(keys(loader(ds, 3))) == 2


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True)])
def test_each_iteration_is_a_new_epoch(uneven_shards, uneven_dataset, workers, persistent):
    ds = stoker.Samples(uneven_shards, seed=7)
    dl = loader(ds, workers, persistent_workers=persistent)
    epochs = [keys(dl) for _ in range(3)]
    everything = sorted(s.key for s in uneven_dataset)
    assert all(sorted(e) == everything for e in epochs)
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2] and epochs[0] != epochs[2]
    # The same epochs as set_epoch(0), (1), (2) on a fresh object.
    for epoch, got in enumerate(epochs):
        fresh = stoker.Samples(uneven_shards, seed=7)
        fresh.set_epoch(epoch)
        assert keys(loader(fresh, workers)) == got, epoch


def test_breaking_out_still_moves_to_the_next_epoch(uneven_shards):
    ds = stoker.Samples(uneven_shards, seed=7)
    dl = loader(ds, 2)
    for _ in dl:
        break
    second = keys(dl)
    fresh = stoker.Samples(uneven_shards, seed=7)
    fresh.set_epoch(1)
    assert second == keys(loader(fresh, 2))


@pytest.mark.parametrize("persistent", [False, True])
def test_set_epoch_reaches_the_workers(uneven_shards, persistent):
    """The usual loop: set_epoch(e) before each epoch, persistent or not."""
    ds = stoker.Samples(uneven_shards, seed=3)
    dl = loader(ds, 2, persistent_workers=persistent)
    got = {}
    for epoch in (4, 5, 5, 2):
        ds.set_epoch(epoch)
        order = keys(dl)
        assert got.setdefault(epoch, order) == order, f"epoch {epoch} came out differently"
    assert len({tuple(order) for order in got.values()}) == 3
    for epoch, order in got.items():
        fresh = stoker.Samples(uneven_shards, seed=3)
        fresh.set_epoch(epoch)
        assert keys(loader(fresh, 2)) == order, epoch
    # After set_epoch(e), iterating on without it goes to e + 1, e + 2.
    ds.set_epoch(4)
    assert [keys(dl) for _ in range(2)] == [got[4], got[5]]


def test_spawned_workers(uneven_shards):
    ds = stoker.Samples(uneven_shards, seed=3, samples_per_rank=40)
    dl = loader(ds, 2, multiprocessing_context="spawn", persistent_workers=True)
    first, second = keys(dl), keys(dl)
    assert len(first) == len(second) == 40 and first != second
    ds.set_epoch(0)
    assert keys(dl) == first


def test_fewer_shards_than_dataloader_workers(uneven_shards):
    ds = stoker.Samples(uneven_shards[:2])
    with pytest.raises(stoker.PlanError) as info:
        keys(loader(ds, 3))
    message = str(info.value)
    assert "2 shard(s)" in message and "3 DataLoader workers" in message, message
    assert "num_workers" in message, message
    ds = stoker.Samples(uneven_shards[:4], rank=1, world_size=2)
    with pytest.raises(stoker.PlanError, match="2 ranks x 3 DataLoader workers"):
        keys(loader(ds, 3))


def test_cls_as_int(uneven_shards, uneven_dataset):
    labels = {s.key: s.label for s in uneven_dataset}
    raw = list(stoker.Samples(uneven_shards, shuffle=False))
    assert all(isinstance(d["cls"], bytes) for d in raw)  # WebDataset's default
    ints = list(loader(stoker.Samples(uneven_shards, decode_cls=True), 2))
    assert len(ints) == len(labels)
    assert all(type(d["cls"]) is int and d["cls"] == labels[d["__key__"]] for d in ints)
    assert all(isinstance(d["jpg"], bytes) for d in ints)


def test_cls_not_an_integer(tmp_path, write_shard, uneven_dataset):
    samples = uneven_dataset[:3]
    samples[1] = samples[1]._replace(cls=b"cat")
    path = write_shard(tmp_path / "words.tar", samples)
    with pytest.raises(stoker.DataError) as info:
        list(stoker.Samples([path], shuffle=False, decode_cls=True))
    assert path in str(info.value) and samples[1].key in str(info.value), str(info.value)
    got = list(stoker.Samples([path], shuffle=False, decode_cls=True, on_error="skip"))
    assert [d["__key__"] for d in got] == [samples[0].key, samples[2].key]
