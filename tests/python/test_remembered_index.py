# SPDX-License-Identifier: MIT
"""Where len() remembers dataset indexes (issues 32 and 38): what is found
at an index's name is checked, never trusted (a FIFO hung len(), a link
was followed to whatever it named), the files are the user's alone, and a
directory that cannot be written costs a warning, not len()."""
import json
import os
import stat
import subprocess
import sys

import pytest

# len() of two loaders of the same shards in one process, with the
# warnings it gave.
LEN_CHILD = r'''
import json, sys, warnings
import stoker
shards = json.loads(sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    lengths = [len(stoker.Loader(shards, batch_size=8, image_size=16, threads=1))
               for _ in range(2)]
print(json.dumps({"lengths": lengths,
                  "warnings": [str(w.message) for w in caught
                               if issubclass(w.category, RuntimeWarning)]}))
'''
HANG_S = 60  # far above a count of 120 samples on a loaded machine


def child_len(shards, env):
    try:
        proc = subprocess.run([sys.executable, "-c", LEN_CHILD, json.dumps(shards)],
                              capture_output=True, text=True, env=env, timeout=HANG_S)
    except subprocess.TimeoutExpired:  # subprocess.run killed it
        pytest.fail(f"len() hung for {HANG_S} s")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def remembered(even_shards, clean_env_factory, tmp_path):
    """(env, the directory, the name len() of even_shards remembers its index by)."""
    where = tmp_path / "indexes"
    env = clean_env_factory(STOKER_INDEX_DIR=where)
    assert child_len(even_shards, env) == {"lengths": [15, 15], "warnings": []}
    made, = where.iterdir()
    return env, where, made


def test_remembered_index_is_private(remembered):
    _, where, made = remembered
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    assert stat.S_IMODE(made.stat().st_mode) & 0o077 == 0


def inflated_copy(made, path):
    """The index at made with every count doubled and no offsets: still
    these shards with their stamps, but counts they do not hold."""
    index = json.loads(made.read_text())
    for entry in index["shards"]:
        entry["samples"] *= 2
        entry.pop("offsets", None)
    index["samples"] *= 2
    path.write_text(json.dumps(index))
    return path.read_text()


@pytest.mark.parametrize("planted", ["fifo", "link to /dev/zero", "link to another index",
                                     "file of another user"])
def test_what_is_planted_at_the_name_is_replaced_not_followed(remembered, even_shards, tmp_path,
                                                              planted):
    """A FIFO hung len() forever; a link was followed, to a device or to an
    index of other counts (served as this dataset's: len() said 30). Each is
    replaced by a count of its own: a regular file of this user."""
    env, _, made = remembered
    other = tmp_path / "other.json"
    if planted == "fifo":
        made.unlink()
        os.mkfifo(made)
    elif planted == "link to /dev/zero":
        made.unlink()
        made.symlink_to("/dev/zero")
    elif planted == "link to another index":
        other_text = inflated_copy(made, other)
        made.unlink()
        made.symlink_to(other)
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give a file to another user")
        inflated_copy(made, made)
        os.chown(made, 65534, 65534)
    assert child_len(even_shards, env) == {"lengths": [15, 15], "warnings": []}
    st = made.lstat()
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
    if planted == "link to another index":
        assert other.read_text() == other_text  # neither used nor written through


def test_a_directory_at_the_name_is_left_alone_and_counted_around(remembered, even_shards):
    env, _, made = remembered
    made.unlink()
    made.mkdir()
    (made / "theirs").write_text("kept")
    result = child_len(even_shards, env)
    assert result["lengths"] == [15, 15]
    warning, = result["warnings"]
    assert f"a directory is in the way at {made}" in warning
    assert (made / "theirs").read_text() == "kept"


@pytest.mark.parametrize("where", ["under a file", "shared", "full"])
def test_len_counts_where_nothing_can_be_remembered(even_shards, clean_env_factory, tmp_path,
                                                    where):
    """len() raised TypeError when the index could not be written (a
    read-only $HOME in a container, a full disk): it counts for its own
    process and warns once."""
    target = tmp_path / "indexes"
    mounted = False
    if where == "under a file":  # as a read-only $HOME does, whoever runs it (root too)
        (tmp_path / "file").write_text("")
        target = tmp_path / "file" / "indexes"
        reason = "Not a directory"
    elif where == "shared":
        target.mkdir(mode=0o777)
        target.chmod(0o777)
        reason = "other users may write to it"
    else:
        target.mkdir()
        mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs",
                                str(target)], capture_output=True, text=True, timeout=30)
        if mount.returncode != 0:  # not root, or a container without CAP_SYS_ADMIN
            pytest.skip(f"cannot mount a small tmpfs here: {mount.stderr.strip()}")
        mounted = True
        reason = "No space left on device"
    try:
        if mounted:
            fd = os.open(target / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
            try:  # until the disk is full: not one block left for an index
                while os.write(fd, b"\0" * 512) > 0:
                    pass
            except OSError:
                pass
            finally:
                os.close(fd)
        result = child_len(even_shards, clean_env_factory(STOKER_INDEX_DIR=target))
    finally:
        if mounted:
            subprocess.run(["umount", str(target)], check=True, timeout=30)
    assert result["lengths"] == [15, 15]
    warning, = result["warnings"]  # once, for two loaders
    assert f"cannot remember dataset indexes in {target}" in warning and reason in warning, \
        warning
