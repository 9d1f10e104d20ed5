# SPDX-License-Identifier: MIT
"""Observability: shuffle quality (k_eff) against a brute-force count, rates
between snapshots, stoker.tensorboard() with a recording writer, and the
Prometheus endpoint scraped over HTTP and parsed with prometheus_client."""
import io
import math
import re
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

import stoker
from stoker._ext import _stoker

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def synthetic_shards(tmp_path, sizes):
    """Shards of tiny raw samples: shard i holds sizes[i] samples."""
    paths = []
    for i, n in enumerate(sizes):
        path = tmp_path / f"syn-{i:04d}.tar"
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
            for k in range(n):
                data = f"{i}/{k}".encode()
                ti = tarfile.TarInfo(f"s{i:04d}_{k:05d}.txt")
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
        paths.append(str(path))
    return paths


def read_epoch(urls, **options):
    """Every batch of one epoch as a list of the shard (URL) of each sample,
    and the loader's counters at its end."""
    c = _stoker.Loader(urls, transform="none", **options)
    batches = []
    while (b := c.next()) is not None:
        batches.append([s["__url__"] for s in b.samples()])
        del b
    stats = c.stats()
    c.close()
    return batches, stats


def brute_k_eff(batches):
    pairs = same = 0
    for batch in batches:
        b = len(batch)
        pairs += b * (b - 1)
        same += sum(n * (n - 1) for n in Counter(batch).values())
    return pairs, same


def perfect_k(sizes):
    n = sum(sizes)
    return n * (n - 1) / sum(m * (m - 1) for m in sizes)


SIZES = (7, 30, 1, 12, 25, 0, 19, 8, 40, 3)


@pytest.mark.parametrize("options", [
    dict(batch_size=5, shards_in_flight=1, shuffle_buffer=0),
    dict(batch_size=8, shards_in_flight=3, shuffle_buffer=20, seed=4),
    dict(batch_size=16, shards_in_flight=10, shuffle_buffer=1000, seed=9, drop_last=1),
    dict(batch_size=7, shuffle=0),
])
def test_k_eff_equals_brute_force_count(tmp_path, options):
    urls = synthetic_shards(tmp_path, SIZES)
    batches, stats = read_epoch(urls, **options)
    pairs, same = brute_k_eff(batches)
    assert (stats["shuffle_pairs"], stats["shuffle_shard_pairs"]) == (pairs, same)
    r = stoker.rates(stats)
    assert r["shuffle_k_eff"] == pytest.approx(pairs / same)
    # Every shard was taken whole: the perfect value is exact.
    assert stats["shuffle_shards_sized"] == len(SIZES)
    assert stats["shuffle_epoch_shards"] == len(SIZES)
    assert r["shuffle_k_perfect"] == pytest.approx(perfect_k(SIZES))


def test_k_eff_approaches_perfect_as_the_window_grows(tmp_path):
    sizes = [50] * 40
    urls = synthetic_shards(tmp_path, sizes)
    k = []
    for in_flight, window in ((1, 0), (4, 50), (16, 400), (40, 2000)):
        _, stats = read_epoch(urls, batch_size=32, shards_in_flight=in_flight,
                              shuffle_buffer=window, seed=1)
        k.append(stoker.rates(stats)["shuffle_k_eff"])
    perfect = perfect_k(sizes)
    assert k == sorted(k), k
    assert k[0] < 1.5  # one shard at a time, in order: batches hold one or two shards
    assert k[-1] > 0.8 * perfect, (k, perfect)  # every sample of the epoch in one window
    assert k[-1] < 1.2 * perfect, (k, perfect)


def test_report_hints_at_the_options_when_mixing_is_poor(tmp_path):
    urls = synthetic_shards(tmp_path, [50] * 20)
    c = _stoker.Loader(urls, transform="none", batch_size=32, shards_in_flight=1,
                       shuffle_buffer=0)
    while (b := c.next()) is not None:
        del b
    text = c.report()
    c.close()
    assert re.search(r"shuffle: batches mix [0-9.]+ shards \(k_eff\); a perfect shuffle of "
                     r"the epoch: [0-9.]+", text), text
    assert "raise shards_in_flight" in text and "shuffle_buffer" in text, text


