# SPDX-License-Identifier: MIT
"""Gzip-compressed shards are checked as gzip -t checks them: a flipped byte
anywhere in the deflate data or the trailer (CRC-32, ISIZE) fails the shard
with a message naming it and the offset, instead of delivering wrong bytes;
concatenated gzip members read as one stream; a stream cut short is
truncated; bytes after the last member that are not zeros are an error."""
import gzip
import subprocess
import zlib

import pytest


@pytest.fixture
def tar_and_gz(tmp_path, make_shard, samples_factory):
    """A shard of 6 samples, and its gzip made of stored (level 0) blocks so
    that a flipped data byte changes the output without breaking the
    deflate syntax: only the CRC can catch it."""
    samples = samples_factory(6)
    plain = make_shard(tmp_path / "shard.tar", samples)
    c = zlib.compressobj(0, zlib.DEFLATED, 31)
    data = c.compress(plain.read_bytes()) + c.flush()
    return plain, data


def gzip_t_fails(path):
    return subprocess.run(["gzip", "-t", str(path)], capture_output=True).returncode != 0


@pytest.mark.parametrize("where", ["data", "crc", "isize"])
def test_flipped_byte_is_an_error(tmp_path, run, summary, tar_and_gz, where):
    plain, data = tar_and_gz
    at = {"data": len(data) // 2, "crc": len(data) - 6, "isize": len(data) - 2}[where]
    bad = bytearray(data)
    bad[at] ^= 0x10
    path = tmp_path / "flipped.tar.gz"
    path.write_bytes(bytes(bad))
    assert gzip_t_fails(path)
    proc = run(["ls", path])
    assert proc.returncode == 1, proc.stdout
    reason = {"data": "incorrect data check", "crc": "incorrect data check",
              "isize": "incorrect length check"}[where]
    assert f"{path}: gzip stream is corrupt at compressed offset" in proc.stderr, proc.stderr
    assert reason in proc.stderr, proc.stderr
    skipped = run(["ls", "--on-error", "skip", path])
    assert skipped.returncode == 0 and summary(skipped.stderr)["shards_failed"] == 1
    verify = run(["verify", "--no-images", path])
    assert verify.returncode == 1
    assert verify.stdout.splitlines()[-1].endswith("1 shards not read to the end"), verify.stdout


def test_corrupt_deflate_names_offset(tmp_path, run, tar_and_gz):
    """A byte of a compressed (level 9) stream: wherever zlib notices."""
    plain, _ = tar_and_gz
    data = gzip.compress(plain.read_bytes(), 9)
    for at in range(20, len(data) - 8, max(1, len(data) // 40)):
        bad = bytearray(data)
        bad[at] ^= 0xFF
        path = tmp_path / "bad.tar.gz"
        path.write_bytes(bytes(bad))
        proc = run(["ls", path])
        if proc.returncode == 0:  # only possible if the flip left the output unchanged
            assert not gzip_t_fails(path), at
            continue
        assert str(path) in proc.stderr and "offset" in proc.stderr, (at, proc.stderr)


def test_truncated_gzip(tmp_path, run, tar_and_gz):
    plain, data = tar_and_gz
    for cut in (len(data) - 1, len(data) - 8, len(data) // 2):
        path = tmp_path / "cut.tar.gz"
        path.write_bytes(data[:cut])
        proc = run(["ls", path])
        assert proc.returncode == 1, (cut, proc.stdout)
        assert str(path) in proc.stderr and "offset" in proc.stderr, (cut, proc.stderr)


def test_multi_member_gzip(tmp_path, run, tar_and_gz):
    """`cat a.gz b.gz` is one gzip stream whose data is a + b (gzip -d
    agrees): a tar split in three members reads whole; bytes and the
    compressed byte count are right."""
    plain, _ = tar_and_gz
    raw = plain.read_bytes()
    cuts = [0, 1000, len(raw) // 2, len(raw)]
    path = tmp_path / "members.tar.gz"
    path.write_bytes(b"".join(gzip.compress(raw[a:b]) for a, b in zip(cuts, cuts[1:])))
    assert not gzip_t_fails(path)
    want = run(["ls", plain])
    got = run(["ls", path])
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    bench = run(["bench", "--json", "--no-shuffle", path])
    assert bench.returncode == 0, bench.stderr
    assert f'"bytes_read": {path.stat().st_size},' in bench.stdout, bench.stdout


def test_after_the_gzip_stream(tmp_path, run, tar_and_gz):
    """Zeros after the last member are padding (some writers pad to a block
    size, gzip -d ignores them); anything else is reported."""
    plain, data = tar_and_gz
    padded = tmp_path / "padded.tar.gz"
    padded.write_bytes(data + b"\0" * 1000)
    proc = run(["ls", padded])
    assert proc.returncode == 0, proc.stderr
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(data + b"PK\x03\x04 not gzip")
    proc = run(["ls", garbage])
    assert proc.returncode == 1, proc.stdout
    assert f"{garbage}: data after the gzip stream at compressed offset {len(data)}" in proc.stderr
