# SPDX-License-Identifier: MIT
"""Hostile shards: a few KB that would take gigabytes or minutes must be
refused with a message naming the shard and the key, within bounds of
memory and time that the documented budgets set.

Every bomb is run through the CLI in a subprocess whose peak RSS (wait4)
and CPU time are asserted; `stoker verify` must report it, and under
--on-error skip the bad sample is skipped and counted. The bounds leave
room for the ASan build that the test suite runs (its shadow memory and
allocator add a few hundred MiB at most)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

MiB = 1 << 20


def sparse_bomb(tmp_path, name, members, size, tar_format, options=()):
    """A shard of GNU tar --sparse members (keys s0, s1, ...: one .bin each)
    of `size` bytes that hold one byte of data each; the rest are holes."""
    staging = tmp_path / (name + ".d")
    staging.mkdir()
    names = []
    for i in range(members):
        path = staging / f"s{i}.bin"
        with open(path, "wb") as f:
            f.seek(1000)
            f.write(b"x")
            f.truncate(size)
        names.append(path.name)
    shard = tmp_path / name
    subprocess.run(["tar", f"--format={tar_format}", "--sparse", *options, "-cf", str(shard),
                    "-C", str(staging), *names], check=True, timeout=60, capture_output=True)
    for n in names:
        os.unlink(staging / n)
    return shard


@pytest.mark.parametrize("tar_format, options", [
    ("gnu", ()), ("oldgnu", ()), ("pax", ()), ("pax", ("--sparse-version=0.0",)),
    ("pax", ("--sparse-version=0.1",)),
], ids=["gnu", "oldgnu", "pax-1.0", "pax-0.0", "pax-0.1"])
def test_sparse_bomb(tmp_path, run_measured, tar_format, options):
    """Ten 250 MB sparse members in a ~60 KB tar took 2.5 GB and `verify`
    called them clean. Sparse members are refused before their data is
    read: each is a bad sample naming the member, skipped and counted."""
    shard = sparse_bomb(tmp_path, "sparse.tar", 10, 250 * MiB, tar_format, options)
    assert shard.stat().st_size < MiB
    bench = run_measured(["bench", "--on-error", "skip", shard])
    assert bench.returncode == 0, bench.stderr
    assert bench.peak_mib < 300, bench.peak_mib
    assert bench.cpu_s < 20, bench.cpu_s
    refused = [x for x in bench.stderr.splitlines() if "is a sparse file" in x]
    assert len(refused) == 10, bench.stderr
    assert f"{shard}: member 's3.bin' at offset" in bench.stderr
    failing = run_measured(["ls", shard])
    assert failing.returncode == 1 and "is a sparse file" in failing.stderr, failing.stderr
    assert failing.peak_mib < 300, failing.peak_mib
    verify = run_measured(["verify", "--no-images", shard])
    assert verify.returncode == 1, verify.stdout
    lines = verify.stdout.splitlines()
    assert len(lines) == 11 and all("is a sparse file" in x and str(shard) in x for x in lines[:10]), lines
    assert lines[-1] == "10 samples in 1 shards: 10 bad samples, 0 shards not read to the end"
    assert verify.peak_mib < 300, verify.peak_mib


def gnu_header(name, size, typeflag, realsize=0):
    """An old-GNU header block; typeflag "S" with realsize and no sparse map
    claims realsize bytes of which size are stored."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000444\0"
    h[108:124] = b"0000000\0" * 2
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"14000000000\0"
    h[156:157] = typeflag
    h[257:265] = b"ustar  \0"
    if realsize:
        h[483:495] = b"%011o\0" % realsize
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


@pytest.mark.parametrize("kind", ["oldgnu-empty-map", "pax-realsize", "pax-gnu-sparse-size"])
def test_sparse_header_without_data(tmp_path, run_measured, make_shard, kind):
    """Headers that claim an expanded size without a map of stored data:
    never expanded, whatever else happens to the sample."""
    path = tmp_path / "claims.tar"
    if kind == "oldgnu-empty-map":
        path.write_bytes(gnu_header(b"a.bin", 0, b"S", 250 * MiB) + b"\0" * 1024)
    else:
        record = "GNU.sparse.realsize" if kind == "pax-realsize" else "GNU.sparse.size"
        make_shard(path, [{"__key__": "a", "bin": b"x"}],
                   pax_headers={"a.bin": {record: str(250 * MiB)}})
    for policy in ("fail", "skip"):
        proc = run_measured(["bench", "--on-error", policy, path])
        assert proc.peak_mib < 200, (policy, proc.peak_mib)
        assert "a.bin" in proc.stderr, proc.stderr
        assert proc.returncode == (1 if policy == "fail" else 0), proc.stderr


