# SPDX-License-Identifier: MIT
"""The first batches of an epoch read by offset while its shuffle window
fills (issue 35, src/pipeline/pipeline_head.c): at the defaults over local
shards the loop gets exactly the batches the stream alone makes
(sequential_start=True), image bytes and labels, fresh, resumed mid-epoch,
with an index and with a window shorter than the epoch; samples_fast_start
counts what came from there, and sequential_start=True turns it off.

Here the head races the stream as it does in use, so how many samples it
delivers is the machine's load's to decide, and only equality and the
switch are asserted; tests/unit/test_pipeline.c's
test_first_batches_by_offset holds the stream (a test-build hook) so that
the head surely delivers, and checks the bad input charged to each batch."""
import hashlib
import re
import subprocess

import pytest
import stoker

OPTS = dict(batch_size=8, image_size=24, threads=2, seed=11)


def digests(loader):
    return [(hashlib.sha1(images.numpy().tobytes()).hexdigest(), labels.tolist())
            for images, labels in loader]


def epoch(shards, batch=0, **opts):
    """The batches from `batch` on, and samples_fast_start."""
    with stoker.Loader(shards, **dict(OPTS, **opts)) as loader:
        if batch:
            loader.load_state_dict(dict(loader.state_dict(), batch=batch))
        got = digests(loader)
        return got, loader.stats()["samples_fast_start"]


@pytest.fixture(scope="module")
def index(even_shards, stoker_bin, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("fast-start") / "index.json")
    subprocess.run([stoker_bin, "index", "-q", "-o", path, *even_shards], check=True,
                   stdout=subprocess.DEVNULL, timeout=120)
    return path


@pytest.mark.parametrize("batch", [0, 5])
@pytest.mark.parametrize("variant", ["defaults", "index", "window shorter than the epoch"])
def test_the_stream_s_batches(even_shards, index, variant, batch):
    opts = {"defaults": {}, "index": {"index": index},
            "window shorter than the epoch": {"shuffle_buffer": 30}}[variant]
    want, fast = epoch(even_shards, batch, sequential_start=True, **opts)
    assert fast == 0
    assert len(want) == 15 - batch
    got, fast = epoch(even_shards, batch, **opts)
    assert got == want
    assert 0 <= fast < len(want) * OPTS["batch_size"]


def test_compressed_shards_wait_for_the_window_and_say_why(even_shards, tmp_path, caplog):
    """A .tar.gz has no byte offsets: the first batches come from the stream,
    and an info line names the shard and the reason (not a resume's words)."""
    import gzip
    import logging
    import shutil
    shards = []
    for path in even_shards:
        out = tmp_path / (path.rsplit("/", 1)[-1] + ".gz")
        with open(path, "rb") as src, gzip.open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        shards.append(str(out))
    want, _ = epoch(shards, sequential_start=True)
    with caplog.at_level(logging.INFO, logger="stoker"):
        got, fast = epoch(shards)
    assert got == want and fast == 0
    assert re.search(r"first batches without a dataset index: \S+\.tar\.gz is compressed "
                     r"\(no member can be skipped unread\), so they wait for the shuffle window",
                     caplog.text), caplog.text
