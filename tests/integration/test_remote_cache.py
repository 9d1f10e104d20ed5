# SPDX-License-Identifier: MIT
"""The node cache in front of a real nginx: the access log is the judge.

With the cache on, the first epoch fetches each shard once and the second
fetches nothing; four processes started together on one cache directory
fetch each shard once between them; samples equal the local shards'."""
import collections
import subprocess
import time
import urllib.request

import pytest

from conftest import make_samples, write_shard
from servers import DelayProxy, Nginx

N_SHARDS = 6
SIZES = lambda i, j: 3000 + (i * 389 + j * 97) % 20000  # noqa: E731


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache-http-data")
    return [write_shard(root / f"shard-{i}.tar", make_samples(20, start=20 * i, size=SIZES))
            for i in range(N_SHARDS)]


@pytest.fixture(scope="module")
def nginx(shards, tmp_path_factory):
    with Nginx(shards[0].parent, tmp_path_factory.mktemp("nginx-cache")) as server:
        yield server


def gets(nginx):
    return collections.Counter(u for m, u, s, *_ in nginx.access_log() if m == "GET")


def test_second_epoch_from_cache_does_no_network_io(bench_json, nginx, shards, tmp_path):
    urls = [nginx.url(p.name) for p in shards]
    cache = ["--cache-dir", str(tmp_path / "cache"), "--cache-size", "64M"]
    args = ["--batch-size", "8", "--seed", "3"]
    local = bench_json([*args, *shards])
    nginx.clear_log()
    first = bench_json([*args, *cache, *urls])
    assert gets(nginx) == {f"/{p.name}": 1 for p in shards}
    assert first["cache_misses"] == N_SHARDS and first["cache_hits"] == 0
    nginx.clear_log()
    second = bench_json([*args, "--epochs", "2", *cache, *urls])
    assert gets(nginx) == {}, "the cache must serve every shard of both epochs"
    assert second["cache_misses"] == 0 and second["cache_hits"] == 2 * N_SHARDS
    assert first["member_bytes"] == local["member_bytes"]
    assert second["samples"] == 2 * local["samples"]


def test_same_samples_through_the_cache(run, nginx, shards, tmp_path):
    urls = [nginx.url(p.name) for p in shards]
    cache = ["--cache-dir", str(tmp_path / "cache"), "--cache-size", "64M"]
    local = run(["ls", *shards])
    cold = run(["ls", *cache, *urls])
    warm = run(["ls", *cache, *urls])
    assert local.returncode == cold.returncode == warm.returncode == 0
    assert cold.stdout == warm.stdout == local.stdout


def test_four_processes_download_each_shard_once(stoker, nginx, shards, tmp_path):
    urls = [nginx.url(p.name) for p in shards]
    nginx.clear_log()
    cmd = [str(stoker), "bench", "--json", "--cache-dir", str(tmp_path / "cache"),
           "--cache-size", "64M", "--seed"]
    procs = [subprocess.Popen([*cmd, str(seed), *urls], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert gets(nginx) == {f"/{p.name}": 1 for p in shards}


def test_cold_cache_first_batch_does_not_wait_for_the_download(bench_json, nginx, shards,
                                                               tmp_path):
    """Over a thin link (8 MB/s, one 16 MB shard: 2 s to download), a miss
    streams: the first batch of a cold cache arrives in a fraction of the
    download time, as without the cache, and the shard is still cached
    whole. Before streaming it came after the whole download."""
    big = write_shard(shards[0].parent / "big.tar",
                      [{"__key__": f"big{i:05d}", "bin": bytes([i % 251]) * 65536}
                       for i in range(250)])
    args = ["--batch-size", "8", "--no-shuffle", "--shards-in-flight", "1", "--threads", "1"]
    cache = ["--cache-dir", str(tmp_path / "cache"), "--cache-size", "64M"]
    with DelayProxy(nginx.port, delay_s=0.005, rate=8e6) as proxy:
        url = proxy.url(big.name)
        t = time.monotonic()
        with urllib.request.urlopen(url, timeout=60) as r:
            assert len(r.read()) == big.stat().st_size
        download_s = time.monotonic() - t
        uncached = bench_json([*args, url])
        cold = bench_json([*args, *cache, url])
    assert download_s > 1.5, download_s  # the link is as thin as meant
    assert cold["cache_misses"] == 1 and cold["samples"] == 250
    assert cold["cache_bytes_written"] == big.stat().st_size
    assert cold["first_batch_seconds"] < 0.5 * download_s, (cold, download_s)
    assert cold["first_batch_seconds"] < uncached["first_batch_seconds"] + 0.5, (cold, uncached)
    warm = bench_json([*args, *cache, url])
    assert warm["cache_hits"] == 1 and warm["cache_misses"] == 0
