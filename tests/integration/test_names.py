# SPDX-License-Identifier: MIT
"""Keys are bytes: `stoker pack --flat` and `stoker reshard` write member
names exactly as they were read (é, ü, CJK, bytes that are not UTF-8, names
too long for a ustar header), whatever the locale, and the same bytes in
every locale."""
import os
import tarfile

import pytest

LOCALES = ("C", "C.UTF-8")

# Keys as bytes, as file names and tar members hold them.
KEYS = [
    b"plain-0001",
    "dir-é/s0000200-ü".encode(),
    "中文/キー-0002".encode(),
    b"latin1-\xe9t\xe9/k\xffy",                      # not UTF-8
    ("é" * 60 + "/" + "ü" * 40 + "-long").encode(),  # > 100 bytes: a pax path
    b"\xe9" * 70 + b"/" + b"\xfc" * 50 + b"-bin",     # both
]


def read_names(paths):
    """{member name as bytes: data} of the shards, as Python's tarfile reads them."""
    out = {}
    for path in paths:
        with tarfile.open(path, encoding="utf-8", errors="surrogateescape") as tf:
            for m in tf.getmembers():
                out[m.name.encode("utf-8", "surrogateescape")] = tf.extractfile(m).read()
    return out


def expected():
    return {key + ext: key[-4:] + ext for key in KEYS for ext in (b".cls", b".txt")}


@pytest.fixture
def flat_dir(tmp_path):
    root = os.fsencode(tmp_path / "in")
    for name, data in expected().items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return tmp_path / "in"


def shards_in(directory):
    return sorted(p for p in directory.iterdir() if p.name.endswith(".tar"))


@pytest.mark.parametrize("locale", LOCALES)
def test_pack_flat_keeps_the_bytes_of_names(run, flat_dir, tmp_path, locale):
    out = tmp_path / "out"
    out.mkdir()
    proc = run(["pack", "--flat", "--max-samples", "2", "-o", out / "t-%02d.tar", flat_dir],
               env={"LC_ALL": locale})
    assert proc.returncode == 0, proc.stderr
    assert read_names(shards_in(out)) == expected()


@pytest.mark.parametrize("locale", LOCALES)
def test_reshard_keeps_the_bytes_of_names(run, flat_dir, tmp_path, locale):
    """reshard reads the names with the loader and writes them back."""
    packed = tmp_path / "packed"
    packed.mkdir()
    assert run(["pack", "--flat", "-o", packed / "p-%d.tar", flat_dir]).returncode == 0
    out = tmp_path / "out"
    out.mkdir()
    proc = run(["reshard", "--max-samples", "3", "-o", out / "r-%d.tar", packed / "p-0.tar"],
               env={"LC_ALL": locale})
    assert proc.returncode == 0, proc.stderr
    assert read_names(shards_in(out)) == expected()
    assert len(shards_in(out)) == 2


def test_same_bytes_in_every_locale(run, flat_dir, tmp_path):
    got = []
    for locale in LOCALES:
        out = tmp_path / locale
        out.mkdir()
        proc = run(["pack", "--flat", "-o", out / "t-%d.tar", flat_dir], env={"LC_ALL": locale})
        assert proc.returncode == 0, proc.stderr
        got.append((out / "t-0.tar").read_bytes())
    assert got[0] == got[1]
    # Valid UTF-8 names are written as pax says (UTF-8 path records), only
    # the others as bytes (hdrcharset=BINARY), as Python's tarfile does.
    with tarfile.open(tmp_path / "C" / "t-0.tar", encoding="utf-8",
                      errors="surrogateescape") as tf:
        binary = {m.name for m in tf.getmembers() if m.pax_headers.get("hdrcharset") == "BINARY"}
    assert binary == {os.fsdecode(KEYS[i] + ext) for i in (3, 5) for ext in (b".cls", b".txt")}

