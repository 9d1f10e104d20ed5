# SPDX-License-Identifier: MIT
"""node_affinity as a loader resolves it (info()["ranks_per_node"]): the
default turns it on with a cache_dir and several nodes named by the
launcher, and the resolved options plan the same epoch in a process
without that environment (a Dask worker's)."""
import stoker

BASE = dict(batch_size=4, threads=1, rank=1, world_size=4, seed=3, epoch=2)


def keys(loader):
    out = []
    while (batch := loader.next()) is not None:
        out += [s["__key__"] for s in batch.samples()]
    loader.close()
    return out


def test_resolved_affinity_plans_the_same_elsewhere(even_shards, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    cached = dict(BASE, cache_dir=str(tmp_path / "cache"), cache_size=1 << 26)
    here = stoker._ext._stoker.Loader(even_shards, **cached)
    assert here.info()["ranks_per_node"] == 2
    assert stoker._ext._stoker.Loader(even_shards, **BASE).info()["ranks_per_node"] == 0
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # one node: nothing to keep apart
    assert stoker._ext._stoker.Loader(even_shards, **cached).info()["ranks_per_node"] == 0
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    elsewhere = stoker._ext._stoker.Loader(even_shards, **dict(BASE, node_affinity=1,
                                                          ranks_per_node=2))
    assert elsewhere.info()["ranks_per_node"] == 2
    plain = stoker._ext._stoker.Loader(even_shards, **BASE)
    mine, theirs, off = keys(here), keys(elsewhere), keys(plain)
    assert mine == theirs and mine != off
