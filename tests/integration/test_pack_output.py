# SPDX-License-Identifier: MIT
"""Where `stoker pack` and `stoker reshard` write: a missing output
directory is created (one that cannot be is named); a directory that holds
shards of another run - named like this run's shards, with any number or
width - is refused, or with --force left holding only this run's shards;
shards of another dataset beside them (another prefix) are left alone; a
run that fails leaves nothing, and with --force the earlier run intact."""
import tarfile

import pytest


def samples(prefix, n):
    return [{"__key__": f"{prefix}{i:03d}", "txt": f"{prefix} {i}".encode() * 50}
            for i in range(n)]


@pytest.fixture
def sources(tmp_path, make_shard):
    return [make_shard(tmp_path / "a.tar", samples("a", 5)),
            make_shard(tmp_path / "b.tar", samples("b", 4))]


@pytest.fixture
def flat(tmp_path):
    root = tmp_path / "flat"
    root.mkdir()
    for i in range(6):
        (root / f"k{i}.txt").write_bytes(b"x" * i)
    return root


def keys(paths):
    out = []
    for path in paths:
        with tarfile.open(path) as tf:
            out += [m.name for m in tf.getmembers()]
    return out


def listing(directory):
    return sorted(p.name for p in directory.iterdir())


def write(run, command, flat, sources, pattern, *extra):
    args = ["pack", "--flat", *extra, "-o", pattern, flat] if command == "pack" else \
        ["reshard", *extra, "-o", pattern, *sources]
    return run(args)


@pytest.mark.parametrize("command", ["pack", "reshard"])
def test_a_missing_output_directory_is_created(run, flat, sources, tmp_path, command):
    out = tmp_path / "new" / "deeper"
    proc = write(run, command, flat, sources, out / "t-%03d.tar", "--max-samples", "4")
    assert proc.returncode == 0, proc.stderr
    assert listing(out) == ["t-000.tar", "t-001.tar"] + (["t-002.tar"] if command == "reshard"
                                                       else [])


@pytest.mark.parametrize("command", ["pack", "reshard"])
def test_a_directory_that_cannot_be_made_is_named(run, flat, sources, tmp_path, command):
    (tmp_path / "a-file").write_bytes(b"")
    proc = write(run, command, flat, sources, tmp_path / "a-file" / "out" / "t-%d.tar")
    assert proc.returncode == 1, proc.stderr
    assert str(tmp_path / "a-file" / "out") in proc.stderr
    assert "cannot create the output directory" in proc.stderr


@pytest.mark.parametrize("command", ["pack", "reshard"])
def test_shards_of_another_run_are_refused(run, flat, sources, tmp_path, command):
    """Written before with another width and more shards: a glob of the
    family (out/t-*.tar) would read both runs."""
    out = tmp_path / "out"
    first = write(run, command, flat, sources, out / "t-%06d.tar", "--max-samples", "1")
    assert first.returncode == 0, first.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    old_keys = sorted(keys(out / n for n in before))
    again = write(run, command, flat, sources, out / "t-%02d.tar", "--max-samples", "3")
    assert again.returncode == 1
    assert str(out / "t-000000.tar") in again.stderr and "--force" in again.stderr, again.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before

    forced = write(run, command, flat, sources, out / "t-%02d.tar", "--max-samples", "3",
                   "--force")
    assert forced.returncode == 0, forced.stderr
    assert f"removed {len(before)} shard(s) of an earlier run" in forced.stderr, forced.stderr
    new = listing(out)
    assert new == [f"t-{i:02d}.tar" for i in range(len(new))]
    assert sorted(keys(out / n for n in new)) == old_keys


@pytest.mark.parametrize("command", ["pack", "reshard"])
def test_another_dataset_beside_it_is_left_alone(run, flat, sources, tmp_path, command):
    out = tmp_path / "out"
    assert write(run, command, flat, sources, out / "val-%d.tar").returncode == 0
    (out / "notes.tar.txt").write_bytes(b"mine")
    (out / "train-x.tar").write_bytes(b"not a number")
    val = {p.name: p.read_bytes() for p in out.iterdir()}
    for extra in ([], ["--force"]):
        proc = write(run, command, flat, sources, out / "train-%d.tar", *extra)
        assert proc.returncode == 0, proc.stderr
    assert {n: (out / n).read_bytes() for n in val} == val
    assert "train-0.tar" in listing(out)


def test_a_failed_reshard_leaves_no_shard(run, make_shard, tmp_path):
    """The first shards were finished when a bad shard stops the run: none
    of them is left (they would read as a whole, smaller dataset), nor the
    directory the run made; with --force the earlier run stays as it was."""
    good = make_shard(tmp_path / "a.tar", samples("a", 6))
    cut = tmp_path / "cut.tar"
    big = [{"__key__": f"b{i}", "txt": b"y" * 3000} for i in range(3)]
    cut.write_bytes(make_shard(tmp_path / "b.tar", big).read_bytes()[:5000])  # in b1's data
    out = tmp_path / "made" / "out"
    proc = run(["reshard", "--max-samples", "2", "-o", out / "r-%d.tar", good, cut])
    assert proc.returncode == 1 and str(cut) in proc.stderr
    assert not (tmp_path / "made").exists()

    out.mkdir(parents=True)
    assert run(["reshard", "--max-samples", "4", "-o", out / "r-%d.tar", good]).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = run(["reshard", "--max-samples", "1", "--force", "-o", out / "r-%d.tar", good, cut])
    assert proc.returncode == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_pack_that_fails_leaves_nothing(run, tmp_path):
    """An image that cannot be read (a dangling link in a class directory)."""
    root = tmp_path / "folder"
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "broken.jpg").symlink_to(tmp_path / "nothing")
    out = tmp_path / "out"
    proc = run(["pack", "--classes", tmp_path / "classes.txt", "-o", out / "s-%d.tar", root])
    assert proc.returncode == 1 and "broken.jpg" in proc.stderr, proc.stderr
    assert not (tmp_path / "classes.txt").exists() and not out.exists()
