# SPDX-License-Identifier: MIT
"""Damaged and hostile shards: stoker fails cleanly or skips what it must.

Under --on-error fail (the default) every damaged shard gives exit status 1
and a message naming the shard and a byte offset. Under --on-error skip the
samples before the damage are still listed, the exit status is 0 and the
summary counts what was skipped. Nothing may crash or trip a sanitizer
(the `run` fixture checks that on every call).
"""
import random
import tarfile

import pytest

N_SAMPLES = 6


def base_samples():
    return [{"__key__": f"{i:06d}", "cls": str(i).encode(),
             "jpg": bytes((i + k) % 256 for k in range(600 + 211 * i))}
            for i in range(N_SAMPLES)]


@pytest.fixture
def shard(tmp_path, make_shard):
    """A GNU-format shard (one 512-byte header per member) and its layout:
    (path, bytes, [(header offset, data offset, size, sample index)])."""
    path = make_shard(tmp_path / "shard-000.tar", base_samples(), tarfile.GNU_FORMAT)
    with tarfile.open(path) as tf:
        layout = [(ti.offset, ti.offset_data, ti.size, int(ti.name.split(".")[0]))
                  for ti in tf.getmembers()]
    return path, path.read_bytes(), layout


def first_member_of(layout, sample):
    return next(i for i, m in enumerate(layout) if m[3] == sample)


def cut_points(layout):
    """(cut offset, sample damaged, cut is in the header of a sample's first
    member) for cuts inside every header and inside every member's data."""
    for i, (hdr, data, size, sample) in enumerate(layout):
        first = first_member_of(layout, sample) == i
        for cut in (hdr + 1, hdr + 100, hdr + 511):
            yield cut, sample, first
        for cut in sorted({data + 1, data + size // 2, data + size - 1}):
            if data < cut < data + size:
                yield cut, sample, False


def ls_lines(samples, expected_ls):
    return expected_ls(samples).splitlines(keepends=True)


def assert_fails_at_offset(proc, path):
    assert proc.returncode == 1, proc.stderr
    assert str(path) in proc.stderr, proc.stderr
    assert "offset" in proc.stderr, proc.stderr


def assert_prefix(stdout, full_lines, at_least, at_most):
    """stdout is the first k lines of the full listing, at_least <= k <= at_most."""
    lines = stdout.splitlines(keepends=True)
    assert lines == full_lines[:len(lines)], stdout
    assert at_least <= len(lines) <= at_most, (len(lines), at_least, at_most, stdout)
    return len(lines)


def check_fail_and_skip(run, summary, path, full_lines, must_list, may_list):
    """The shard fails under the default policy; under skip it lists between
    must_list and may_list samples and counts one failed shard."""
    failed = run(["ls", path])
    assert_fails_at_offset(failed, path)
    assert_prefix(failed.stdout, full_lines, 0, may_list)
    skipped = run(["ls", "--on-error", "skip", path])
    assert skipped.returncode == 0, skipped.stderr
    n = assert_prefix(skipped.stdout, full_lines, must_list, may_list)
    counts = summary(skipped.stderr)
    assert counts["shards_failed"] == 1, skipped.stderr
    assert counts["samples"] == n
    return counts


def test_cut_in_header(tmp_path, shard, run, summary, expected_ls):
    path, data, layout = shard
    hdr = layout[first_member_of(layout, 2)][0]
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:hdr + 200])
    check_fail_and_skip(run, summary, cut, ls_lines(base_samples(), expected_ls), 1, 2)


def test_cut_in_member_data(tmp_path, shard, run, summary, expected_ls):
    path, data, layout = shard
    hdr, start, size, _ = layout[first_member_of(layout, 3) + 1]
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:start + size // 2])
    counts = check_fail_and_skip(run, summary, cut, ls_lines(base_samples(), expected_ls), 3, 3)
    assert counts["skipped"] == 1
    failed = run(["ls", cut])
    assert f"at offset {hdr}" in failed.stderr, failed.stderr


def test_cut_at_many_offsets(tmp_path, shard, run, summary, expected_ls):
    path, data, layout = shard
    full = ls_lines(base_samples(), expected_ls)
    cut_file = tmp_path / "cut.tar"
    for cut, sample, in_first_header in cut_points(layout):
        cut_file.write_bytes(data[:cut])
        must = sample - 1 if in_first_header and sample > 0 else sample
        counts = check_fail_and_skip(run, summary, cut_file, full, must, sample)
        assert counts["skipped"] <= 1, (cut, counts)


