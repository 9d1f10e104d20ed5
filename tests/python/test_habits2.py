# SPDX-License-Identifier: MIT
"""As users write it, round 2 (issue 26): an index found by the files it
names, not how they were spelled; class names; WebDataset's "jpg;png";
options that act or are refused; the member a skipped sample lacks; len()
with no prior command, its index built once per dataset."""
import os
import subprocess

import pytest

import stoker

SMALL = dict(batch_size=8, image_size=16, threads=1)


def make_index(stoker_bin, out, shards, cwd=None):
    subprocess.run([stoker_bin, "index", "-o", str(out), *shards], check=True,
                   capture_output=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize("indexed_as, read_as", [("relative", "absolute"),
                                                 ("absolute", "relative")])
def test_index_matches_shards_by_file_not_spelling(even_shards, stoker_bin, tmp_path,
                                                   monkeypatch, indexed_as, read_as):
    shard_dir = os.path.dirname(even_shards[0])
    names = [os.path.basename(s) for s in even_shards]
    spelled = {"relative": names, "absolute": even_shards}
    index = tmp_path / "index.json"
    make_index(stoker_bin, index, spelled[indexed_as], cwd=shard_dir)
    monkeypatch.chdir(shard_dir)
    with stoker.Loader(spelled[read_as], index=index, **SMALL) as loader:
        assert len(loader) == 120 // 8
        assert sum(len(labels) for _, labels in loader) == 120
    # Relative entries are written relative to the index file's directory
    # and taken from there (issue 35), so the index serves any working
    # directory.
    monkeypatch.chdir(tmp_path)
    if indexed_as == "relative":
        with stoker.Loader(even_shards, index=index, **SMALL) as loader:
            assert len(loader) == 120 // 8
        beside = tmp_path / "beside"
        beside.mkdir()
        for name in names:
            os.symlink(os.path.join(shard_dir, name), beside / name)
        make_index(stoker_bin, beside / "index.json", names, cwd=beside)
    else:
        beside = tmp_path / "beside"
        beside.mkdir()
        make_index(stoker_bin, beside / "index.json", even_shards)
    with stoker.Loader(even_shards, index=beside / "index.json", **SMALL) as loader:
        assert len(loader) == 120 // 8


def write_members(path, samples):
    """A shard of (key, {ext: bytes}) samples."""
    import io
    import tarfile
    with tarfile.open(path, "w") as tf:
        for key, members in samples:
            for ext, data in members.items():
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return str(path)


def png_of(jpg):
    import io
    from PIL import Image
    out = io.BytesIO()
    Image.open(io.BytesIO(jpg)).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture
def mixed_shard(tmp_path, dataset):
    """Images as jpg or png, captions as txt or json, one sample without a caption."""
    jpg = dataset[0].jpg
    return write_members(tmp_path / "mixed.tar", [
        ("a", {"jpg": jpg, "txt": b"a cat", "cls": b"1"}),
        ("b", {"png": png_of(jpg), "json": b'{"caption": "a dog"}', "cls": b"2"}),
        ("c", {"jpg": jpg, "json": b'{"caption": "a cow"}', "cls": b"3"}),
        ("d", {"png": png_of(jpg), "cls": b"4"}),
    ])


def test_fields_take_webdataset_alternatives(mixed_shard):
    with stoker.Loader(mixed_shard, fields=("jpg;png", "txt;json?", "cls", "__key__"),
                       shuffle=False, **dict(SMALL, batch_size=4)) as loader:
        (images, captions, cls, keys), = list(loader)
    assert keys == ["a", "b", "c", "d"]
    assert images.shape == (4, 3, 16, 16) and images.float().std() > 0
    assert captions == ["a cat", {"caption": "a dog"}, {"caption": "a cow"}, None]
    assert cls.tolist() == [1, 2, 3, 4]
    # Required alternatives: a sample with neither is bad input, named.
    with pytest.raises(stoker.DataError, match=r"'d' has no txt;json member"):
        list(stoker.Loader(mixed_shard, fields=("jpg;png", "txt;json"), shuffle=False, **SMALL))
    with pytest.raises(stoker.OptionError, match="alternatives of the image"):
        stoker.Loader(mixed_shard, fields=("jpg;txt",), **SMALL)
    with pytest.raises(stoker.OptionError, match="empty alternative"):
        stoker.Loader(mixed_shard, fields=("jpg", "txt;"), **SMALL)


def test_require_members_beside_fields_acts(mixed_shard):
    """It used to be replaced by what fields= needs, and so ignored."""
    loader = stoker.Loader(mixed_shard, fields=("jpg;png", "__key__"), require_members="cls,txt",
                           shuffle=False, **SMALL)
    with pytest.raises(stoker.DataError, match=r"sample 'b' has no txt member"):
        list(loader)


def test_a_batch_of_bad_samples_names_the_missing_member(mixed_shard):
    """Under on_error=skip a batch with no good sample fails; its message
    named an image failure ("image cannot be decoded") for a missing txt."""
    loader = stoker.Loader(mixed_shard, fields=("jpg;png", "txt", "__key__"), shuffle=False,
                           on_error="skip", **dict(SMALL, batch_size=1))
    with pytest.raises(stoker.DataError) as caught:
        list(loader)
    message = str(caught.value)
    assert "sample 'b' has no txt member" in message, message
    assert "decoded" not in message and "image" not in message, message


def test_samples_refuses_image_options(even_shards):
    with pytest.raises(stoker.OptionError, match=r"Samples does not use image_size=.*raw"):
        stoker.Samples(even_shards, transform="train", image_size=64)
    with pytest.raises(stoker.OptionError, match=r"Samples does not use require_members="):
        stoker.Samples(even_shards, require_members="txt")


def test_loader_epoch_option_acts(even_shards):
    """epoch= was taken and ignored: the first iteration was epoch 0."""
    def first_labels(loader):
        with loader:
            return next(iter(loader))[1].tolist()
    moved = stoker.Loader(even_shards, **SMALL)
    moved.set_epoch(1)
    epoch1 = first_labels(moved)
    assert first_labels(stoker.Loader(even_shards, epoch=1, **SMALL)) == epoch1
    assert first_labels(stoker.Loader(even_shards, **SMALL)) != epoch1


def test_verify_refuses_options_it_would_ignore(even_shards):
    for name, value in (("batch_size", 3), ("image_size", 8), ("shuffle_buffer", 5),
                        ("samples_per_rank", 4), ("dtype", "float32")):
        with pytest.raises(stoker.OptionError, match=f"verify does not use {name}="):
            stoker.verify(even_shards, **{name: value})


def test_every_option_acts_or_is_refused_in_every_entry_point(even_shards, stoker_bin):
    """Walks the option table: each row is used by Samples and verify or
    refused there, naming it (Loader uses every row; what acts only
    beside another is test_option_pairs.py's); on the command line a command either offers the
    flag (--help lists it) or refuses it with a usage error naming it."""
    from stoker.loader import scope as _scope
    table = stoker._ext._stoker.options()
    names = {o["name"] for o in table}
    assert _scope.SAMPLES_REFUSES <= names and _scope.VERIFY_USES <= names
    for o in table:
        name = o["name"]
        value = 1 if o["type"] in ("int", "bool") else "1"
        if name in _scope.SAMPLES_REFUSES:
            with pytest.raises(stoker.OptionError, match=f"Samples does not use {name}="):
                stoker.Samples(even_shards, **{name: value})
        if name not in _scope.VERIFY_USES:
            with pytest.raises(stoker.OptionError, match=f"verify does not use {name}="):
                stoker.verify(even_shards, **{name: value})
    helps = {cmd: subprocess.run([stoker_bin, cmd, "--help"], capture_output=True, text=True,
                                 timeout=30).stdout for cmd in ("ls", "cat", "index", "verify")}
    for o in table:
        if o["cli"] is None:
            continue
        for cmd, text in helps.items():
            flag = "--" + o["cli"]
            if flag in text or ("--no-" + o["cli"]) in text:
                continue
            proc = subprocess.run([stoker_bin, cmd, flag, "1", even_shards[0]],
                                  capture_output=True, text=True, timeout=30)
            assert proc.returncode == 2, (cmd, flag, proc.stdout, proc.stderr)
            assert o["cli"] in proc.stderr, (cmd, flag, proc.stderr)


def test_classes_from_pack_beside_the_shards(tmp_path, dataset, stoker_bin):
    root = tmp_path / "folder"
    for c, name in enumerate(("cat", "dog", "emu")):
        (root / name).mkdir(parents=True)
        for i in range(2):
            (root / name / f"{i}.jpg").write_bytes(dataset[c * 2 + i].jpg)
    out = tmp_path / "shards"
    out.mkdir()
    # --sorted: the shard's order is the folder's, so each label can be
    # checked against the folder it came from
    subprocess.run([stoker_bin, "pack", "-q", "--sorted", "-o", str(out / "train-%06d.tar"),
                    "--classes", str(out / "classes.txt"), str(root)], check=True,
                   capture_output=True, timeout=60)
    urls = str(out / "train-000000.tar")
    with stoker.Loader(urls, shuffle=False, **SMALL) as loader:
        assert loader.classes == ["cat", "dog", "emu"]
        # as torchvision's reference: num_classes = len(dataset.classes)
        labels = [int(x) for _, b in loader for x in b]
        assert [loader.classes[x] for x in labels] == ["cat"] * 2 + ["dog"] * 2 + ["emu"] * 2
    assert stoker.Samples(urls).classes == ["cat", "dog", "emu"]
    assert stoker.Samples(urls, classes=["a", "b", "c"]).classes == ["a", "b", "c"]
    assert stoker.Loader(urls, classes=out / "classes.txt", **SMALL).classes == ["cat", "dog", "emu"]
    (out / "classes.txt").unlink()
    assert stoker.Loader(urls, **SMALL).classes is None


LEN_CHILD = r'''
import json, os, sys, stoker
loader = stoker.Loader(json.loads(sys.argv[1]), batch_size=8, image_size=16, threads=1)
print(json.dumps({"len": len(loader), "batches": sum(1 for _ in loader)}))
'''


def index_files(directory):
    return sorted(p for p in directory.iterdir()) if directory.exists() else []


def test_len_builds_the_index_once_per_dataset(uneven_shards, clean_env_factory, tmp_path):
    """len() on a fresh dataset with no prior command; the second process
    reuses the first one's index; two processes building at once leave one
    whole index and agree."""
    import json
    import sys
    where = tmp_path / "indexes"
    env = clean_env_factory(STOKER_INDEX_DIR=where)

    def start():
        return subprocess.Popen([sys.executable, "-c", LEN_CHILD, json.dumps(uneven_shards)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)

    def result(proc):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        return json.loads(out)

    first = result(start())
    assert first == {"len": 120 // 8, "batches": 120 // 8}
    made, = index_files(where)
    stamp = made.stat()
    assert result(start()) == first
    again = made.stat()
    assert (again.st_ino, again.st_mtime_ns) == (stamp.st_ino, stamp.st_mtime_ns)  # reused
    made.unlink()
    both = [start(), start()]
    assert [result(p) for p in both] == [first, first]
    assert [p.name for p in index_files(where)] == [made.name]  # one, no temporary left


def test_one_remembered_index_serves_every_loader_of_the_dataset(even_shards, tmp_path,
                                                                  monkeypatch):
    """A train and an eval loader, or two batch sizes, count the same
    samples: one index for them all; on_error (which changes counts) its own."""
    where = tmp_path / "indexes"
    monkeypatch.setenv("STOKER_INDEX_DIR", str(where))
    assert len(stoker.Loader(even_shards, **SMALL)) == 15
    made, = index_files(where)
    assert len(stoker.Loader(even_shards, transform="eval", batch_size=4, image_size=24,
                             shuffle=False, threads=1)) == 30
    assert index_files(where) == [made]
    assert len(stoker.Loader(even_shards, on_error="skip", **SMALL)) == 15
    assert len(index_files(where)) == 2


def test_len_rebuilds_a_stale_remembered_index(tmp_path, dataset, monkeypatch):
    from conftest import write_shard
    monkeypatch.setenv("STOKER_INDEX_DIR", str(tmp_path / "indexes"))
    shard = tmp_path / "s.tar"
    write_shard(shard, dataset[:10])
    assert len(stoker.Loader(str(shard), **SMALL)) == 2
    write_shard(shard, dataset[:20])
    assert len(stoker.Loader(str(shard), **SMALL)) == 3


def test_index_path_is_built_when_missing(even_shards, tmp_path):
    path = tmp_path / "sub" / "train.idx"
    with stoker.Loader(even_shards, index=path, **SMALL) as loader:
        assert len(loader) == 15
    assert path.is_file()


def test_len_of_remote_shards_says_what_it_costs():
    loader = stoker.Loader("http://127.0.0.1:9/a.tar", on_error="skip", **SMALL)
    with pytest.raises(TypeError, match="index=PATH.*every byte"):
        len(loader)
