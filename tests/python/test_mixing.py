# SPDX-License-Identifier: MIT
"""Shuffle quality on class-sorted shards (issue 19): an ImageFolder tree of
34 classes packed `--sorted` into 16 shards of 200 (each shard holds two or
three classes; the epoch, 3,196 samples, is longer than the shuffle's
default reach), read with stoker.Loader's default order options. Distinct
classes per batch of 64 over each epoch, the first batch included, must
reach 0.9x a uniform permutation's and at least what WebDataset's
`shardshuffle=8` + `.shuffle(1000)` reaches on the same shards (its
algorithm, from its source, in bench/mixing.py: it is not in Debian).

image_size is small to keep the test fast; it does not change the order.
"""
import importlib.util
import io
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import stoker

CLASSES, PER_CLASS, PER_SHARD, BATCH = 34, 94, 200, 64
spec = importlib.util.spec_from_file_location(
    "mixing", Path(__file__).resolve().parents[2] / "bench" / "mixing.py")
mixing = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mixing)


def pack(stoker_bin, tree, out, *extra):
    out.mkdir()
    proc = subprocess.run([stoker_bin, "pack", "-q", "--max-samples", str(PER_SHARD), *extra,
                           "-o", str(out / "train-%04d.tar"), str(tree)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return sorted(str(p) for p in out.glob("train-*.tar"))


@pytest.fixture(scope="module")
def packed(tmp_path_factory, stoker_bin):
    """{"sorted": shard paths, "mixed": shard paths} of one ImageFolder tree."""
    d = tmp_path_factory.mktemp("mixing")
    tree = d / "tree"
    rng = np.random.default_rng(0)
    for c in range(CLASSES):
        (tree / f"class{c:02d}").mkdir(parents=True)
        for i in range(PER_CLASS):
            buf = io.BytesIO()
            pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(buf, "JPEG", quality=50)
            (tree / f"class{c:02d}" / f"{i:03d}.jpg").write_bytes(buf.getvalue())
    return {"sorted": pack(stoker_bin, tree, d / "sorted", "--sorted"),
            "mixed": pack(stoker_bin, tree, d / "mixed")}


def shard_labels(paths):
    out = []
    for path in paths:
        with tarfile.open(path) as tf:
            out.append([int(tf.extractfile(m).read()) for m in tf.getmembers()
                        if m.name.endswith(".cls")])
    return out


def epoch_labels(paths, epoch, **options):
    loader = stoker.Loader(paths, image_size=8, **options)
    loader.set_epoch(epoch)
    labels = [int(x) for _, batch in loader for x in batch]
    report = loader.report()
    loader.close()
    return labels, report


def test_sorted_shards_are_sorted(packed):
    """The fixture is what the test claims: each sorted shard holds few
    classes, each mixed one nearly all."""
    assert max(len(set(s)) for s in shard_labels(packed["sorted"])) <= 4
    assert min(len(set(s)) for s in shard_labels(packed["mixed"])) >= 30


def test_default_loader_mixes_sorted_shards_like_a_permutation(packed):
    per_shard = shard_labels(packed["sorted"])
    everything = [x for s in per_shard for x in s]
    uniform = mixing.uniform_classes_per_batch(everything, BATCH)
    wds = [mixing.classes_per_batch(mixing.webdataset_order(per_shard, seed), BATCH)
           for seed in range(5)]
    wds_mean = mixing.mean([mixing.mean(w) for w in wds])
    wds_first = mixing.mean([w[0] for w in wds])
    for epoch in range(2):
        labels, _ = epoch_labels(packed["sorted"], epoch)
        assert sorted(labels) == sorted(everything)
        got = mixing.classes_per_batch(labels, BATCH)
        print(f"epoch {epoch}: mean {mixing.mean(got):.1f} first {got[:3]} min {min(got)}; "
              f"uniform {uniform:.1f}; webdataset {wds_mean:.1f} first {wds_first:.1f}")
        assert mixing.mean(got) >= 0.9 * uniform
        assert mixing.mean(got) >= wds_mean
        # The first batch of the epoch: no ramp from a few samples.
        assert got[0] >= 0.7 * uniform and got[0] > wds_first


def test_an_index_over_local_shards_mixes_any_sort_order_like_a_permutation(tmp_path,
                                                                             stoker_bin):
    """Class-sorted shards too long for the window's reach (100 classes x 200
    samples in 40 shards of 500: the window mixes what 16 shards in flight
    hold): with a dataset index over local shards the epoch is read in a
    global random order, by offset, at default options, so batches mix like
    a uniform permutation; the same order on any thread count (issue 39)."""
    classes, per_class = 100, 200
    with stoker.ShardWriter(str(tmp_path / "s-%06d.tar"), max_samples=500) as w:
        for c in range(classes):
            for i in range(per_class):
                w.write({"__key__": f"{c:04d}-{i:04d}", "cls": c})
    shards = sorted(str(p) for p in tmp_path.glob("s-*.tar"))
    index = str(tmp_path / "index.json")
    subprocess.run([stoker_bin, "index", "-o", index, *shards], check=True,
                   capture_output=True, timeout=120)
    everything = [c for c in range(classes) for _ in range(per_class)]
    uniform = mixing.uniform_classes_per_batch(everything, BATCH, rounds=5)

    def labels(threads, **options):
        return [s["cls"] for s in stoker.Samples(shards, decode_cls=True, seed=1, threads=threads,
                                                 **options)]
    window = mixing.mean(mixing.classes_per_batch(labels(2), BATCH))
    ordered = labels(2, index_path=index)
    got = mixing.classes_per_batch(ordered, BATCH)
    print(f"uniform {uniform:.1f}, window {window:.1f}, global order {mixing.mean(got):.1f}")
    assert sorted(ordered) == everything
    assert mixing.mean(got) >= 0.9 * uniform and got[0] >= 0.7 * uniform
    assert ordered == labels(1, index_path=index)


def test_mixed_shards_stay_mixed(packed):
    everything = [x for s in shard_labels(packed["mixed"]) for x in s]
    uniform = mixing.uniform_classes_per_batch(everything, BATCH)
    labels, _ = epoch_labels(packed["mixed"], 0)
    assert mixing.mean(mixing.classes_per_batch(labels, BATCH)) >= 0.95 * uniform


def test_order_on_sorted_shards_is_the_same_on_any_thread_count(packed):
    one, _ = epoch_labels(packed["sorted"], 3, threads=1)
    two, _ = epoch_labels(packed["sorted"], 3, threads=2)
    assert one == two


POOR = dict(shards_in_flight=1, shuffle_buffer=64)  # little memory for mixing


def test_label_hint_tells_sorted_from_mixed_shards(packed):
    """With the same poor mixing options, the report's label line sees that
    sorted shards give batches of few classes and names the fix; mixed
    shards get no hint. Shard mixing (k_eff) alone could not tell them apart."""
    _, on_sorted = epoch_labels(packed["sorted"], 0, **POOR)
    _, on_mixed = epoch_labels(packed["mixed"], 0, **POOR)
    print(on_sorted, on_mixed, sep="\n")
    assert "hint: batches mix labels poorly" in on_sorted
    assert "stoker reshard --shuffle" in on_sorted
    assert "labels: " in on_mixed and "hint: batches mix labels" not in on_mixed
    # the default options mix sorted shards well enough for no hint
    _, default_sorted = epoch_labels(packed["sorted"], 0)
    assert "labels: " in default_sorted and "hint: batches mix labels" not in default_sorted


def test_label_counters_against_the_batches(packed):
    loader = stoker.Loader(packed["sorted"], image_size=8, **POOR)
    labels = [batch.tolist() for _, batch in loader]
    s = loader.stats()
    loader.close()
    assert s["label_batches"] == len(labels)
    assert s["label_samples"] == sum(map(len, labels))
    assert s["label_distinct"] == sum(len(set(b)) for b in labels)
    assert s["label_pairs"] == sum(len(b) * (len(b) - 1) for b in labels)
    assert s["label_same_pairs"] == sum(b.count(c) * (b.count(c) - 1) for b in labels
                                        for c in set(b))
    r = stoker.rates(s)
    assert r["labels_per_batch"] == s["label_distinct"] / s["label_batches"]
    n = s["label_samples"]
    assert abs(r["label_mix_perfect"] - n * (n - 1) / s["label_sample_pairs"]) < 1e-9


def test_verify_says_when_shards_look_sorted(packed, stoker_bin):
    def verify(paths):
        proc = subprocess.run([stoker_bin, "verify", "-q", *paths], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr  # not bad data
        return proc.stdout
    out = verify(packed["sorted"])
    assert "note: the shards look sorted by class" in out, out
    assert "stoker reshard --shuffle" in out
    assert "sorted by class" not in verify(packed["mixed"])
