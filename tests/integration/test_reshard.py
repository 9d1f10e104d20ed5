# SPDX-License-Identifier: MIT
"""`stoker reshard`: the same samples, byte for byte, in new shards of other
sizes, in storage order or a seeded shuffle; bad input follows --on-error."""
import tarfile

import pytest


def samples(prefix, n):
    return [{"__key__": f"{prefix}{i:03d}", "cls": str(i).encode(),
             "txt": f"caption {prefix}{i}".encode() * (i + 1)} for i in range(n)]


@pytest.fixture
def sources(tmp_path, make_shard):
    return [make_shard(tmp_path / "a.tar", samples("a", 5)),
            make_shard(tmp_path / "b.tar", samples("b", 4))]


def read(paths):
    """[(key, {ext: bytes})] in storage order."""
    out = []
    for path in paths:
        with tarfile.open(path) as tf:
            for m in tf.getmembers():
                key, _, ext = m.name.partition(".")
                if not out or out[-1][0] != key:
                    out.append((key, {}))
                out[-1][1][ext] = tf.extractfile(m).read()
    return out


def reshard(run, out_dir, sources, *extra):
    out_dir.mkdir()
    proc = run(["reshard", "-o", str(out_dir / "r-%02d.tar"), *extra, *map(str, sources)])
    assert proc.returncode == 0, proc.stderr
    return sorted(out_dir.glob("r-*.tar"))


def test_storage_order(run, sources, tmp_path):
    shards = reshard(run, tmp_path / "o", sources, "--max-samples", "4", "--sorted")
    assert [p.name for p in shards] == ["r-00.tar", "r-01.tar", "r-02.tar"]
    assert read(shards) == read(sources)
    assert [len(read([p])) for p in shards] == [4, 4, 1]


def test_seeded_shuffle(run, sources, tmp_path):
    first = read(reshard(run, tmp_path / "s1", sources, "--shuffle", "--seed", "5"))
    again = read(reshard(run, tmp_path / "s2", sources, "--shuffle", "--seed", "5"))
    other = read(reshard(run, tmp_path / "s3", sources, "--shuffle", "--seed", "6"))
    original = read(sources)
    assert first == again == read(reshard(run, tmp_path / "s4", sources, "--seed", "5"))
    # shuffled by default, with seed 0
    assert read(reshard(run, tmp_path / "s5", sources)) == read(
        reshard(run, tmp_path / "s6", sources, "--shuffle", "--seed", "0")) != original
    assert sorted(first) == sorted(other) == sorted(original)
    assert first != original and first != other


def test_bad_input_follows_on_error(run, sources, tmp_path, make_shard):
    whole = sources[1].read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole[: len(whole) // 2 + 100])
    out = tmp_path / "fail"
    out.mkdir()
    proc = run(["reshard", "--sorted", "-o", str(out / "r-%d.tar"), str(sources[0]), str(cut)])
    assert proc.returncode == 1 and str(cut) in proc.stderr
    assert not list(out.glob("*.tmp"))  # no half-written shard left behind
    shards = reshard(run, tmp_path / "skip", [sources[0], cut], "--on-error", "skip", "--sorted")
    assert "bad samples" in run(["reshard", "-o", str(tmp_path / "x-%d.tar"), "--on-error",
                                 "skip", str(sources[0]), str(cut)]).stdout
    got = read(shards)
    assert got[:5] == read([sources[0]]) and 5 < len(got) < 9


def test_usage(run, sources, tmp_path):
    assert run(["reshard", str(sources[0])]).returncode == 2
    assert run(["reshard", "-o", str(tmp_path / "no-number.tar"), str(sources[0])]).returncode == 2


def test_existing_output_is_refused_and_force_replaces_it(run, sources, tmp_path):
    out = tmp_path / "o"
    assert len(reshard(run, out, sources, "--max-samples", "2", "--sorted")) == 5
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    pattern = str(out / "r-%02d.tar")
    proc = run(["reshard", "-o", pattern, "--max-samples", "4", *map(str, sources)])
    assert proc.returncode == 1 and "r-00.tar" in proc.stderr and "--force" in proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    proc = run(["reshard", "-o", pattern, "--max-samples", "4", "--force", "--sorted",
                *map(str, sources)])
    assert proc.returncode == 0, proc.stderr
    assert "removed 2 shard(s) of an earlier run" in proc.stderr
    shards = sorted(out.iterdir())
    assert [p.name for p in shards] == ["r-00.tar", "r-01.tar", "r-02.tar"]
    assert [k for k, _ in read(shards)] == [k for k, _ in read(sources)]


def test_sorted_refuses_a_shuffle_buffer(run, sources, tmp_path):
    """--sorted reads in storage order: a --shuffle-buffer given with it
    would be ignored, and is refused; reshard's own wider default buffer is
    no request. Its byte budget bounds the member bytes in flight with or
    without shuffle, so it is taken."""
    proc = run(["reshard", "--sorted", "--shuffle-buffer", "50", "-o",
                str(tmp_path / "r-%d.tar"), *map(str, sources)])
    assert proc.returncode != 0, proc.stderr
    assert "shuffle_buffer is set but acts only with shuffle" in proc.stderr
    proc = run(["reshard", "--sorted", "--shuffle-buffer-bytes", "1G", "-o",
                str(tmp_path / "b-%d.tar"), *map(str, sources)])
    assert proc.returncode == 0, proc.stderr
    assert read(reshard(run, tmp_path / "ok", sources, "--sorted")) == read(sources)
