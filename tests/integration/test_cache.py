# SPDX-License-Identifier: MIT
"""The node cache (--cache-dir/--cache-size) through the CLI, with real processes.

Local shards are read in place unless STOKER_CACHE_LOCAL=1, a test-only switch
that makes the cache treat them like remote URLs, so these tests exercise the
cache without a server: the cache copies whatever byte stream the source gives.
STOKER_CACHE_TEST_FILL_DELAY_MS (also test-only) makes each fill sleep after it
starts, so that processes started together surely contend for the same shard.
"""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import RANK_ENV, TIMEOUT_S, assert_no_crash

LOCAL = {"STOKER_CACHE_LOCAL": "1"}
HEX_NAME = re.compile(r"^[0-9a-f]{32}$")


def cache_files(cache):
    """{name: size} of the regular files in the cache directory."""
    return {p.name: p.stat().st_size for p in Path(cache).iterdir() if p.is_file()}


def cached_shards(cache):
    return sorted(n for n in cache_files(cache) if HEX_NAME.match(n))


def temps(cache):
    return sorted(n for n in cache_files(cache) if n.startswith(".tmp."))


def proc_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in RANK_ENV}
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    env.update(extra or {})
    return env


def cache_args(cache, size):
    return ["--cache-dir", str(cache), "--cache-size", str(size)]


def test_second_run_reads_only_the_cache(tmp_path, dataset, run, bench_json):
    shards = dataset([7, 3, 9, 5])
    pattern = str(tmp_path / "shard-{0..3}.tar")
    cache = tmp_path / "cache"
    uncached = run(["ls", pattern])
    assert uncached.returncode == 0, uncached.stderr

    first = bench_json(cache_args(cache, "64M") + ["--epochs", "2", pattern], env=LOCAL)
    assert (first["cache_misses"], first["cache_hits"]) == (4, 4)
    assert first["cache_bytes_written"] == sum(p.stat().st_size for p in shards)
    assert first["samples"] == 2 * 24
    assert len(cached_shards(cache)) == 4
    # Each shard's (redacted) URL sits next to it, for people looking at the
    # directory, with a digest of the full URL that catches collisions.
    records = [Path(cache, n + ".url").read_text().split("\n") for n in cached_shards(cache)]
    assert sorted(r[0] for r in records) == sorted(str(p) for p in shards)
    assert all(len(r) == 3 and re.fullmatch("[0-9a-f]{16}", r[1]) and r[2] == ""
               for r in records), records

    # Break the upstream: a run that still succeeds, with the same samples,
    # read nothing from it.
    for p in shards:
        p.write_bytes(b"\0garbage" * 100)
    second = bench_json(cache_args(cache, "64M") + [pattern], env=LOCAL)
    assert (second["cache_misses"], second["cache_hits"]) == (0, 4)
    assert second["cache_bytes_written"] == 0
    assert second["samples"] == 24
    cached = run(["ls", *cache_args(cache, "64M"), pattern], env=LOCAL)
    assert cached.returncode == 0, cached.stderr
    assert cached.stdout == uncached.stdout


def test_local_paths_are_read_in_place(tmp_path, dataset, bench_json):
    dataset([4, 4])
    cache = tmp_path / "cache"
    env = {"STOKER_CACHE_LOCAL": ""}
    report = bench_json(cache_args(cache, "1M") + [str(tmp_path / "shard-{0..1}.tar")], env=env)
    assert report["samples"] == 8
    assert (report["cache_hits"], report["cache_misses"]) == (0, 0)
    assert cached_shards(cache) == []


def test_cache_options_are_checked(tmp_path, dataset, run):
    dataset([2])
    shard = str(tmp_path / "shard-0.tar")
    for size in ("-5", "12Q", "G", ""):
        proc = run(["bench", "--cache-dir", str(tmp_path / "c"), "--cache-size", size, shard])
        assert proc.returncode == 2, (size, proc.stderr)
        assert "--cache-size" in proc.stderr
    # 0 is cache_size's default, "no cache", as in the library and Python:
    # the loader refuses it with a cache_dir.
    proc = run(["bench", "--cache-dir", str(tmp_path / "c"), "--cache-size", "0", shard])
    assert proc.returncode == 1 and "needs a cache_size above 0" in proc.stderr, proc.stderr
    proc = run(["bench", "--cache-dir", str(tmp_path / "c"), shard])
    assert proc.returncode == 1
    assert "needs a cache_size" in proc.stderr
    proc = run(["bench", *cache_args(tmp_path / "no" / "such" / "dir", "1M"), shard])
    assert proc.returncode == 1
    assert "cache_dir" in proc.stderr and "no/such/dir" in proc.stderr