def test_cut_anywhere_never_crashes(tmp_path, shard, run):
    """Every 97th cut, including ones in padding and at block boundaries
    (where a shorter tar may legitimately be complete): exit 0 or 1 only."""
    path, data, layout = shard
    cut_file = tmp_path / "cut.tar"
    for cut in range(0, len(data), 97):
        cut_file.write_bytes(data[:cut])
        proc = run(["ls", cut_file])
        assert proc.returncode in (0, 1), (cut, proc.stderr)
        if proc.returncode == 1:
            assert str(cut_file) in proc.stderr, (cut, proc.stderr)


def patch_header(data, offset, field, value):
    """Replace bytes [field] of the header at offset and fix its checksum."""
    buf = bytearray(data)
    start = offset + field.start
    assert len(value) == field.stop - field.start
    buf[start:offset + field.stop] = value
    buf[offset + 148:offset + 156] = b" " * 8
    buf[offset + 148:offset + 156] = b"%06o\0 " % sum(buf[offset:offset + 512])
    return bytes(buf)


SIZE_FIELD = slice(124, 136)


def test_corrupt_header_checksum(tmp_path, shard, run, summary, expected_ls):
    path, data, layout = shard
    hdr = layout[first_member_of(layout, 2)][0]
    buf = bytearray(data)
    buf[hdr + 3] ^= 0x01  # "000002.cls" -> "001002.cls", checksum left stale
    bad = tmp_path / "checksum.tar"
    bad.write_bytes(bytes(buf))
    check_fail_and_skip(run, summary, bad, ls_lines(base_samples(), expected_ls), 1, 2)


def test_corrupt_first_header_checksum(tmp_path, shard, run, summary):
    path, data, _ = shard
    bad = tmp_path / "checksum0.tar"
    bad.write_bytes(data[:3] + bytes([data[3] ^ 1]) + data[4:])
    check_fail_and_skip(run, summary, bad, [], 0, 0)


@pytest.mark.parametrize("sample", [2, N_SAMPLES - 1], ids=["middle", "last"])
def test_huge_size_field(tmp_path, shard, run, summary, expected_ls, sample):
    """A ustar size of octal 77777777777 (8 GiB - 1) must hit the member size
    limit, not an 8 GiB allocation or a read past the end."""
    path, data, layout = shard
    hdr = layout[first_member_of(layout, sample)][0]
    huge = tmp_path / "huge.tar"
    huge.write_bytes(patch_header(data, hdr, SIZE_FIELD, b"77777777777\0"))
    with tarfile.open(huge) as tf:  # the crafted header is well-formed
        assert tf.next() is not None
    counts = check_fail_and_skip(run, summary, huge, ls_lines(base_samples(), expected_ls),
                                 sample, sample)
    assert counts["skipped"] == 1
    failed = run(["ls", huge])
    assert f"offset {hdr}" in failed.stderr, failed.stderr


NOT_TAR = {
    "random": lambda: random.Random(1234).randbytes(5000),
    "text": lambda: b"this is not a tar archive\n" * 100,
    "empty": lambda: b"",
    "zeros-short": lambda: b"\0" * 100,
    "gzip-garbage": lambda: b"\x1f\x8b\x08\x00" + random.Random(5).randbytes(2000),
}


@pytest.mark.parametrize("kind", sorted(NOT_TAR))
def test_not_a_tar(tmp_path, run, summary, kind):
    bad = tmp_path / f"{kind}.tar"
    bad.write_bytes(NOT_TAR[kind]())
    counts = check_fail_and_skip(run, summary, bad, [], 0, 0)
    assert counts["skipped"] == 0


@pytest.mark.parametrize("kind", ["random", "text", "empty"])
def test_skip_continues_with_next_shard(tmp_path, make_shard, samples_factory, run,
                                        expected_ls, summary, kind):
    before = samples_factory(3)
    after = samples_factory(4, start=3)
    good1 = make_shard(tmp_path / "a.tar", before)
    bad = tmp_path / "b.tar"
    bad.write_bytes(NOT_TAR[kind]())
    good2 = make_shard(tmp_path / "c.tar", after)
    proc = run(["ls", "--on-error", "skip", good1, bad, good2])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(before + after)
    assert str(bad) in proc.stderr
    assert summary(proc.stderr)["shards_failed"] == 1