def test_rates_between_snapshots_show_a_stall():
    before = dict(wall_ns=10**9, samples=1000, wait_ns=0, read_ns=0, read_threads=2)
    steady = dict(before, wall_ns=2 * 10**9, samples=2000, read_ns=2 * 10**9)
    stalled = dict(steady, wall_ns=3 * 10**9, samples=2010, wait_ns=9 * 10**8)
    r1, r2 = stoker.rates(steady, before), stoker.rates(stalled, steady)
    assert r1["samples_per_s"] == pytest.approx(1000) and r1["read_busy"] == pytest.approx(1)
    assert r2["samples_per_s"] == pytest.approx(10) and r2["wait_share"] == pytest.approx(0.9)
    # Since the start the stall is only a lower average.
    assert stoker.rates(stalled)["samples_per_s"] == pytest.approx(670)


class RecordingWriter:
    """What SummaryWriter.add_scalar receives."""

    def __init__(self):
        self.calls = []

    def add_scalar(self, tag, value, step):
        self.calls.append((tag, value, step))


def test_tensorboard_logs_rates_per_interval(even_shards):
    writer = RecordingWriter()
    with stoker.Loader(even_shards, batch_size=10, image_size=32, threads=2) as loader:
        for step, _ in enumerate(loader):
            stoker.tensorboard(writer, loader, step)
    tags = {tag for tag, _, _ in writer.calls}
    assert {"stoker/samples_per_s", "stoker/images_per_s", "stoker/wait_share",
            "stoker/busy/read", "stoker/busy/decode", "stoker/busy/batching",
            "stoker/shuffle_k_eff", "stoker/shuffle_k_perfect"} <= tags, tags
    steps = sorted({step for _, _, step in writer.calls})
    assert steps == list(range(len(steps))) and len(steps) >= 10
    for tag, value, _ in writer.calls:
        assert math.isfinite(value) and value >= 0, (tag, value)
        if tag.startswith("stoker/busy/") or tag == "stoker/wait_share":
            assert value <= 1, (tag, value)
    # Per interval, not cumulative: 12 batches of 10 samples, each rate is
    # over one step's samples only.
    rates = [v for t, v, _ in writer.calls if t == "stoker/samples_per_s"]
    assert len(set(rates)) > 1


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def documented_metrics():
    return set(re.findall(r"`(stoker_[a-z_]+)`", DOCS.read_text()))


def test_prometheus_endpoint_parses_with_the_real_client(even_shards, tmp_path):
    parser = pytest.importorskip("prometheus_client.parser")
    with stoker.Loader(even_shards, batch_size=10, image_size=32, prometheus_port=0,
                       cache_dir=str(tmp_path / "cache"), cache_size=1 << 30) as loader:
        port = loader.prometheus_port
        assert port
        n = sum(len(labels) for _, labels in loader)
        families = {f.name: f for f in parser.text_string_to_metric_families(scrape(port))}
        stats = loader.stats()
    samples = {f.name: f.samples[0] for f in families.values()}
    assert samples["stoker_samples"].value == n == stats["samples"]
    assert samples["stoker_samples"].labels == {"rank": "0"}
    assert families["stoker_samples"].type == "counter"
    assert families["stoker_read_threads"].type == "gauge"
    assert samples["stoker_read_seconds"].value == pytest.approx(stats["read_ns"] / 1e9)
    assert samples["stoker_shuffle_k_eff"].value == pytest.approx(
        stoker.rates(stats)["shuffle_k_eff"])
    # Local files are read in place: the node cache is empty, but its
    # figures are there, with the capacity it was given.
    assert samples["stoker_node_cache_capacity_bytes"].value == 1 << 30
    assert samples["stoker_node_cache_bytes"].value == 0
    # Every name served is in docs/metrics.md (the client strips _total).
    served = {s.name for f in families.values() for s in f.samples}
    missing = served - documented_metrics()
    assert not missing, f"not documented in docs/metrics.md: {sorted(missing)}"
    # After close() the port is free again.
    with pytest.raises(urllib.error.URLError):
        scrape(port)


