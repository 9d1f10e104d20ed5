# SPDX-License-Identifier: MIT
"""Errors reach Python as the right exception types, with messages that
name the shard and sample; on_error="skip" goes on."""
import random

import pytest
import torch

import stoker

BAD_KEY_INDEX = 5  # the sample of the shard whose JPEG gets damaged


def eval_loader(urls, **kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("image_size", 32)
    kw.setdefault("shuffle", False)
    return stoker.Loader(urls, transform="eval", **kw)


def run_epoch(loader):
    return [(im.clone(), lb.clone()) for im, lb in loader]


def damaged_jpeg(data):
    """A JPEG whose headers after SOI are random bytes: undecodable."""
    rng = random.Random(3)
    return data[:2] + bytes(rng.randrange(256) for _ in range(len(data) - 2))


@pytest.fixture(scope="module")
def corrupt_shard(tmp_path_factory, dataset, write_shard):
    """Shard 0's 20 samples, with sample BAD_KEY_INDEX's JPEG damaged."""
    samples = [s for s in dataset if s.url == dataset[0].url]
    assert len(samples) == 20
    bad = samples[BAD_KEY_INDEX]
    samples[BAD_KEY_INDEX] = bad._replace(jpg=damaged_jpeg(bad.jpg))
    path = write_shard(tmp_path_factory.mktemp("corrupt") / "corrupt-000000.tar", samples)
    return path, bad.key, samples


@pytest.mark.parametrize("where", ["first", "last"])
def test_missing_shard_is_file_not_found(even_shards, tmp_path, where):
    missing = str(tmp_path / "no-such-shard-000042.tar")
    urls = [missing] + even_shards if where == "first" else even_shards + [missing]
    with pytest.raises(FileNotFoundError) as info:
        run_epoch(eval_loader(urls))
    assert missing in str(info.value)
    with pytest.raises(FileNotFoundError, match="no-such-shard-000042"):
        list(stoker.Samples([missing], shuffle=False))


def test_corrupt_jpeg_fails_naming_shard_and_key(corrupt_shard, even_shards):
    path, key, _ = corrupt_shard
    ld = eval_loader(even_shards[1:3] + [path], on_error="fail")
    for _ in range(2):  # and again in a new epoch: the same error, no hang
        with pytest.raises(stoker.DataError) as info:
            run_epoch(ld)
        message = str(info.value)
        assert path in message and key in message, message
        assert isinstance(info.value, stoker.Error)


def test_corrupt_jpeg_is_replaced_with_skip(corrupt_shard):
    path, key, samples = corrupt_shard
    ld = eval_loader([path], on_error="skip")
    batches = run_epoch(ld)
    images = torch.cat([b[0] for b in batches])
    labels = torch.cat([b[1] for b in batches])
    assert images.shape[0] == 20
    stats = ld.stats()
    assert stats["images_replaced"] == 1, stats
    assert stats["samples_skipped"] == 1 and stats["samples"] == 20, stats
    # The other images are the ones a clean copy of the shard gives; the
    # damaged one is a copy of another image of its batch.
    good = torch.cat([b[0] for b in run_epoch(eval_loader([samples[0].url]))])
    for i in range(20):
        if i != BAD_KEY_INDEX:
            assert torch.equal(images[i], good[i]), i
    first = BAD_KEY_INDEX // 8 * 8
    others = [j for j in range(first, min(first + 8, 20)) if j != BAD_KEY_INDEX]
    assert any(torch.equal(images[BAD_KEY_INDEX], images[j]) for j in others)
    assert [int(v) for i, v in enumerate(labels) if i != BAD_KEY_INDEX] == \
        [s.label for i, s in enumerate(samples) if i != BAD_KEY_INDEX]


def test_unknown_option_is_a_type_error(even_shards):
    with pytest.raises(TypeError, match="shuffel"):
        stoker.Loader(even_shards, shuffel=False)
    with pytest.raises(TypeError, match="bogus"):
        list(stoker.Samples(even_shards, bogus=1))


@pytest.mark.parametrize("kw", [
    dict(dtype=torch.int32), dict(dtype=torch.float64), dict(dtype="int8"),
    dict(layout="nwhc"), dict(transform="center"), dict(on_error="ignore"),
    dict(mean=(0.5, 0.5)), dict(batch_size=0), dict(batch_size=-1), dict(image_size=0),
    dict(max_batches=0)])
def test_bad_values_are_value_errors(even_shards, kw):
    with pytest.raises(ValueError):
        stoker.Loader(even_shards, **kw)


def test_dtype_names_are_accepted(even_shards):
    images, _ = next(iter(eval_loader(even_shards, dtype="bfloat16")))
    assert images.dtype == torch.bfloat16
