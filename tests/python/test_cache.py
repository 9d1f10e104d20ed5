# SPDX-License-Identifier: MIT
"""The node cache from Python: cache_dir/cache_size reach the loader, the
second loader reads the cache only, and stats() reports it.
STOKER_CACHE_LOCAL=1 (test-only) makes the cache take local shards."""
import torch

import stoker


def epoch(loader):
    images, labels = [], []
    for im, lb in loader:
        images.append(im.clone())
        labels.append(lb.clone())
    return torch.cat(images), torch.cat(labels)


def test_second_loader_reads_the_cache(even_shards, tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_LOCAL", "1")
    kw = dict(batch_size=8, image_size=32, threads=2, transform="eval", shuffle=False)
    plain = epoch(stoker.Loader(even_shards, **kw))
    first = stoker.Loader(even_shards, cache_dir=tmp_path / "cache", cache_size=1 << 30, **kw)
    cached = epoch(first)
    stats = first.stats()
    assert (stats["cache_misses"], stats["cache_hits"]) == (len(even_shards), 0)
    second = stoker.Loader(even_shards, cache_dir=str(tmp_path / "cache"), cache_size=1 << 30,
                           **kw)
    again = epoch(second)
    stats = second.stats()
    assert (stats["cache_misses"], stats["cache_hits"]) == (0, len(even_shards))
    assert stats["cache_bytes_written"] == 0
    for a, b, c in zip(plain, cached, again):
        assert torch.equal(a, b) and torch.equal(a, c)