def start_bench(stoker, args, extra_env):
    return subprocess.Popen([str(stoker), "bench", "--json", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=proc_env(extra_env), stdin=subprocess.DEVNULL)


def finish(procs, deadline_s=TIMEOUT_S):
    """Wait for every process; return their (returncode, stdout, stderr)."""
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert_no_crash(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
        out.append((p.returncode, stdout, stderr))
    return out


def test_four_processes_download_each_shard_once(tmp_path, dataset, stoker):
    sizes = [6, 4, 8, 5, 7, 3, 9, 2]
    shards = dataset(sizes)
    cache = tmp_path / "cache"
    pattern = str(tmp_path / "shard-{0..7}.tar")
    env = dict(LOCAL, STOKER_CACHE_TEST_FILL_DELAY_MS="50")
    procs = [start_bench(stoker, cache_args(cache, "64M") + ["--seed", str(i), pattern], env)
             for i in range(4)]
    reports = []
    for rc, stdout, stderr in finish(procs):
        assert rc == 0, stderr
        reports.append(json.loads(stdout))
    assert all(r["samples"] == sum(sizes) for r in reports)
    assert sum(r["cache_misses"] for r in reports) == len(shards)
    assert sum(r["cache_hits"] for r in reports) == 3 * len(shards)
    assert sum(r["cache_bytes_written"] for r in reports) == sum(p.stat().st_size for p in shards)
    assert len(cached_shards(cache)) == len(shards)
    assert temps(cache) == []


def test_processes_stay_within_cache_size(tmp_path, dataset, stoker):
    """A cache for 5 of 8 shards, 4 processes reading 1 shard at a time: they
    evict each other's shards but never the ones being read, and the
    directory never holds more than cache_size."""
    shards = dataset([40] * 8, name="big-{}.tar")
    biggest = max(p.stat().st_size for p in shards)
    limit = 5 * (biggest + 1024)
    cache = tmp_path / "cache"
    args = cache_args(cache, limit) + ["--shards-in-flight", "1", "--threads", "1",
                                       str(tmp_path / "big-{0..7}.tar")]
    procs = [start_bench(stoker, args + ["--seed", str(i)], LOCAL) for i in range(4)]
    peak = 0
    while any(p.poll() is None for p in procs):
        try:
            peak = max(peak, sum(cache_files(cache).values()))
        except FileNotFoundError:  # a file went between listing and stat
            pass
        time.sleep(0.002)
    reports = []
    for rc, stdout, stderr in finish(procs):
        assert rc == 0, stderr
        reports.append(json.loads(stdout))
    assert all(r["samples"] == 320 for r in reports)
    assert sum(cache_files(cache).values()) <= limit
    assert peak <= limit
    assert sum(r["cache_evictions"] for r in reports) > 0
    assert sum(r["cache_misses"] for r in reports) >= 8
    assert temps(cache) == []


def test_cache_too_small_is_a_clear_error(tmp_path, make_shard, run):
    """Shards larger than the loader's read-ahead (8 MiB per shard) stay open
    until the sequencer, which interleaves all four, has taken them: so four
    in flight surely need room for four, and a cache for two and a half
    fails, under either bad-input policy (the shards are fine)."""
    shards = [make_shard(tmp_path / f"shard-{s}.tar",
                         [{"__key__": f"{s}{i:04d}", "bin": bytes([i % 251]) * 100_000}
                          for i in range(100)])
              for s in range(4)]
    size = max(p.stat().st_size for p in shards)
    pattern = str(tmp_path / "shard-{0..3}.tar")
    for policy in ("fail", "skip"):
        cache = tmp_path / f"cache-{policy}"
        proc = run(["bench", *cache_args(cache, size * 5 // 2), "--shards-in-flight", "4",
                    "--threads", "4", "--on-error", policy, pattern], env=LOCAL)
        assert proc.returncode == 1, (policy, proc.stdout)
        assert "is smaller than the shards in flight" in proc.stderr
        assert "raise cache_size or lower shards_in_flight" in proc.stderr
        assert sum(cache_files(cache).values()) <= size * 5 // 2
        assert temps(cache) == []
    # With one shard in flight the same cache works.
    proc = run(["bench", *cache_args(cache, size * 5 // 2), "--shards-in-flight", "1", pattern],
               env=LOCAL)
    assert proc.returncode == 0, proc.stderr
    # One shard larger than the whole cache (alone, or the message may name
    # the other fills that hold part of it).
    proc = run(["bench", *cache_args(tmp_path / "tiny", size // 2), "--shards-in-flight", "1",
                pattern], env=LOCAL)
    assert proc.returncode == 1
    assert re.search(r"shard-\d\.tar: shard is larger than cache_size", proc.stderr), proc.stderr


def test_killed_download_leaves_no_partial_shard(tmp_path, make_shard, samples_factory, stoker,
                                                 run):
    """The upstream is a FIFO the test writes half a shard into, then the
    process is killed: only a temp file may remain, and the next run cleans
    it up and caches the complete shard under the same URL."""
    samples = samples_factory(50, size=lambda i, j: 3000 + i)
    real = make_shard(tmp_path / "real.tar", samples)
    data = real.read_bytes()
    url = tmp_path / "shard.tar"
    os.mkfifo(url)
    cache = tmp_path / "cache"
    proc = subprocess.Popen([str(stoker), "ls", *cache_args(cache, "64M"), str(url)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=proc_env(LOCAL), stdin=subprocess.DEVNULL)
    fifo = None
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while fifo is None:  # opening for writing fails with ENXIO until stoker reads
            try:
                fifo = os.open(url, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.01)
        os.set_blocking(fifo, True)
        os.write(fifo, data[:len(data) // 2])
        while not temps(cache):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)  # let it copy what it can
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        if fifo is not None:
            os.close(fifo)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert len(temps(cache)) == 1
    assert cached_shards(cache) == []
    assert not [n for n in cache_files(cache) if n.endswith(".url")]

    url.unlink()
    url.write_bytes(data)
    expected = run(["ls", str(real)])
    again = run(["ls", *cache_args(cache, "64M"), str(url)], env=LOCAL)
    assert again.returncode == 0, again.stderr
    assert again.stdout == expected.stdout
    assert temps(cache) == []
    (name,) = cached_shards(cache)
    assert Path(cache, name).read_bytes() == data


@pytest.mark.parametrize("where", [".lock", "H.lock", "H"])
def test_planted_symlink_is_a_clear_error(tmp_path, dataset, stoker, where):
    """The cache directory is reachable by whoever may write to it: a
    symbolic link planted at the cache-wide lock, a shard's fill lock or a
    shard's name makes the run fail at once, naming the file, instead of
    spinning forever or creating the link's target outside the cache."""
    shard = dataset([3])[0]
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    proc = subprocess.run([str(stoker), "ls", *cache_args(cache, "16M"), str(shard)],
                          capture_output=True, text=True, env=proc_env(LOCAL), timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    (hex_name,) = cached_shards(cache)
    for p in cache.iterdir():
        p.unlink()
    target = tmp_path / "outside-target"
    name = where.replace("H", hex_name)
    (cache / name).symlink_to(target)
    t = time.monotonic()
    try:
        proc = subprocess.run([str(stoker), "ls", *cache_args(cache, "16M"), str(shard)],
                              capture_output=True, text=True, env=proc_env(LOCAL), timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"stoker still running after 20 s with a symlink at {name}")
    assert_no_crash(proc)
    assert time.monotonic() - t < 20
    assert proc.returncode == 1, proc.stdout
    assert f"{cache}/{name}" in proc.stderr and "symbolic link" in proc.stderr, proc.stderr
    assert not target.exists()
