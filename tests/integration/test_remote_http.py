# SPDX-License-Identifier: MIT
"""http:// shards: against a real nginx, and against a server that fails on
purpose. Recoverable faults must give every sample exactly once, identical
to the local shard; unrecoverable ones a clear error naming the URL, with
any credentials in it redacted."""
import collections
import os
import re
import stat
import subprocess
import time

import pytest

from conftest import make_samples, write_shard
from servers import DelayProxy, FaultServer, Nginx, self_signed_certificate

N_SHARDS = 4
# Members of a few KiB to 60 KiB: each shard spans many libcurl buffers, so
# faults land mid-body and mid-member.
SIZES = lambda i, j: 2000 + (i * 977 + j * 131) % 60000  # noqa: E731
# Small timeouts keep every fault test to a few seconds.
FAST = ["--io-timeout-ms", "1000", "--io-backoff-ms", "20", "--io-retries", "3"]


@pytest.fixture(scope="session")
def shards(tmp_path_factory):
    """N_SHARDS local shards (Paths) of 25 samples each, keys unique."""
    root = tmp_path_factory.mktemp("http-data")
    return [write_shard(root / f"shard-{i}.tar", make_samples(25, start=25 * i, size=SIZES))
            for i in range(N_SHARDS)]


@pytest.fixture(scope="session")
def nginx(shards, tmp_path_factory):
    with Nginx(shards[0].parent, tmp_path_factory.mktemp("nginx")) as server:
        yield server


@pytest.fixture
def faults(shards):
    with FaultServer({p.name: p.read_bytes() for p in shards}, stall_s=4.0) as server:
        yield server


def ls_out(run, urls, *extra):
    proc = run(["ls", *extra, *urls])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def last_member(shard):
    key = f"{25 * (int(shard.stem.split('-')[1]) + 1) - 1:06d}"
    return f"{key}.jpg"


# ------------------------------------------------------------------ nginx

def test_nginx_storage_order_equals_local(run, nginx, shards):
    local = ls_out(run, shards)
    assert local.count("\n") == 25 * N_SHARDS
    nginx.clear_log()
    assert ls_out(run, [nginx.url(p.name) for p in shards]) == local
    log = nginx.access_log()
    assert [(m, u, s) for m, u, s, *_ in log] == [("GET", f"/{p.name}", 200) for p in shards]
    # One reader thread: every shard after the first reuses its connection.
    assert len({conn for *_, conn in log}) == 1, log
    for p in shards:
        member = last_member(p)
        want = run(["cat", p, member], text=False)
        got = run(["cat", nginx.url(p.name), member], text=False)
        assert want.returncode == 0 and got.returncode == 0, got.stderr
        assert got.stdout == want.stdout and len(want.stdout) > 1000


@pytest.mark.parametrize("threads", [1, 2])
def test_nginx_shuffled_epochs_one_get_per_shard(bench_json, nginx, shards, threads):
    args = ["--threads", str(threads), "--shards-in-flight", "3", "--epochs", "3",
            "--batch-size", "7", "--seed", "5"]
    local = bench_json([*args, *shards])
    nginx.clear_log()
    remote = bench_json([*args, *[nginx.url(p.name) for p in shards]])
    assert remote["samples"] == local["samples"] == 3 * 25 * N_SHARDS
    assert remote["member_bytes"] == local["member_bytes"]
    assert remote["retries"] == 0
    gets = collections.Counter(u for m, u, s, *_ in nginx.access_log() if m == "GET" and s == 200)
    assert gets == {f"/{p.name}": 3 for p in shards}
    assert all(s == 200 for _, _, s, *_ in nginx.access_log())


def test_nginx_missing_shard(run, nginx, shards):
    url = nginx.url("no-such-shard.tar")
    proc = run(["ls", nginx.url(shards[0].name), url])
    assert proc.returncode == 1
    assert f"{url}: HTTP 404 Not Found" in proc.stderr


def test_nginx_missing_shard_skipped(run, nginx, shards):
    proc = run(["ls", "--on-error", "skip", nginx.url(shards[0].name), nginx.url("gone.tar")])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ls_out(run, [shards[0]])
    assert nginx.url("gone.tar") + ": HTTP 404 Not Found" in proc.stderr


