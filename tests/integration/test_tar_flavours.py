# SPDX-License-Identifier: MIT
"""Every tar dialect that writers of WebDataset shards produce reads the same.

Each flavour writes the same samples (long paths, nested keys, multi-dot
names, upper-case extensions, empty and block-sized members) plus members
stoker must ignore (directories, symlinks, hard links, names without a key);
`stoker ls` must print exactly the listing computed in Python and `stoker cat`
must return the source bytes.
"""
import random
import tarfile

import pytest

# flavour -> (writer kind, format, names over 255 bytes supported)
FLAVOURS = {
    "gnutar-gnu": ("gnu", "gnu", True),
    "gnutar-oldgnu": ("gnu", "oldgnu", True),
    "gnutar-ustar": ("gnu", "ustar", False),
    "gnutar-pax": ("gnu", "pax", True),
    "gnutar-posix": ("gnu", "posix", True),
    "python-ustar": ("python", tarfile.USTAR_FORMAT, False),
    "python-gnu": ("python", tarfile.GNU_FORMAT, True),
    "python-pax": ("python", tarfile.PAX_FORMAT, True),
    "tarwriter": ("tarwriter", None, True),
}

# Directory prefixes: > 100 bytes in total (ustar splits it into prefix and
# name), and > 255 bytes (GNU long names, pax path records).
LONG_DIR = "long/" + "x" * 70 + "/" + "y" * 30
LONGER_DIR = "/".join(c * 60 for c in "abcde")


def blob(n, seed):
    return bytes((seed * 131 + i * 7) % 256 for i in range(n))


def flavour_samples(very_long):
    samples = [
        {"__key__": "000000", "jpg": blob(3000, 1), "txt": b"first"},
        {"__key__": "dir/sub/000001", "jpg": blob(700, 2), "json": b'{"a": 1}'},
        {"__key__": "a", "b.c": blob(33, 3), "d.e.f": b"multi"},
        {"__key__": "up", "JPG": blob(99, 4), "Json": b"{}", "cLs": b"7"},
        {"__key__": "edge", "empty": b"", "block": blob(512, 5), "block1": blob(513, 6)},
        {"__key__": LONG_DIR + "/000005", "png": blob(120, 7)},
    ]
    assert len(samples[-1]["__key__"]) + 4 > 100
    if very_long:
        samples.append({"__key__": LONGER_DIR + "/000006", "cls": b"3", "webp": blob(10, 8)})
        assert len(samples[-1]["__key__"]) > 255
    samples.append({"__key__": "999999", "txt": b"last"})
    return samples


# Members to ignore: a symlink inside sample 000000 (between its two members:
# it must not split the sample), a directory and a keyless file between
# samples, and at the end a hard link, a dotfile and a __meta__ file.
EXTRA = [
    (0, "dir", "dir", None),
    (1, "symlink", "link.jpg", "000000.jpg"),
    (2, "file", "README", b"no key here\n"),
    (2, "dir", "dir/sub", None),
    (-1, "hardlink", "hard.jpg", "000000.jpg"),
    (-1, "file", ".hidden", b"dotfile"),
    (-1, "file", "__meta__", b"meta"),
]


@pytest.fixture(params=sorted(FLAVOURS))
def flavour_shard(request, tmp_path, make_shard, gnu_tar, tar_members):
    """(path, samples) of a shard written in the flavour, with EXTRA members."""
    kind, fmt, very_long = FLAVOURS[request.param]
    samples = flavour_samples(very_long)
    n = len(tar_members(samples))
    extra = [(n if e[0] < 0 else e[0],) + e[1:] for e in EXTRA]
    path = tmp_path / f"{request.param}.tar"
    if kind == "gnu":
        gnu_tar(path, samples, fmt, extra)
    elif kind == "python":
        make_shard(path, samples, fmt, extra, stream=False)
    else:
        make_shard(path, samples, extra=extra)
    return path, samples


def test_ls_lists_every_sample(flavour_shard, run, expected_ls, summary, tar_members):
    path, samples = flavour_shard
    proc = run(["ls", path])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(samples)
    members = tar_members(samples)
    assert summary(proc.stderr) == {
        "samples": len(samples), "members": len(members),
        "bytes": sum(len(d) for _, d in members), "skipped": 0, "shards_failed": 0,
        "ignored": len(EXTRA)}