def ustar_block(name, size, typeflag=b"0"):
    return gnu_header(name[:100], size, typeflag)


def tar_member(name, data=b""):
    """A member as GNU tar writes it, with a ././@LongLink record first when
    the name does not fit the header."""
    out = b""
    if len(name) > 100:
        long_name = name + b"\0"
        out += ustar_block(b"././@LongLink", len(long_name), b"L")
        out += long_name + b"\0" * (-len(long_name) % 512)
    return out + ustar_block(name, len(data)) + data + b"\0" * (-len(data) % 512)


def write_tar_gz(path, members):
    """members (an iterable of member bytes) as one gzip stream, so that a
    shard of hundreds of MB of tar takes a few MB on disk."""
    import zlib
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        for m in members:
            f.write(c.compress(m))
        f.write(c.compress(b"\0" * 1024))
        f.write(c.flush())
    return path


@pytest.mark.parametrize("key_bytes, n", [(4000, 60000), (100000, 3000)],
                         ids=["long-keys", "keys-over-the-limit"])
def test_key_bomb(tmp_path, run_measured, key_bytes, n):
    """Many distinct long keys, each its own sample: the per-shard set of
    keys seen (for reappearing keys) kept every key, 4 KB each, and kept
    keys above max_key_bytes before refusing them (200,000 keys of 4,000
    bytes: 800 MB from a 5 MB .tar.gz). It keeps a 16-byte digest per key
    now, and nothing of a key it refuses."""
    shard = write_tar_gz(tmp_path / "keys.tar.gz",
                         (tar_member(b"%07d" % i + b"k" * (key_bytes - 7) + b".bin")
                          for i in range(n)))
    assert shard.stat().st_size < 3 * MiB
    verify = run_measured(["verify", "--no-images", shard], timeout=120)
    bad = n if key_bytes > 4096 else 0
    assert verify.stdout.splitlines()[-1] == (
        f"{n} samples in 1 shards: {bad} bad samples, 0 shards not read to the end")
    assert verify.peak_mib < 80, verify.peak_mib
    assert verify.cpu_s < 60, verify.cpu_s


def test_samples_per_shard_limit(tmp_path, run, summary):
    """Many small samples: the shard fails at the first sample past
    --max-samples-per-shard, naming the limit (skip: the shard is cut and
    counted as failed); below the limit the same shard reads whole."""
    shard = write_tar_gz(tmp_path / "many.tar.gz", (tar_member(b"%06d.txt" % i) for i in range(5000)))
    failing = run(["ls", "--max-samples-per-shard", "1000", shard])
    assert failing.returncode == 1
    assert f"{shard}: the shard holds more than 1000 samples" in failing.stderr, failing.stderr
    assert "raise max_samples_per_shard" in failing.stderr
    assert len(failing.stdout.splitlines()) == 1000
    skipping = run(["ls", "--on-error", "skip", "--max-samples-per-shard", "1000", shard])
    assert skipping.returncode == 0, skipping.stderr
    counts = summary(skipping.stderr)
    assert counts["samples"] == 1000 and counts["shards_failed"] == 1, skipping.stderr
    whole = run(["ls", "--max-samples-per-shard", "5000", shard])
    assert whole.returncode == 0 and summary(whole.stderr)["samples"] == 5000


# --------------------------------------------------------------------------
# JPEG: progressive files whose scans carry nothing but end-of-band runs, a
# few hundred bytes that make libjpeg allocate a whole-image coefficient
# buffer and walk every block once per scan (made by the fuzz corpus's
# generator, which seeds fuzz_image with small ones).

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from make_image_corpus import hostile_jpeg  # noqa: E402

def image_shard(path, make_shard, jpeg):
    return make_shard(path, [{"__key__": "good", "cls": b"1", "jpg": GOOD_JPEG},
                             {"__key__": "bomb", "cls": b"2", "jpg": jpeg},
                             {"__key__": "good2", "cls": b"3", "jpg": GOOD_JPEG}])


def _good_jpeg():
    import io
    from PIL import Image
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 90)).save(out, "JPEG", progressive=True)
    return out.getvalue()


GOOD_JPEG = _good_jpeg()


