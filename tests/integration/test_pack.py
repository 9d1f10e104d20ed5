# SPDX-License-Identifier: MIT
"""`stoker pack`: an ImageFolder tree or files grouped by key into WebDataset
shards that WebDataset-style readers (Python's tarfile here) and stoker
itself read back sample for sample."""
import io
import os
import shutil
import subprocess
import tarfile

import pytest
from PIL import Image


def jpeg(seed):
    """A small JPEG, the same bytes for the same seed."""
    out = io.BytesIO()
    img = Image.linear_gradient("L").rotate(seed * 37).resize((24 + seed, 16)).convert("RGB")
    img.save(out, "JPEG", quality=90)
    return out.getvalue()


@pytest.fixture
def image_folder(tmp_path):
    """classes b_dog (3 images, one in a subdirectory, one .JPEG) and
    a_cat (2 images), plus a text file, a file beside the classes and a
    hidden file to leave out."""
    root = tmp_path / "folder"
    files = {"a_cat/1.jpg": jpeg(1), "a_cat/2.png": None, "b_dog/x.jpg": jpeg(3),
             "b_dog/deep/y.JPEG": jpeg(4), "b_dog/z.jpg": jpeg(5)}
    png = io.BytesIO()
    Image.new("RGB", (9, 9), (1, 2, 3)).save(png, "PNG")
    files["a_cat/2.png"] = png.getvalue()
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "b_dog/readme.txt").write_text("not an image")
    (root / "LICENSE").write_text("beside the classes")
    (root / "a_cat/.hidden.jpg").write_bytes(jpeg(9))
    return root, files