def test_bench_skips_bad_shard(tmp_path, dataset, run, bench_json):
    good = dataset([4, 6])
    bad = tmp_path / "bad.tar"
    bad.write_bytes(NOT_TAR["text"]())
    failed = run(["bench", good[0], bad, good[1]])
    assert failed.returncode == 1
    assert str(bad) in failed.stderr
    result = bench_json(["--on-error", "skip", good[0], bad, good[1]])
    assert result["samples"] == 10
    assert result["shards_failed"] == 1


def test_damaged_shard_then_good_shard(tmp_path, shard, make_shard, samples_factory, run,
                                       expected_ls, summary):
    path, data, layout = shard
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:layout[first_member_of(layout, 4) + 1][1] + 10])
    after = samples_factory(2, start=100)
    good = make_shard(tmp_path / "good.tar", after)
    proc = run(["ls", "--on-error", "skip", cut, good])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(base_samples()[:4] + after)
    assert summary(proc.stderr)["skipped"] == 1


@pytest.fixture
def reappearing_key(tmp_path, make_shard, samples_factory):
    """Samples 0, 1, 2 and then sample 1 again: (path, good samples, offset
    of the header where key 000001 reappears)."""
    samples = samples_factory(3)
    path = make_shard(tmp_path / "dupkey.tar", samples + [samples[1]], tarfile.GNU_FORMAT)
    with tarfile.open(path) as tf:
        offset = [ti.offset for ti in tf.getmembers() if ti.name.startswith("000001.")][3]
    return path, samples, offset


def test_reappearing_key_fails(reappearing_key, run):
    path, _, offset = reappearing_key
    proc = run(["ls", path])
    assert_fails_at_offset(proc, path)
    assert "000001" in proc.stderr
    assert f"offset {offset}" in proc.stderr, proc.stderr


def test_reappearing_key_skipped(reappearing_key, run, expected_ls, summary):
    path, samples, _ = reappearing_key
    proc = run(["ls", "--on-error", "skip", path])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(samples)
    assert "skipped 1 samples" in proc.stderr
    assert summary(proc.stderr)["shards_failed"] == 0


@pytest.mark.parametrize("dup_name", ["000001.jpg", "000001.JPG"], ids=["same", "case"])
def test_duplicate_member_in_sample(tmp_path, make_shard, samples_factory, run, expected_ls,
                                    summary, dup_name):
    samples = samples_factory(3, exts=("jpg", "txt"))
    # members: 000000.jpg 000000.txt 000001.jpg [dup] 000001.txt ...
    path = make_shard(tmp_path / "dupmember.tar", samples, tarfile.GNU_FORMAT,
                      extra=[(3, "file", dup_name, b"again")])
    proc = run(["ls", path])
    assert_fails_at_offset(proc, path)
    assert "000001" in proc.stderr
    skipped = run(["ls", "--on-error", "skip", path])
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout == expected_ls([samples[0], samples[2]])
    assert summary(skipped.stderr)["skipped"] == 1


@pytest.mark.parametrize("key_len, n_long", [(4094, 1), (5000, 2)],
                         ids=["one-member-too-long", "all-members-too-long"])
def test_member_name_over_limit(tmp_path, make_shard, run, expected_ls, summary, key_len, n_long):
    """Names over the 4096-byte limit: a failure, or under skip the whole
    sample is skipped once. With a 4094-byte key "KEY.a" fits but "KEY.json"
    does not: the sample must not be delivered without its json member."""
    long_key = "k" * key_len
    samples = [{"__key__": "000000", "txt": b"a"},
               {"__key__": long_key, "a": b"bb", "json": b"{}"},
               {"__key__": "000002", "txt": b"c"}]
    assert sum(len(long_key) + 1 + len(ext) > 4096 for ext in ("a", "json")) == n_long
    path = make_shard(tmp_path / "longname.tar", samples)
    proc = run(["ls", path])
    assert_fails_at_offset(proc, path)
    skipped = run(["ls", "--on-error", "skip", path])
    assert skipped.returncode == 0, skipped.stderr
    listed = [line.split("\t")[0][:12] for line in skipped.stdout.splitlines()]
    assert listed == ["000000", "000002"], "sample with an over-long member name was listed"
    assert skipped.stdout == expected_ls([samples[0], samples[2]])
    assert summary(skipped.stderr)["skipped"] == 1