def check_refused(verify, bench, shard, reason):
    """verify lists the bomb (and only it) by shard and key; the loader
    under --on-error skip replaces it and counts it."""
    lines = verify.stdout.splitlines()
    assert verify.returncode == 1, verify.stdout
    assert len(lines) == 2 and f"{shard}: sample 'bomb' member jpg:" in lines[0], lines
    assert reason in lines[0], lines[0]
    assert lines[1] == ("3 samples in 1 shards, 2 images decoded: 1 bad samples, "
                        "0 shards not read to the end"), lines
    assert bench.returncode == 0, bench.stderr
    assert "sample 'bomb'" in bench.stderr and reason in bench.stderr, bench.stderr


def test_progressive_scan_bomb(tmp_path, make_shard, run_measured):
    """5,000 refinement scans over a 2000 x 2000 grey image (80 KB): 12.6 s
    of CPU to decode. JPEGs may have at most 500 scans, and their scans
    together may visit the image's DCT blocks at most 64 times over."""
    jpeg = hostile_jpeg(2000, 2000, components=1, refine_scans=5000)
    assert len(jpeg) < 100_000
    shard = image_shard(tmp_path / "scans.tar", make_shard, jpeg)
    verify = run_measured(["verify", shard])
    bench = run_measured(["bench", "--on-error", "skip", "--decode", "train", "--batch-size",
                          "3", shard])
    check_refused(verify, bench, shard, "visit its 62500 DCT blocks more than 64 times")
    assert verify.cpu_s < 3 and bench.cpu_s < 3, (verify.cpu_s, bench.cpu_s)


def test_progressive_scan_count(tmp_path, make_shard, run_measured):
    """Scans that each cover a small share of the blocks (a chroma component
    sampled 4 times less than luma both ways) hit the scan limit first."""
    jpeg = hostile_jpeg(64, 64, components=3, luma_sampling=(4, 4), refine_scans=900,
                        refine_components=(1, 2))
    shard = image_shard(tmp_path / "count.tar", make_shard, jpeg)
    verify = run_measured(["verify", shard])
    bench = run_measured(["bench", "--on-error", "skip", "--decode", "eval", "--batch-size",
                          "3", shard])
    check_refused(verify, bench, shard, "more than 500 scans")


@pytest.mark.parametrize("components, sampling, refused", [
    (3, (1, 1), True),    # 4:4:4: 6 bytes per pixel, 600 MB
    (3, (2, 2), False),   # 4:2:0: 3 bytes per pixel, 300 MB: at the bound
    (1, (1, 1), False),   # grey: 2 bytes per pixel
], ids=["444", "420", "grey"])
def test_coefficient_bomb(tmp_path, make_shard, run_measured, components, sampling, refused):
    """A 659-byte progressive 10000 x 10000 4:4:4 JPEG made libjpeg allocate
    600 MB of DCT coefficients per decode thread (890 MB peak in verify),
    twice the documented max_image_pixels * 3 bytes. Coefficient buffers
    are computed from the header and refused above that bound."""
    jpeg = hostile_jpeg(10000, 10000, components, sampling)
    shard = image_shard(tmp_path / "coef.tar", make_shard, jpeg)
    verify = run_measured(["verify", shard])
    if refused:
        bench = run_measured(["bench", "--on-error", "skip", "--decode", "train",
                              "--batch-size", "3", shard])
        check_refused(verify, bench, shard, "needs 600000000 bytes of DCT coefficients")
        assert verify.peak_mib < 120 and bench.peak_mib < 120, (verify.peak_mib, bench.peak_mib)
    else:
        assert verify.returncode == 0, verify.stdout
        # coefficients (at most 300 MB) and the whole decoded image (300 MB)
        assert verify.peak_mib < 700, verify.peak_mib


# --------------------------------------------------------------------------
# Large samples in the shuffle window

def zeros_tar_gz(path, members, member_bytes):
    """A .tar.gz of `members` samples of one member of member_bytes zeros,
    built as one gzip member per tar member (a valid multi-member gzip
    stream: the compressed zeros are made once): a few hundred KB on disk."""
    import gzip
    zeros = gzip.compress(b"\0" * member_bytes, 9)
    with open(path, "wb") as f:
        for i in range(members):
            f.write(gzip.compress(ustar_block(b"%03d.bin" % i, member_bytes), 1))
            f.write(zeros)
        f.write(gzip.compress(b"\0" * 1024, 1))
    return path