def test_through_delay_proxy(run, nginx, shards):
    """A 40 ms round trip changes nothing but time."""
    with DelayProxy(nginx.port, delay_s=0.02) as proxy:
        t = time.monotonic()
        assert ls_out(run, [proxy.url(p.name) for p in shards]) == ls_out(run, shards)
        assert time.monotonic() - t < 30


@pytest.fixture(scope="session")
def https_nginx(shards, tmp_path_factory):
    cert, key = self_signed_certificate(tmp_path_factory.mktemp("tls"))
    with Nginx(shards[0].parent, tmp_path_factory.mktemp("nginx-tls"), tls=(cert, key)) as server:
        server.cert = cert
        yield server


def test_https_verifies_certificates(run, https_nginx, shards):
    urls = [https_nginx.url(p.name) for p in shards[:2]]
    proc = run(["ls", *urls], env={"STOKER_CA_BUNDLE": ""})
    assert proc.returncode == 1
    assert urls[0] in proc.stderr and "certificate" in proc.stderr, proc.stderr
    assert len(https_nginx.access_log()) == 0, "no request may be sent over a bad TLS session"
    local = ls_out(run, shards[:2])
    assert ls_out(run, urls, "--ca-bundle", https_nginx.cert) == local
    proc = run(["ls", *urls], env={"STOKER_CA_BUNDLE": str(https_nginx.cert)})
    assert proc.returncode == 0 and proc.stdout == local, proc.stderr


# ------------------------------------------------------------------ faults

RECOVERABLE = {
    # mode: (retries at least, resumes at least)
    "drop": (1, 1),
    "trunc": (1, 1),
    "dropall": (2, 2),
    "stall": (1, 1),
    "norange": (1, 1),
    "e500": (2, 0),
    "e503": (2, 0),
    "e429": (2, 0),
}


@pytest.mark.parametrize("mode", sorted(RECOVERABLE))
def test_recoverable_fault(run, bench_json, faults, shards, mode, tmp_path):
    shard = shards[1]
    url = faults.url(mode, shard.name)
    report = bench_json([*FAST, "--no-shuffle", "--threads", "1", "--shards-in-flight", "1",
                         url])
    assert report["samples"] == 25
    assert report["bytes_read"] == shard.stat().st_size
    retries, resumes = RECOVERABLE[mode]
    assert report["retries"] >= retries and report["resumes"] >= resumes, report
    ranges = [r for m, _, r in faults.requests]
    assert ranges[0] is None
    if resumes:
        # Each resume asks for the byte after the last one received.
        offsets = [int(r[len("bytes="):-1]) for r in ranges[1:]]
        assert offsets == sorted(offsets) and 0 < offsets[0] < shard.stat().st_size, ranges
    faults.reset()
    assert ls_out(run, [url], *FAST) == ls_out(run, [shard])
    faults.reset()
    member = last_member(shard)
    got = run(["cat", *FAST, url, member], text=False)
    assert got.returncode == 0, got.stderr
    assert got.stdout == run(["cat", shard, member], text=False).stdout
    faults.reset()  # index and verify take the same source options
    proc = run(["index", *FAST, "-o", str(tmp_path / "index.json"), url])
    assert proc.returncode == 0 and proc.stdout.startswith("25 samples in 1 shards"), proc.stderr
    faults.reset()
    proc = run(["verify", "--no-images", *FAST, url])
    assert proc.returncode == 0 and proc.stdout.startswith("25 samples in 1 shards"), proc.stdout


@pytest.mark.parametrize("mode, message", [
    ("403", "HTTP 403 Forbidden"),
    ("404", "HTTP 404 Not Found"),
    ("always503", "HTTP 503 Service Unavailable (4 attempts)"),
    ("badrange", "server resumed at byte"),
])
def test_unrecoverable_fault(run, faults, shards, mode, message):
    url = faults.url(mode, shards[0].name)
    t = time.monotonic()
    proc = run(["ls", *FAST, url])
    assert proc.returncode == 1
    assert f"stoker ls: {url}: {message}" in proc.stderr, proc.stderr
    assert time.monotonic() - t < 20
    if mode in ("403", "404"):
        assert len(faults.requests) == 1, "4xx must not be retried"


def test_connection_refused_gives_up(run, shards):
    from servers import free_port
    url = f"http://127.0.0.1:{free_port()}/x.tar"
    proc = run(["ls", "--io-retries", "2", "--io-backoff-ms", "10", url])
    assert proc.returncode == 1
    assert url in proc.stderr and "(3 attempts)" in proc.stderr, proc.stderr


