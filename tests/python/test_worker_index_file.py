# SPDX-License-Identifier: MIT
"""The dataset index a Dask worker writes for its loader: in a private
directory ($TMPDIR/stoker-UID, 0700, this user's, not a link), and a file
found there is used only when its bytes have the digest the trainer sent
(else, or when it is a link, it is replaced without touching the link's
target). Before, /tmp/stoker-index-UID-DIGEST.json was used as found: a
tampered file gave the loader another index, a planted link was followed."""
import hashlib
import os
import tempfile

import pytest

from stoker.cluster import worker as _cluster_worker

INDEX = b'{"format":"stoker-index","version":1,"samples":[3],"offsets":[[0,1024,2048]]}'
DIGEST = hashlib.sha256(INDEX).hexdigest()[:32]


@pytest.fixture
def tmpdir_(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_written_in_a_private_directory(tmpdir_):
    path = _cluster_worker._index_file(DIGEST, INDEX)
    private = tmpdir_ / f"stoker-{os.getuid()}"
    assert os.path.dirname(path) == str(private)
    assert (os.stat(private).st_mode & 0o777) == 0o700
    with open(path, "rb") as f:
        assert f.read() == INDEX


def test_a_tampered_file_is_replaced(tmpdir_):
    path = _cluster_worker._index_file(DIGEST, INDEX)
    with open(path, "wb") as f:
        f.write(INDEX.replace(b"[3]", b"[9]"))  # another index under the same name
    assert _cluster_worker._index_file(DIGEST, INDEX) == path
    with open(path, "rb") as f:
        assert f.read() == INDEX


def test_a_planted_link_is_not_followed(tmpdir_):
    path = _cluster_worker._index_file(DIGEST, INDEX)
    victim = tmpdir_ / "victim"
    victim.write_bytes(b"not yours")
    os.remove(path)
    os.symlink(victim, path)
    assert _cluster_worker._index_file(DIGEST, INDEX) == path
    assert not os.path.islink(path)
    with open(path, "rb") as f:
        assert f.read() == INDEX
    assert victim.read_bytes() == b"not yours"


@pytest.mark.parametrize("plant", ["link", "open mode"])
def test_a_directory_that_is_not_private_is_refused(tmpdir_, plant):
    private = tmpdir_ / f"stoker-{os.getuid()}"
    elsewhere = tmpdir_ / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if plant == "link":
        os.symlink(elsewhere, private)
    else:
        private.mkdir()
        os.chmod(private, 0o777)
    with pytest.raises(OSError, match="is not a private directory"):
        _cluster_worker._index_file(DIGEST, INDEX)
    assert list(elsewhere.iterdir()) == []


def test_data_that_does_not_have_its_digest_is_refused(tmpdir_):
    with pytest.raises(ValueError, match="does not have digest"):
        _cluster_worker._index_file(DIGEST, INDEX + b" ")