def test_fifo_and_socket_listed_not_dropped(run, image_folder, tmp_path):
    """A FIFO (and a socket) in the tree is not a file to pack: it is listed
    as left out and counted, in both layouts, and never opened (which
    would block on the FIFO). One shard: the summary names it."""
    import socket
    root, _ = image_folder
    os.mkfifo(root / "b_dog/pipe.jpg")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "a_cat/sock.jpg"))
    try:
        out = tmp_path / "out"
        proc = run(["pack", "-o", str(out / "train-%04d.tar"), str(root)], timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert "not a regular file (a FIFO), left out: b_dog/pipe.jpg" in proc.stderr
        assert "not a regular file (a socket), left out: a_cat/sock.jpg" in proc.stderr
        assert "4 files left out (listed above)" in proc.stderr
        assert proc.stdout == f"5 samples in 1 shards: {out}/train-0000.tar\n"
        tree = tmp_path / "flat"
        tree.mkdir()
        (tree / "a.jpg").write_bytes(jpeg(1))
        os.mkfifo(tree / "b.jpg")
        flat = run(["pack", "--flat", "-o", str(tmp_path / "flat-%d.tar"), str(tree)], timeout=30)
        assert flat.returncode == 0, flat.stderr
        assert "not a regular file (a FIFO), left out: b.jpg" in flat.stderr
        assert "1 files left out (listed above)" in flat.stderr
        assert flat.stdout == f"1 samples in 1 shards: {tmp_path}/flat-0.tar\n"
    finally:
        sock.close()


def read_samples(paths):
    """[(key, {ext: bytes})] in storage order, as WebDataset groups them."""
    samples = []
    for path in paths:
        with tarfile.open(path) as tf:
            for m in tf.getmembers():
                assert m.isfile() and m.mode == 0o444, m
                key, _, ext = m.name.partition(".")
                if not samples or samples[-1][0] != key:
                    samples.append((key, {}))
                samples[-1][1][ext] = tf.extractfile(m).read()
    return samples


def test_image_folder(run, image_folder, tmp_path):
    root, files = image_folder
    out = tmp_path / "out"
    out.mkdir()
    proc = run(["pack", "-o", str(out / "train-%04d.tar"), "--max-samples", "2", "--sorted",
                "--classes", str(out / "classes.txt"), str(root)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"5 samples in 3 shards: {out}/train-0000.tar .. {out}/train-0002.tar\n"
    assert "not an image (jpg, jpeg, png), left out: b_dog/readme.txt" in proc.stderr
    assert "not in a class directory, left out: LICENSE" in proc.stderr
    assert "2 files left out (listed above)" in proc.stderr
    shards = sorted(out.glob("train-*.tar"))
    assert [s.name for s in shards] == ["train-0000.tar", "train-0001.tar", "train-0002.tar"]
    assert (out / "classes.txt").read_text() == "a_cat\nb_dog\n"
    samples = read_samples(shards)
    # sorted classes, then sorted paths within each; images lower-cased
    want = [("a_cat/1.jpg", "jpg", 0), ("a_cat/2.png", "png", 0), ("b_dog/deep/y.JPEG", "jpeg", 1),
            ("b_dog/x.jpg", "jpg", 1), ("b_dog/z.jpg", "jpg", 1)]
    assert [k for k, _ in samples] == [f"{i:08d}" for i in range(5)]
    for (key, members), (rel, ext, label) in zip(samples, want):
        assert list(members) == sorted(members) == sorted(["cls", ext]), members
        assert members[ext] == files[rel] and members["cls"] == str(label).encode()
    proc = run(["verify", *map(str, shards)])
    assert proc.returncode == 0, proc.stdout


def test_same_input_same_bytes_and_seeded_shuffle(run, image_folder, tmp_path):
    root, _ = image_folder

    def pack(name, *extra):
        (tmp_path / name).mkdir()
        proc = run(["pack", "-o", str(tmp_path / name / "s-%d.tar"), *extra, str(root)])
        assert proc.returncode == 0, proc.stderr
        return (tmp_path / name / "s-0.tar").read_bytes()

    plain, again = pack("a"), pack("b")
    assert plain == again
    # shuffled by default (seed 0); --sorted asks for the file order
    assert plain == pack("f", "--shuffle", "--seed", "0")
    assert plain != pack("g", "--sorted") == pack("h", "--sorted", "--seed", "7")
    shuffled = pack("c", "--shuffle", "--seed", "7")
    assert shuffled == pack("d", "--seed", "7")
    assert shuffled != plain and shuffled != pack("e", "--shuffle", "--seed", "8")

    def contents(data):
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            return sorted(tf.extractfile(m).read() for m in tf.getmembers())

    assert contents(shuffled) == contents(plain)  # the same members, reordered


def test_max_size_rolls_over(run, tmp_path):
    root = tmp_path / "f"
    for i in range(4):
        (root / "c").mkdir(parents=True, exist_ok=True)
        (root / "c" / f"{i}.jpg").write_bytes(jpeg(i))
    out = tmp_path / "o"
    out.mkdir()
    size = len(jpeg(3)) + 1  # holds one sample, not two
    proc = run(["pack", "-o", str(out / "%02d.tar"), "--max-size", str(size + 10), str(root)])
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["00.tar", "01.tar", "02.tar", "03.tar"]


def test_flat(run, tmp_path):
    root = tmp_path / "flat"
    (root / "a").mkdir(parents=True)
    (root / "a/x.jpg").write_bytes(jpeg(1))
    (root / "a/x.json").write_bytes(b'{"label": 3}')
    (root / "a/x-1.jpg").write_bytes(jpeg(2))
    (root / "a/y.seg.png").write_bytes(b"not checked")
    (root / "b.txt").write_bytes(b"text")
    out = tmp_path / "out"
    out.mkdir()
    proc = run(["pack", "--flat", "--sorted", "-o", str(out / "f-%d.tar"), str(root)])
    assert proc.returncode == 0, proc.stderr
    samples = read_samples([out / "f-0.tar"])
    assert samples == [("a/x-1", {"jpg": jpeg(2)}),
                       ("a/x", {"jpg": jpeg(1), "json": b'{"label": 3}'}),
                       ("a/y", {"seg.png": b"not checked"}), ("b", {"txt": b"text"})]
    (root / "noext").write_bytes(b"?")
    proc = run(["pack", "--flat", "-o", str(out / "g-%d.tar"), str(root)])
    assert proc.returncode == 1 and "noext: no extension" in proc.stderr
    assert not list(out.glob("g-*"))


def test_errors(run, image_folder, tmp_path):
    root, _ = image_folder
    assert run(["pack", "-o", str(tmp_path / "x.tar"), str(root)]).returncode == 2
    assert run(["pack", "-o", str(tmp_path / "%d-%d.tar"), str(root)]).returncode == 2
    assert run(["pack", str(root)]).returncode == 2
    proc = run(["pack", "-o", str(tmp_path / "%d.tar"), str(tmp_path / "missing")])
    assert proc.returncode == 1 and "missing" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = run(["pack", "-o", str(tmp_path / "%d.tar"), str(tmp_path / "empty")])
    assert proc.returncode == 1 and "no class directories" in proc.stderr
    (tmp_path / "a-file").write_bytes(b"")
    proc = run(["pack", "-o", str(tmp_path / "a-file" / "sub" / "%d.tar"), str(root)])
    assert proc.returncode == 1 and str(tmp_path / "a-file" / "sub") in proc.stderr, proc.stderr


def test_existing_shards_are_refused_and_force_replaces_them(run, image_folder, tmp_path):
    """A second run into the same pattern neither replaces the first run's
    shards without a word nor leaves its extra shards beside the new ones:
    it is refused (exit 1, nothing changed), and --force replaces the shards
    and removes the earlier run's shards numbered after the last one."""
    root, _ = image_folder
    out = tmp_path / "out"
    out.mkdir()
    pattern = str(out / "s-%d.tar")
    first = run(["pack", "-o", pattern, "--max-samples", "1", str(root)])
    assert first.returncode == 0 and "5 samples in 5 shards" in first.stdout, first.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = run(["pack", "-o", pattern, "--max-samples", "3", str(root)])
    assert again.returncode == 1
    assert str(out / "s-0.tar") in again.stderr and "--force" in again.stderr, again.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    forced = run(["pack", "-o", pattern, "--max-samples", "3", "--force", str(root)])
    assert forced.returncode == 0 and "5 samples in 2 shards" in forced.stdout, forced.stderr
    assert "removed 3 shard(s) of an earlier run" in forced.stderr, forced.stderr
    assert sorted(p.name for p in out.iterdir()) == ["s-0.tar", "s-1.tar"]  # no temporary file
    assert len(read_samples([out / "s-0.tar", out / "s-1.tar"])) == 5


def test_a_shard_after_the_last_one_written_is_an_error(run, image_folder, tmp_path):
    """Without --force, a shard of an earlier run right after this run's last
    one (the first ones removed by hand) would read as part of this run: the
    run is refused before anything is written."""
    root, _ = image_folder
    out = tmp_path / "out"
    out.mkdir()
    (out / "s-2.tar").write_bytes(b"an earlier run's shard")
    proc = run(["pack", "-o", str(out / "s-%d.tar"), "--max-samples", "3", str(root)])
    assert proc.returncode == 1 and str(out / "s-2.tar") in proc.stderr, proc.stderr
    assert "--force" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["s-2.tar"]
    assert (out / "s-2.tar").read_bytes() == b"an earlier run's shard"


def test_planted_links_are_not_followed(run, image_folder, tmp_path):
    """Symbolic links at the names stoker used to write through (NAME.tmp,
    index.json.tmp.PID) or at an output name: the files they point to stay
    unchanged; the link at the output name is refused without --force and
    replaced (the link, not its target) with it."""
    root, _ = image_folder
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    for i in range(5):
        (out / f"s-{i}.tar.tmp").symlink_to(victim)
    proc = run(["pack", "-o", str(out / "s-%d.tar"), "--max-samples", "1", str(root)])
    assert proc.returncode == 0, proc.stderr
    assert victim.read_bytes() == b"precious"
    assert all((out / f"s-{i}.tar.tmp").is_symlink() for i in range(5))
    assert len(read_samples([out / f"s-{i}.tar" for i in range(5)])) == 5

    (out / "t-0.tar").symlink_to(victim)
    proc = run(["pack", "-o", str(out / "t-%d.tar"), str(root)])
    assert proc.returncode == 1 and "t-0.tar" in proc.stderr
    proc = run(["pack", "-o", str(out / "t-%d.tar"), "--force", str(root)])
    assert proc.returncode == 0, proc.stderr
    assert victim.read_bytes() == b"precious" and not (out / "t-0.tar").is_symlink()
    assert len(read_samples([out / "t-0.tar"])) == 5

    # --classes is an output too
    (out / "classes.txt").symlink_to(victim)
    for force in ([], ["--force"]):
        proc = run(["pack", "-o", str(out / "u-%d.tar"), *force, "--classes",
                    str(out / "classes.txt"), str(root)])
        assert proc.returncode == 1 and "classes.txt" in proc.stderr, proc.stderr
        assert victim.read_bytes() == b"precious"
    assert not list(out.glob("u-*"))



def test_each_shard_is_synced_before_and_after_its_rename(run, stoker, image_folder, tmp_path):
    """Crash safety, seen from the system calls: every shard's file is
    fsynced before the shards are renamed into place (together, at the end
    of the run), and their directory after; the index likewise."""
    strace = shutil.which("strace")
    if strace is None or subprocess.run([strace, "-o", "/dev/null", "true"]).returncode != 0:
        pytest.skip("strace is missing or cannot trace here (tools/install_deps.sh installs it)")
    root, _ = image_folder
    out = tmp_path / "out"
    out.mkdir()
    log = tmp_path / "trace"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")  # LeakSanitizer cannot run traced
    for args in (["pack", "-o", str(out / "s-%d.tar"), "--max-samples", "2", str(root)],
                 ["index", "-o", str(out / "index.json"), str(out / "s-{0..2}.tar")]):
        proc = subprocess.run([strace, "-f", "-o", str(log), "-e",
                               "trace=fsync,fdatasync,rename,renameat,renameat2,link,linkat",
                               str(stoker), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
        calls = [line.split(None, 1)[1] for line in log.read_text().splitlines()
                 if "(" in line and "+++" not in line and "resumed" not in line]
        renames = [i for i, c in enumerate(calls) if c.startswith(("rename", "link"))]
        n = 3 if args[0] == "pack" else 1
        assert renames == list(range(renames[0], renames[0] + n)), calls  # one after another
        synced = [c for c in calls[:renames[0]] if c.startswith(("fsync", "fdatasync"))]
        assert len(synced) >= n and calls[renames[0] - 1].startswith(("fsync", "fdatasync"))
        assert calls[renames[-1] + 1].startswith(("fsync", "fdatasync")), calls
