"""As users write it, round 2 (issue 26): an index found by the files it
names, not how they were spelled; class names; WebDataset's "jpg;png";
options that act or are refused; the member a skipped sample lacks."""
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
    # Relative entries are taken from the working directory, else from
    # the index file's own directory.
    monkeypatch.chdir(tmp_path)
    if indexed_as == "relative":
        with pytest.raises(stoker.Error, match="not in the dataset index"):
            stoker.Loader(even_shards, index=index, **SMALL)
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