def test_shuffle_window_bytes(tmp_path, run_measured):
    """The shuffle window counted samples only: thirty 100 MB members took
    3.1 GB with default options. It holds at most shuffle_buffer_bytes of
    member data now (default 2 GiB); a window that would hold more fails
    with a message saying what to set, whatever the error policy (the data
    is fine, the configuration is not). The sample sequence does not
    depend on it."""
    shard = zeros_tar_gz(tmp_path / "big.tar.gz", 30, 16 * MiB)
    assert shard.stat().st_size < 2 * MiB
    for policy in ("fail", "skip"):
        proc = run_measured(["bench", "--batch-size", "1", "--on-error", policy,
                             "--shuffle-buffer-bytes", "64M", shard])
        assert proc.returncode == 1, proc.stdout
        assert ("the shuffle window would hold 5 samples of 80.0 MiB in all, above "
                "shuffle_buffer_bytes (64.0 MiB); lower shuffle_buffer (to 1 for samples up to "
                "16.0 MiB, the largest so far) or raise shuffle_buffer_bytes (to 64016.0 MiB "
                "for shuffle_buffer 2000)") in proc.stderr, proc.stderr
        assert proc.peak_mib < 64 + 150, proc.peak_mib
    # What the message says to do works.
    ok = run_measured(["bench", "--batch-size", "1", "--shuffle-buffer", "1",
                       "--shuffle-buffer-bytes", "64M", shard])
    assert ok.returncode == 0, ok.stderr
    assert ok.peak_mib < 64 + 150, ok.peak_mib


def hinted_reach(stderr):
    found = re.search(r"lower shuffle_buffer \(to (\d+) for samples", stderr)
    assert found, stderr
    return found[1]


# A bench of small samples peaks near 35 MiB (release and ASan alike with
# the measured quarantine); the samples in the sequencer's hand and the one
# it waits for are read over the window's budget.
BASE_MIB = 60


def test_members_in_flight_count_against_the_budget(tmp_path, run_measured):
    """Each shard in flight held a whole member outside every budget: 100 MB
    members took 126 / 423 / 1,375 MB with 1 / 4 / 16 shards in flight, and
    shuffle_buffer_bytes=300M peaked at 1.45 GB before failing. Readers now
    reserve each member in shuffle_buffer_bytes (and in their shard's
    prefetch_bytes_per_shard) before reading it and put it off until it
    fits; 16 shards in flight of 20 MiB members (330 MiB before) stay within
    64 MiB plus the two samples that may be read over it."""
    shards = [zeros_tar_gz(tmp_path / f"big-{i}.tar.gz", 3, 20 * MiB) for i in range(16)]
    common = ["bench", "--batch-size", "1", "--shards-in-flight", "16",
              "--shuffle-buffer-bytes", "64M", *shards]
    for threads in ("2", "4"):
        # The default reach (2000) cannot fit: a clear failure, within the budget.
        proc = run_measured([*common, "--threads", threads])
        assert proc.returncode == 1, proc.stdout
        assert "above shuffle_buffer_bytes (64.0 MiB)" in proc.stderr, proc.stderr
        assert proc.peak_mib < 64 + 2 * 20 + BASE_MIB, proc.peak_mib
        # Read-ahead alone (no shuffle) stays within it too.
        flat = run_measured([*common, "--threads", threads, "--no-shuffle"])
        assert flat.returncode == 0, flat.stderr
        assert flat.peak_mib < 64 + 2 * 20 + BASE_MIB, flat.peak_mib


def test_following_the_window_hint_works(tmp_path, run_measured):
    """The hint divided the budget by the average sample the window held, so
    a window of larger samples later failed again ("lower shuffle_buffer to
    153", then "to 37"). It now counts the largest sample so far against the
    window's hard bound (2W + 1 samples): here 10 small samples come first,
    then 4 MiB ones, and the reach it names works."""
    import io
    import tarfile
    shard = tmp_path / "mixed.tar"
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, size in enumerate([64 * 1024] * 40 + [4 * MiB] * 30):
            info = tarfile.TarInfo(f"{i:03d}.bin")
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)))
    common = ["bench", "--batch-size", "1", "--shuffle-buffer-bytes", "24M", shard]
    first = run_measured([*common, "--shuffle-buffer", "40"])
    assert first.returncode == 1, first.stdout
    reach = hinted_reach(first.stderr)
    assert int(reach) < 40, first.stderr
    again = run_measured([*common, "--shuffle-buffer", reach])
    assert again.returncode == 0, again.stderr