@pytest.mark.parametrize("name, source", [
    ("000000.txt", ("000000", "txt")),
    ("dir/sub/000001.jpg", ("dir/sub/000001", "jpg")),
    ("a.b.c", ("a", "b.c")),
    ("a.d.e.f", ("a", "d.e.f")),
    ("up.jpg", ("up", "JPG")),
    ("edge.empty", ("edge", "empty")),
    ("edge.block1", ("edge", "block1")),
    (LONG_DIR + "/000005.png", (LONG_DIR + "/000005", "png")),
    ("999999.txt", ("999999", "txt")),
])
def test_cat_returns_member_bytes(flavour_shard, run, name, source):
    path, samples = flavour_shard
    key, ext = source
    want = next(s[ext] for s in samples if s["__key__"] == key)
    proc = run(["cat", path, name], text=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == want


def test_cat_very_long_name(tmp_path, make_shard, run):
    samples = flavour_samples(very_long=True)
    path = make_shard(tmp_path / "long.tar", samples)
    proc = run(["cat", path, LONGER_DIR + "/000006.webp"], text=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == blob(10, 8)


@pytest.mark.parametrize("name", ["link.jpg", "hard.jpg", "dir/sub.jpg", "000000.png"])
def test_cat_ignored_or_missing_member_fails(flavour_shard, run, name):
    path, _ = flavour_shard
    proc = run(["cat", path, name], text=False)
    assert proc.returncode == 1
    assert proc.stdout == b""
    assert str(path).encode() in proc.stderr


def test_members_larger_than_buffers(tmp_path, make_shard, run, bench_json, expected_ls):
    """Members larger than the 1 MiB read block and the 8 MiB per-shard
    prefetch budget."""
    rng = random.Random(42)
    samples = [{"__key__": "000", "bin": rng.randbytes(20 << 20), "txt": b"a"},
               {"__key__": "001", "bin": rng.randbytes((3 << 20) + 1)},
               {"__key__": "002", "txt": b"tail"}]
    path = make_shard(tmp_path / "big.tar", samples)
    proc = run(["ls", path])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(samples)
    cat = run(["cat", path, "000.bin"], text=False)
    assert cat.returncode == 0 and cat.stdout == samples[0]["bin"]
    result = bench_json(["--threads", "4", path, path, path])
    assert result["samples"] == 9
    assert result["member_bytes"] == 3 * sum(len(s[e]) for s in samples for e in s if e != "__key__")


@pytest.mark.parametrize("tar_format", ["gnu", "oldgnu", "pax"])
def test_sparse_members(tmp_path, gnu_tar, run, expected_ls, summary, tar_format):
    """GNU tar --sparse members (old GNU sparse headers, pax GNU.sparse
    records) are refused as bad samples: their holes are not in the shard,
    so a few KB could expand to terabytes (tests/integration/test_bombs.py).
    The other samples read as usual."""
    hole = b"\0" * (2 << 20)
    samples = [{"__key__": "000", "bin": b"head" + hole + b"tail", "txt": b"t"},
               {"__key__": "001", "bin": hole + b"x"},
               {"__key__": "002", "txt": b"no holes"}]
    path = gnu_tar(tmp_path / "sparse.tar", samples, tar_format,
                   options=["--sparse"])
    assert path.stat().st_size < (1 << 20), "GNU tar did not write sparse members"
    proc = run(["ls", path])
    assert proc.returncode == 1, proc.stderr
    assert f"{path}: member '000.bin' at offset 0 is a sparse file (2097160 bytes" in proc.stderr
    proc = run(["ls", "--on-error", "skip", path])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(samples[2:])
    assert summary(proc.stderr)["skipped"] == 2
    assert "'001.bin'" in proc.stderr, proc.stderr


def test_pax_global_header(tmp_path, make_shard, run, expected_ls, summary):
    samples = [{"__key__": "000", "txt": b"a", "json": b"{}"}, {"__key__": "001", "txt": b"b"}]
    path = make_shard(tmp_path / "global.tar", samples, global_pax={"comment": "made by a test"})
    proc = run(["ls", path])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(samples)
    assert summary(proc.stderr)["samples"] == 2


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "seekable"])
def test_pax_size_record(tmp_path, make_shard, run, expected_ls, stream):
    """A pax "size" record overrides the ustar size field (tarfile then
    writes 0 there), as for members over 8 GiB."""
    samples = [{"__key__": f"{i:03d}", "bin": blob(1000 + i, i), "txt": b"x" * i}
               for i in range(4)]
    pax = {f"{i:03d}.bin": {"size": str(1000 + i)} for i in range(4)}
    path = make_shard(tmp_path / "pax.tar", samples, pax_headers=pax, stream=stream)
    with tarfile.open(path) as tf:  # the record is really there
        assert tf.getmember("002.bin").pax_headers.get("size") == "1002"
    proc = run(["ls", path])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(samples)
    cat = run(["cat", path, "002.bin"], text=False)
    assert cat.returncode == 0 and cat.stdout == blob(1002, 2)


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT],
                         ids=["python-pax", "python-gnu"])
def test_utf8_keys(tmp_path, make_shard, run, expected_ls, fmt):
    samples = [{"__key__": "caf\u00e9/\u00e9t\u00e9-001", "txt": b"ete"},
               {"__key__": "\u6570\u636e/002", "JPG": blob(40, 9)}]
    path = make_shard(tmp_path / "utf8.tar", samples, fmt)
    proc = run(["ls", path])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected_ls(samples)


@pytest.mark.parametrize("suffix", ["gz", "bz2", "xz", "zst"])
def test_compressed_shard(tmp_path, make_shard, compress, run, suffix):
    samples = flavour_samples(very_long=True)
    plain = make_shard(tmp_path / "shard.tar", samples)
    packed = compress(plain, suffix)
    want = run(["ls", plain])
    got = run(["ls", packed])
    assert want.returncode == 0 and got.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    assert got.stderr.splitlines()[-1] == want.stderr.splitlines()[-1]
    cat = run(["cat", packed, "edge.block1"], text=False)
    assert cat.returncode == 0 and cat.stdout == blob(513, 6)