def test_not_a_tar(run, faults):
    faults.files["junk.tar"] = b"<html>not a tar</html>\n" * 100
    url = faults.url("ok", "junk.tar")
    proc = run(["ls", url])
    assert proc.returncode == 1
    assert url in proc.stderr


# ------------------------------------------------------------- credentials

SECRETS = ("s3cr3tpass", "deadbeefsecret", "tok3nvalue")


@pytest.mark.parametrize("command", ["ls", "bench", "cat", "ls-skip"])
@pytest.mark.parametrize("mode", ["404", "ok"])
def test_credentials_never_printed(run, faults, command, mode):
    faults.files["junk.tar"] = b"not a tar at all " * 64
    name = "missing.tar" if mode == "404" else "junk.tar"
    url = (f"http://user:s3cr3tpass@127.0.0.1:{faults.port}/{mode}/{name}"
           "?X-Amz-Signature=deadbeefsecret&token=tok3nvalue")
    args = {"ls": ["ls", url], "bench": ["bench", url], "cat": ["cat", url, "000000.jpg"],
            "ls-skip": ["ls", "--on-error", "skip", url]}[command]
    proc = run(args)
    assert proc.returncode == (0 if command == "ls-skip" else 1), proc.stderr
    out = proc.stdout + proc.stderr
    for secret in SECRETS:
        assert secret not in out
    shown = (f"http://***@127.0.0.1:{faults.port}/{mode}/{name}"
             "?X-Amz-Signature=***&token=***")
    assert shown in proc.stderr
    # The server did get the credentials: redaction is only for display.
    assert faults.requests, "no request reached the server"


def test_resume_opens_the_shard_at_the_sample_with_a_range_request(run, bench_json, tmp_path):
    """With a dataset index, a resumed epoch asks the server for the shard
    from the offset of its first sample on (Range), instead of streaming the
    megabytes before it; the samples delivered equal a local resume's."""
    import json
    root = tmp_path / "big"
    root.mkdir()
    shard = write_shard(root / "big-0.tar", make_samples(40, size=lambda i, j: 50_000 + i + j))
    with Nginx(root, tmp_path / "nginx") as server:
        url = server.url(shard.name)
        index = tmp_path / "index.json"
        assert run(["index", "-o", str(index), url]).returncode == 0
        offsets = json.loads(index.read_text())["shards"][0]["offsets"]
        args = ["--no-shuffle", "--shards-in-flight", "1", "--batch-size", "4",
                "--start-batch", "7"]
        server.clear_log()
        remote = bench_json([*args, "--index", str(index), url])
        ranges = [r for m, u, s, n, r, c in server.access_log() if m == "GET"]
    assert ranges == [f"bytes={offsets[28]}-"] and offsets[28] > 1 << 20
    assert remote["samples"] == 40 - 28 and remote["samples_passed_over"] == 0
    local = bench_json([*args, str(shard)])
    assert remote["member_bytes"] == local["member_bytes"] and local["samples"] == 12


def test_index_records_the_etag_and_a_rewritten_shard_is_stale(run, bench_json, tmp_path):
    """Over http the index records the shard's size and ETag; a shard
    rewritten on the server after indexing (same size, new time: nginx's
    ETag changes) is refused when its server answers, not read with the
    old counts."""
    import json
    root = tmp_path / "www"
    root.mkdir()
    shard = write_shard(root / "s-0.tar", make_samples(30))
    with Nginx(root, tmp_path / "nginx") as server:
        url = server.url(shard.name)
        index = tmp_path / "index.json"
        assert run(["index", "-o", str(index), url]).returncode == 0
        entry = json.loads(index.read_text())["shards"][0]
        assert entry["size"] == shard.stat().st_size and entry["etag"].startswith('"')
        assert "mtime_ns" not in entry
        assert bench_json(["--index", str(index), url])["samples"] == 30
        st = shard.stat()
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))
        proc = run(["bench", "--index", str(index), url])
    assert proc.returncode == 1
    assert f"the index is stale for {url}: run `stoker index` again (its ETag is" \
        in proc.stderr, proc.stderr


# ------------------------------------------------------- sample URLs (__url__)

def secret_url(port, name):
    return f"http://user:s3cr3tpass@127.0.0.1:{port}/{name}?X-Amz-Signature=deadbeefsecret"


