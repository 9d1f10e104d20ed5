# SPDX-License-Identifier: MIT
"""stoker.Samples and Batch.samples(): a member whose extension is not
UTF-8, or named KEY.__key__ / KEY.__url__ (which would overwrite the
sample's metadata; WebDataset refuses them), is a bad sample like any
other: under on_error="fail" a stoker.DataError naming the shard and the
key, under on_error="skip" left out and counted, never a bare
UnicodeDecodeError that ends the iteration."""
import io
import tarfile

import pytest

import stoker


def write_tar(path, members):
    """members: (name as bytes, data bytes); names are written as they are."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name.decode("utf-8", "surrogateescape"))
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return str(path)


def shard_with(tmp_path, bad_member, name="bad.tar"):
    """Samples a, b, c; b also has bad_member (a name without the key)."""
    members = [(b"a.txt", b"A"), (b"a.cls", b"0"),
               (b"b.txt", b"B"), (b"b" + bad_member, b"evil"), (b"b.cls", b"1"),
               (b"c.txt", b"C"), (b"c.cls", b"2")]
    return write_tar(tmp_path / name, members)


BAD_MEMBERS = {
    "non-utf8": (b".jp\xff", "not UTF-8"),
    "key": (b".__key__", "__key__"),
    "url": (b".__url__", "__url__"),
    "upper-key": (b".__KEY__", "__key__"),  # extensions are lower-cased first
}


@pytest.mark.parametrize("kind", sorted(BAD_MEMBERS))
def test_fail_names_the_shard_and_the_key(tmp_path, kind):
    member, what = BAD_MEMBERS[kind]
    path = shard_with(tmp_path, member)
    got = []
    with pytest.raises(stoker.DataError) as info:
        for d in stoker.Samples([path], shuffle=False):
            got.append(d["__key__"])
    message = str(info.value)
    assert path in message and "'b'" in message and what in message, message
    assert not isinstance(info.value, UnicodeError)
    assert got == ["a"] or got == []  # nothing after the bad sample, no metadata overwritten


@pytest.mark.parametrize("kind", sorted(BAD_MEMBERS))
def test_skip_leaves_the_sample_out(tmp_path, kind):
    member, _ = BAD_MEMBERS[kind]
    path = shard_with(tmp_path, member)
    got = list(stoker.Samples([path], shuffle=False, on_error="skip"))
    assert [d["__key__"] for d in got] == ["a", "c"]
    assert all(d["__url__"] == path for d in got)
    assert [d["txt"] for d in got] == [b"A", b"C"]


def test_skipped_samples_are_counted(tmp_path):
    path = shard_with(tmp_path, b".__url__")
    c = stoker._ext._stoker.Loader([path], shuffle=0, on_error="skip", batch_size=8)
    batch = c.next()
    assert [d["__key__"] for d in batch.samples()] == ["a", "c"]
    stats = c.stats()
    assert stats["samples_skipped"] == 1 and stats["samples"] == 2, stats
    assert [d["__key__"] for d in batch.samples()] == ["a", "c"]  # counted once per sample
    assert c.stats()["samples_skipped"] == 1
    c.close()


def test_metadata_never_overwritten_in_batch_samples(tmp_path):
    """The same through the Loader's raw batches (Batch.samples())."""
    path = shard_with(tmp_path, b".__key__")
    c = stoker._ext._stoker.Loader([path], shuffle=0, batch_size=8)
    batch = c.next()
    with pytest.raises(stoker.DataError, match="__key__"):
        batch.samples()
    c.close()


def test_non_utf8_keys_still_work(tmp_path):
    """Keys are file names: not UTF-8 is fine there (surrogateescape, as
    os.fsdecode and tarfile give them)."""
    path = write_tar(tmp_path / "k.tar", [(b"k\xe9y.txt", b"x"), (b"ok.txt", b"y")])
    got = list(stoker.Samples([path], shuffle=False))
    assert [d["__key__"] for d in got] == ["k\udce9y", "ok"]
