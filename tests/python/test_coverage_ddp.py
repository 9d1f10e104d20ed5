# SPDX-License-Identifier: MIT
"""Every sample, every epoch, under DDP: with a dataset index the ranks split
the epoch by sample, as torch's DistributedSampler does (issue 39).

Shards of 30/30/30/30/30/10 samples (160, the issue's 300/.../100 scaled
down), each sample's label its own number, so the labels a rank's batches
carry say which samples it trained on. Ranks learn rank and world only from
torch.distributed (gloo on 127.0.0.1). Each epoch the ranks together must
deliver every sample, with equal steps, repeating only the padding that
equal shares need (ceil(160 / world) * world - 160, at most world - 1),
which stats()["samples_padded"] counts. Evaluation with uneven=True splits
by sample too, also over fewer shards than ranks: every sample once.
"""
import json
import subprocess
import tarfile

import numpy as np
import pytest

import stoker
from conftest import add_noise_sample, run_ranks

SIZES = (30, 30, 30, 30, 30, 10)
BATCH = 8
EPOCHS = 2

RANK = r'''
import json, sys
import torch.distributed as dist
import stoker
rank, world, port, index = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
urls = json.loads(sys.argv[5])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
loader = stoker.Loader(urls, index=index, batch_size=%d, image_size=16, threads=1, seed=3)
out = {"len": len(loader), "epochs": []}
for epoch in range(%d):
    loader.set_epoch(epoch)
    labels = [int(v) for _, batch in loader for v in batch]
    out["epochs"].append({"labels": labels, "padded": loader.stats()["samples_padded"]})
dist.barrier()
dist.destroy_process_group()
print(json.dumps(out))
''' % (BATCH, EPOCHS)


def write_numbered_shards(directory, sizes, seed=5):
    """Shards of small noise JPEGs whose .cls is the sample's number."""
    rng = np.random.default_rng(seed)
    paths, n = [], 0
    for i, size in enumerate(sizes):
        path = directory / f"part-{i:06d}.tar"
        with tarfile.open(path, "w") as tar:
            for _ in range(size):
                add_noise_sample(tar, rng, f"s{n:05d}", n, (20, 24, 3))
                n += 1
        paths.append(str(path))
    return paths


def make_index(stoker_bin, urls, path):
    subprocess.run([stoker_bin, "index", "-o", str(path), *urls], check=True,
                   stdout=subprocess.DEVNULL, timeout=120)
    return str(path)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, stoker_bin):
    directory = tmp_path_factory.mktemp("coverage")
    urls = write_numbered_shards(directory, SIZES)
    return urls, make_index(stoker_bin, urls, directory / "index.json")


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_ranks_cover_every_sample_each_epoch(indexed, clean_env_factory, world):
    urls, index = indexed
    total = sum(SIZES)
    share = -(-total // world)
    ranks = run_ranks(RANK, world, [index, json.dumps(urls)], clean_env_factory(OMP_NUM_THREADS=1),
                      timeout=240)
    assert len({r["len"] for r in ranks}) == 1, [r["len"] for r in ranks]  # equal steps
    for epoch in range(EPOCHS):
        per_rank = [r["epochs"][epoch]["labels"] for r in ranks]
        assert [len(labels) for labels in per_rank] == [share] * world
        delivered = [v for labels in per_rank for v in labels]
        assert set(delivered) == set(range(total)), f"epoch {epoch}: samples never trained"
        repeated = len(delivered) - total
        assert repeated == share * world - total <= world - 1
        assert sum(r["epochs"][epoch]["padded"] for r in ranks) == repeated
    # The split follows the epoch's shuffle: not the same samples every epoch.
    assert ranks[0]["epochs"][0]["labels"] != ranks[0]["epochs"][1]["labels"]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_uneven_evaluation_splits_by_sample_even_over_fewer_shards(indexed, tmp_path, stoker_bin,
                                                                   world):
    urls, _ = indexed
    urls = urls[-2:]  # 30 + 10 samples in 2 shards, fewer than 3 or 4 ranks
    index = make_index(stoker_bin, urls, tmp_path / "index.json")
    seen = []
    for rank in range(world):
        loader = stoker.Loader(urls, index=index, transform="eval", shuffle=False, uneven=True,
                               rank=rank, world_size=world, batch_size=BATCH, image_size=16,
                               threads=1)
        labels = [int(v) for _, batch in loader for v in batch]
        assert len(labels) in (40 // world, 40 // world + 1)
        assert loader.stats()["samples_padded"] == 0
        seen += labels
    assert sorted(seen) == list(range(120, 160)), "every sample once, no other"


def test_whole_shards_keeps_the_split_by_shard(indexed):
    """whole_shards=True: each rank reads whole shards (rank 0 of 2 gets 3
    of the 6 shards' samples: all 30 of each of them, never part of one)."""
    urls, index = indexed
    loader = stoker.Loader(urls, index=index, transform="eval", shuffle=False, uneven=True,
                           whole_shards=True, rank=0, world_size=2, batch_size=BATCH,
                           image_size=16, threads=1)
    labels = [int(v) for _, batch in loader for v in batch]
    starts = np.cumsum((0,) + SIZES)
    shards = {int(np.searchsorted(starts, v, side="right")) - 1 for v in labels}
    assert len(labels) == sum(SIZES[s] for s in shards), "whole shards only"
