# SPDX-License-Identifier: MIT
"""Keys and member names come from the shard, so they can hold newlines and
other control characters. Everything stoker prints (ls, verify, messages in
the library that quote keys and member names) escapes them, so one sample
or problem stays one line and a shard cannot forge output lines:
backslash as \\\\, newline/tab/CR as \\n \\t \\r, other control bytes and
DEL as \\xHH."""
import io
import tarfile

NASTY = "a\nb\tc\rd\x1b[31me\\f\x7fg"
ESCAPED = "a\\nb\\tc\\rd\\x1b[31me\\\\f\\x7fg"


def shard(tmp_path, make_shard, samples, name="nasty.tar"):
    return make_shard(tmp_path / name, samples, tarfile.PAX_FORMAT)


def test_ls_escapes_keys_and_extensions(run, tmp_path, make_shard):
    path = shard(tmp_path, make_shard, [
        {"__key__": "plain", "txt": b"1"},
        {"__key__": NASTY, "txt": b"22", "j\npg": b"333"},
        {"__key__": "fake\nplain2\ttxt:1", "txt": b"4"},
    ])
    proc = run(["ls", path])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "plain\ttxt:1",
        f"{ESCAPED}\tj\\npg:3 txt:2",
        "fake\\nplain2\\ttxt:1\ttxt:1",
    ]


def test_verify_lines_cannot_be_forged(run, tmp_path, make_shard):
    """A bad sample whose key holds a newline and a fake summary line: one
    problem line, then the real summary."""
    forged = "x\n0 samples in 0 shards: 0 bad samples, 0 shards not read to the end"
    path = shard(tmp_path, make_shard, [{"__key__": forged, "txt": b"no label or image"}])
    proc = run(["verify", path])
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, lines
    assert "'x\\n0 samples in 0 shards" in lines[0], lines
    assert lines[1] == "1 samples in 1 shards, 0 images decoded: 1 bad samples, " \
                       "0 shards not read to the end"


def tar_of(path, names):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for name in names:
            ti = tarfile.TarInfo(name)
            ti.size = 1
            tf.addfile(ti, io.BytesIO(b"x"))
    return path


def test_library_messages_escape_member_names(run, tmp_path):
    """Errors that quote a member name (a duplicate extension here) and the
    first ignored member of a shard without samples."""
    dup = tar_of(tmp_path / "dup.tar", ["k\n1.txt", "k\n1.TXT"])
    proc = run(["ls", dup])
    assert proc.returncode == 1
    err = [x for x in proc.stderr.splitlines() if "appears twice" in x]
    assert len(err) == 1 and "'k\\n1.TXT'" in err[0] and "'k\\n1'" in err[0], proc.stderr
    ignored = tar_of(tmp_path / "ignored.tar", ["READ\nME"])
    proc = run(["verify", "--no-images", ignored])
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and "such as 'READ\\nME'" in lines[0], lines