def test_prometheus_endpoint_serves_metrics_only_on_localhost(even_shards):
    with stoker.Loader(even_shards, batch_size=10, image_size=32, prometheus_port=0) as loader:
        assert loader._prometheus.host == "127.0.0.1"
        with pytest.raises(urllib.error.HTTPError) as e:
            scrape(loader.prometheus_port, "/other")
        assert e.value.code == 404


# A Prometheus endpoint in a process of its own, so that its threads and
# descriptors are counted without the test's 200 client sockets. Prints the
# port and its (threads, fds), then its counts again for every line read,
# after closing the endpoint for a line "close".
ENDPOINT_PROCESS = r"""
import os, sys
import stoker
from stoker.loader import metrics as _metrics


def counts():
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


if sys.argv[1] == "loader":
    loader = stoker.Loader(sys.argv[2:], batch_size=10, image_size=32, prometheus_port=0)
    port, close = loader.prometheus_port, loader.close
else:
    server = _metrics.PrometheusServer(lambda: "x 1\n", 0, timeout=float(sys.argv[1]))
    port, close = server.port, server.close
print(port, *counts(), flush=True)
for line in sys.stdin:
    if line.strip() == "close":
        close()
    print(*counts(), flush=True)
"""

IDLE_CONNECTIONS = 200
MAX_HANDLERS = 8  # PrometheusServer's default max_connections


class Endpoint:
    def __init__(self, args, env):
        self.proc = subprocess.Popen([sys.executable, "-c", ENDPOINT_PROCESS, *args], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        port, threads, fds = map(int, self.proc.stdout.readline().split())
        self.port, self.base = port, (threads, fds)

    def counts(self, command="count"):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return tuple(map(int, self.proc.stdout.readline().split()))

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def open_idle(port):
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10)
             for _ in range(IDLE_CONNECTIONS)]
    time.sleep(0.5)  # let the endpoint accept them all
    return socks


def seconds_until_all_closed(socks, limit):
    """Wait for the end of every connection (EOF, a reset, or the refusal's
    503 then EOF); the seconds that took, or fail after limit."""
    start = time.monotonic()
    for s in socks:
        while True:
            left = limit - (time.monotonic() - start)
            assert left > 0, "a connection is still open"
            s.settimeout(left)
            try:
                if not s.recv(4096):
                    break
            except ConnectionError:
                break
        s.close()
    return time.monotonic() - start


def test_prometheus_idle_connections_bounded_and_timed_out(clean_env_factory):
    """200 idle connections hold at most MAX_HANDLERS threads and
    descriptors; each is closed by the per-connection timeout (1 s here),
    after which the endpoint is back to its threads and fds and serves a
    scrape."""
    ep = Endpoint(["1.0"], clean_env_factory())
    try:
        socks = open_idle(ep.port)
        threads, fds = ep.counts()
        assert threads <= ep.base[0] + MAX_HANDLERS, (threads, ep.base)
        assert fds <= ep.base[1] + MAX_HANDLERS, (fds, ep.base)
        assert seconds_until_all_closed(socks, 1.0 + 3) < 1.0 + 3
        # a handler's thread ends just after its socket closes
        deadline = time.monotonic() + 2.0
        while ep.counts() != ep.base and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ep.counts() == ep.base
        assert scrape(ep.port) == "x 1\n"
    finally:
        ep.stop()


def test_prometheus_close_ends_open_connections(clean_env_factory, even_shards):
    """Loader.close() ends the connections still open (well before their
    5 s timeout) and leaves no handler thread or descriptor behind."""
    ep = Endpoint(["loader", *even_shards], clean_env_factory())
    try:
        socks = open_idle(ep.port)
        threads, fds = ep.counts()
        assert threads <= ep.base[0] + MAX_HANDLERS and fds <= ep.base[1] + MAX_HANDLERS, \
            (threads, fds, ep.base)
        t = time.monotonic()
        threads, fds = ep.counts("close")
        assert seconds_until_all_closed(socks, 3.0) + (time.monotonic() - t) < 3.0
        assert threads <= ep.base[0] and fds <= ep.base[1], (threads, fds, ep.base)
    finally:
        ep.stop()