def shown_url(port, name):
    return f"http://***@127.0.0.1:{port}/{name}?X-Amz-Signature=***"


@pytest.mark.parametrize("cache", [False, True])
def test_every_sample_names_its_shard_redacted(run, nginx, shards, tmp_path, cache):
    """`ls --url` prints each sample's __url__ after its shard's source is
    closed (the batch outlives the reader): it must be the redacted URL,
    not freed memory (ASan) nor, through the cache, the URL with its
    secrets."""
    urls = [secret_url(nginx.port, p.name) for p in shards[:2]]
    extra = ["--cache-dir", str(tmp_path / "cache"), "--cache-size", "64M"] if cache else []
    for attempt in range(2 if cache else 1):  # a miss, then a hit
        proc = run(["ls", "--url", *extra, *urls])
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert len(lines) == 50, proc.stdout
        want = [shown_url(nginx.port, p.name) for p in shards[:2] for _ in range(25)]
        assert [line.split("\t")[0] for line in lines] == want, (attempt, lines[:3])
        for secret in SECRETS:
            assert secret not in proc.stdout + proc.stderr


def test_cache_errors_name_the_shard_redacted(run, nginx, shards, tmp_path):
    url = secret_url(nginx.port, shards[0].name)
    proc = run(["ls", "--cache-dir", str(tmp_path / "cache"), "--cache-size", "1K", url])
    assert proc.returncode == 1
    assert f"{shown_url(nginx.port, shards[0].name)}: shard is larger than cache_size" \
        in proc.stderr, proc.stderr
    for secret in SECRETS:
        assert secret not in proc.stdout + proc.stderr


def test_cache_files_hold_no_secret_and_are_private(run, nginx, shards, tmp_path):
    """The cache directory is per user: 0700 and files 0600 whatever the
    umask, and no file in it holds a credential of the URL (H.url keeps
    the redacted URL)."""
    cache = tmp_path / "cache"
    urls = [secret_url(nginx.port, p.name) for p in shards[:2]]
    proc = run(["ls", "--cache-dir", str(cache), "--cache-size", "64M", *urls],
               preexec_fn=lambda: os.umask(0))
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    files = sorted(cache.iterdir())
    assert len([p for p in files if p.suffix == ".url"]) == 2, files
    for p in files:
        assert stat.S_IMODE(p.lstat().st_mode) == 0o600, (p, oct(p.lstat().st_mode))
        data = p.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, p
    shown = sorted(p.read_text().splitlines()[0] for p in files if p.suffix == ".url")
    assert shown == sorted(shown_url(nginx.port, p.name) for p in shards[:2])


# ------------------------------------------------------------- slow links

def test_slow_drip_fails_naming_the_rate(run, faults, shards):
    """A server that sends a byte every half second never stalls, so the
    stall check alone would wait forever: the rate check retries it (with
    Range) and then fails, naming the URL and the rate it saw."""
    url = faults.url("drip", shards[0].name)
    t = time.monotonic()
    proc = run(["ls", *FAST, url])
    elapsed = time.monotonic() - t
    assert proc.returncode == 1
    m = re.search(rf"stoker ls: {re.escape(url)}: too slow: (\d+) bytes/s over [0-9.]+ s "
                  r"of waiting, below io_min_rate 4096 bytes/s \(4 attempts\)", proc.stderr)
    assert m and int(m[1]) <= 4, proc.stderr
    assert elapsed < 20, elapsed
    ranges = [r for _, _, r in faults.requests]
    assert len(ranges) == 4 and ranges[0] is None, ranges
    assert all(r and r.startswith("bytes=") for r in ranges[1:]), ranges


def test_slow_link_passes_above_the_minimum_rate(run, faults, shards):
    """16 KiB every 20 ms (about 0.8 MB/s): fine with a minimum of 200 kB/s,
    too slow for one of 4 MB/s."""
    url = faults.url("slow", shards[1].name)
    proc = run(["ls", *FAST, "--io-min-rate", "200000", url])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ls_out(run, [shards[1]])
    faults.reset()
    proc = run(["ls", *FAST, "--io-retries", "1", "--io-min-rate", "4000000", url])
    assert proc.returncode == 1
    assert f"{url}: too slow:" in proc.stderr and "below io_min_rate 4000000 bytes/s " \
        "(2 attempts)" in proc.stderr, proc.stderr
