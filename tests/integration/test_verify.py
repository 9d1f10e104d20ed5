# SPDX-License-Identifier: MIT
"""`stoker verify`: every bad sample and shard of a dataset, one line each
naming the shard and the key or offset, a summary, and an exit status that
says whether anything was wrong. It never stops at the first problem."""
import io
import tarfile

import pytest
from PIL import Image

GOOD = 5  # good samples per shard


def jpeg(seed, size=(40, 30)):
    img = Image.effect_noise(size, 30 + seed).convert("RGB")
    out = io.BytesIO()
    img.save(out, "JPEG", quality=85)
    return out.getvalue()


def good_samples(prefix):
    return [{"__key__": f"{prefix}{i:04d}", "cls": str(i).encode(), "jpg": jpeg(i)}
            for i in range(GOOD)]


@pytest.fixture
def clean(tmp_path, make_shard):
    return [make_shard(tmp_path / f"clean-{k}.tar", good_samples(f"c{k}-")) for k in range(2)]


@pytest.fixture
def damaged(tmp_path, make_shard):
    """One shard holding one sample of each kind of bad image or label
    among good ones, and one shard cut off in the middle of a member."""
    bad = good_samples("d-")
    data = jpeg(99)
    bad.insert(1, {"__key__": "d-corrupt", "cls": b"1",
                   "jpg": data[:2] + bytes(range(256)) * 4})
    bad.insert(3, {"__key__": "d-truncated", "cls": b"1", "jpg": data[: len(data) // 2]})
    bad.append({"__key__": "d-nolabel", "jpg": data})
    bad.append({"__key__": "d-noimage", "cls": b"3", "txt": b"just text"})
    bad.append({"__key__": "d-badlabel", "cls": b"seven", "jpg": data})
    images = make_shard(tmp_path / "damaged-images.tar", bad)
    whole = make_shard(tmp_path / "cut.tar", good_samples("t-"), tarfile.GNU_FORMAT).read_bytes()
    cut = tmp_path / "cut-short.tar"
    cut.write_bytes(whole[: len(whole) // 2 + 100])
    return images, cut


def test_clean_dataset(run, clean):
    proc = run(["verify", "--threads", "2", *map(str, clean)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (f"{2 * GOOD} samples in 2 shards, {2 * GOOD} images decoded: "
                           "0 bad samples, 0 shards not read to the end\n")


def test_every_problem_listed(run, clean, damaged):
    images, cut = damaged
    proc = run(["verify", "--threads", "3", str(images), str(cut), *map(str, clean)])
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    problems, summary = lines[:-1], lines[-1]
    by_key = {}
    for line in problems:
        for key in ("d-corrupt", "d-truncated", "d-nolabel", "d-noimage", "d-badlabel"):
            if f"'{key}'" in line:
                by_key.setdefault(key, []).append(line)
    assert sorted(by_key) == ["d-badlabel", "d-corrupt", "d-noimage", "d-nolabel",
                              "d-truncated"], proc.stdout
    for key, found in by_key.items():
        assert len(found) == 1 and str(images) in found[0], found
    assert "truncated" in by_key["d-truncated"][0]
    assert "no label member" in by_key["d-nolabel"][0]
    assert "no jpg, jpeg or png member" in by_key["d-noimage"][0]
    assert "not an integer" in by_key["d-badlabel"][0]
    cut_lines = [x for x in problems if str(cut) in x]
    assert cut_lines and all("offset" in x for x in cut_lines), problems
    # damaged-images: 5 good + 5 bad; cut-short: 3 good, then t-0003 cut in
    # its jpg header (bad) ends the shard; the clean shards: 10 good
    assert summary == ("24 samples in 4 shards, 18 images decoded: 6 bad samples, "
                       "1 shards not read to the end"), summary


def test_no_labels_and_no_images(run, tmp_path, make_shard):
    unlabelled = make_shard(tmp_path / "u.tar", [{"__key__": f"u{i}", "jpg": jpeg(i)}
                                                 for i in range(3)])
    proc = run(["verify", str(unlabelled)])
    assert proc.returncode == 1 and proc.stdout.count("no label member") == 3, proc.stdout
    proc = run(["verify", "--no-labels", str(unlabelled)])
    assert proc.returncode == 0, proc.stdout
    text = make_shard(tmp_path / "t.tar", [{"__key__": f"t{i}", "txt": b"words"}
                                           for i in range(4)])
    proc = run(["verify", "--no-images", str(text)])
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout == "4 samples in 1 shards: 0 bad samples, 0 shards not read to the end\n"


def test_label_json_and_missing_shard(run, tmp_path, make_shard):
    shard = make_shard(tmp_path / "j.tar", [
        {"__key__": "j0", "json": b'{"label": 4}', "jpg": jpeg(0)},
        {"__key__": "j1", "json": b'{"other": 4}', "jpg": jpeg(1)},
    ])
    missing = tmp_path / "missing.tar"
    proc = run(["verify", "--label-json", "label", str(shard), str(missing)])
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert any("'j1'" in x and "no integer field 'label'" in x for x in lines), lines
    assert any(str(missing) in x and "shard not read" in x for x in lines), lines
    assert lines[-1] == ("2 samples in 1 shards, 1 images decoded: 1 bad samples, "
                         "1 shards not read to the end"), lines


def test_usage(run):
    assert run(["verify"]).returncode == 2
    assert run(["verify", "--cache-dir", "/tmp/x", "--cache-size", "1G", "a.tar"]).returncode == 2


def concatenated(tmp_path, make_shard, name="cat.tar"):
    """`cat a.tar b.tar`: tar readers stop at a's end-of-archive marker, so
    b's samples would be dropped without a word."""
    a = make_shard(tmp_path / "a.tar", good_samples("a-")).read_bytes()
    b = make_shard(tmp_path / "b.tar", good_samples("b-")).read_bytes()
    path = tmp_path / name
    path.write_bytes(a + b)
    return path, len(a)


def test_data_after_end_of_archive(run, tmp_path, make_shard, summary):
    path, end = concatenated(tmp_path, make_shard)
    proc = run(["verify", str(path)])
    assert proc.returncode == 1, proc.stdout
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, lines
    assert f"{path}: data after the end-of-archive marker at offset {end}" in lines[0]
    assert lines[1] == (f"{GOOD} samples in 1 shards, {GOOD} images decoded: 0 bad samples, "
                        "1 shards not read to the end")
    # The loader does not drop it silently either: an error, or under the
    # skip policy a failed shard after the first archive's samples.
    ls = run(["ls", str(path)])
    assert ls.returncode == 1 and "end-of-archive" in ls.stderr
    assert len(ls.stdout.splitlines()) == GOOD
    ls = run(["ls", "--on-error", "skip", str(path)])
    assert ls.returncode == 0
    counts = summary(ls.stderr)
    assert counts["samples"] == GOOD and counts["shards_failed"] == 1, ls.stderr


@pytest.mark.parametrize("how", ["tar-then-gzip", "gzip-members", "bz2", "xz", "zst"])
def test_data_after_end_of_archive_compressed(run, tmp_path, make_shard, compress, how):
    """Whatever the compression (each is decompressed below the tar reader)."""
    import gzip
    plain, end = concatenated(tmp_path, make_shard)
    packed = tmp_path / "cat.tar.gz"
    if how in ("bz2", "xz", "zst"):
        packed = compress(plain, how)
    elif how == "tar-then-gzip":
        packed.write_bytes(gzip.compress(plain.read_bytes()))
    else:  # cat a.tar.gz b.tar.gz
        data = plain.read_bytes()
        packed.write_bytes(gzip.compress(data[:end]) + gzip.compress(data[end:]))
    proc = run(["verify", "--no-images", str(packed)])
    assert proc.returncode == 1, proc.stdout
    assert (f"{packed}: data after the end-of-archive marker at offset {end} of the "
            "decompressed stream") in proc.stdout, proc.stdout


def test_trailing_zeros_are_padding(run, tmp_path, make_shard):
    path = make_shard(tmp_path / "padded.tar", good_samples("p-"))
    with open(path, "ab") as f:
        f.write(b"\0" * 100_000 + b"\0" * 7)
    proc = run(["verify", str(path)])
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("content", ["ignored", "empty"])
def test_shard_without_samples(run, tmp_path, make_shard, content):
    """A shard whose members are all ignored (no key: directories, files
    without a dot), or that has none, trains nothing: verify says so. The
    loader reads it as the empty shard it is."""
    extra = [(0, "dir", "dir", None), (0, "file", "README", b"x"),
             (0, "file", "dir/LICENSE", b"y")] if content == "ignored" else []
    shard = make_shard(tmp_path / "nothing.tar", [], extra=extra)
    clean = make_shard(tmp_path / "clean.tar", good_samples("c-"))
    proc = run(["verify", str(shard), str(clean)])
    assert proc.returncode == 1, proc.stdout
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, lines
    if content == "ignored":
        assert lines[0] == (f"{shard}: no samples: its 3 members are all ignored (directories, "
                            "links, names without a key such as 'dir/')")
    else:
        assert lines[0] == f"{shard}: no samples: the shard has no members"
    assert lines[1] == (f"{GOOD} samples in 2 shards, {GOOD} images decoded: 0 bad samples, "
                        "0 shards not read to the end, 1 shards without samples")
    ls = run(["ls", str(shard), str(clean)])
    assert ls.returncode == 0, ls.stderr


def test_problem_lines_stay_whole_across_threads(run, tmp_path, make_shard):
    """Problems come from several threads at once; each is one whole line
    (the escaping printer writes a line under one lock of stdout)."""
    shards = [make_shard(tmp_path / f"many-{k}.tar",
                         [{"__key__": f"k{k}-{i:03d}\nx", "txt": b"t"} for i in range(40)])
              for k in range(8)]
    proc = run(["verify", "--threads", "8", "--no-labels", *map(str, shards)])
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 8 * 40 + 1
    for line in lines[:-1]:
        assert line.startswith(str(tmp_path / "many-")) and "\\nx'" in line, line
