# SPDX-License-Identifier: MIT
"""Exact evaluation under DDP (issue 26 item 1): with uneven=True two gloo
ranks over shards of 300, 300 and 29 samples see every sample once between
them, with and without an index, and the example's accuracy (summed over
the ranks after the loop) equals a single process's."""
import json
import subprocess
from pathlib import Path

import pytest

import stoker
from conftest import Sample, run_ranks, write_shard

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SIZES = (300, 300, 29)
RUN_TIMEOUT_S = 200

RANK = r'''
import json, sys, torch, torch.distributed as dist, stoker
sys.path.insert(0, sys.argv[5])
from train_imagenet import evaluate, val_loader
rank, world, port, shards = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
index = sys.argv[6] or None
if world > 1:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
keys = stoker.Loader(shards, batch_size=32, image_size=16, transform="eval", shuffle=False,
                     uneven=True, threads=1, index=index, fields=("jpg", "__key__"))
seen = [k for _, batch_keys in keys for k in batch_keys]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 3))
if world > 1:
    model = torch.nn.parallel.DistributedDataParallel(model)
val = val_loader(shards, 16, 32, threads=1, index=index)
acc1, n = evaluate(model, val, torch.device("cpu"))
print(json.dumps({"keys": seen, "acc1": acc1, "n": n, "batches": len(val) if index else None}))
'''


@pytest.fixture(scope="module")
def val_shards(tmp_path_factory, dataset):
    out = tmp_path_factory.mktemp("val")
    paths, i = [], 0
    for s, n in enumerate(SIZES):
        samples = []
        for _ in range(n):
            photo = dataset[i % len(dataset)]
            samples.append(Sample(f"val{i:04d}", None, photo.jpg, str(i % 3).encode(), i % 3))
            i += 1
        paths.append(write_shard(out / f"val-{s:06d}.tar", samples))
    return paths


def run(world, shards, index, env):
    return run_ranks(RANK, world, [json.dumps(shards), EXAMPLES, index or ""], env,
                     RUN_TIMEOUT_S)


@pytest.mark.parametrize("with_index", [False, True], ids=["no-index", "index"])
def test_two_ranks_evaluate_every_sample_once(val_shards, stoker_bin, clean_env_factory,
                                             tmp_path, with_index):
    env = clean_env_factory()
    index = None
    if with_index:
        index = str(tmp_path / "val.idx")
        subprocess.run([stoker_bin, "index", "-o", index, *val_shards], check=True,
                       capture_output=True, timeout=60)
    single, = run(1, val_shards, index, env)
    ranks = run(2, val_shards, index, env)
    every = [f"val{i:04d}" for i in range(sum(SIZES))]
    assert sorted(single["keys"]) == every
    union = sorted(k for r in ranks for k in r["keys"])
    assert union == every  # each sample once: no duplicate, none missing
    # Ranks differ (no step agreement): each its own shards, or with an index
    # a run of the samples, shards cut between ranks (counts within one).
    assert {len(r["keys"]) for r in ranks} == ({314, 315} if with_index else {300, 329})
    assert single["n"] == ranks[0]["n"] == ranks[1]["n"] == sum(SIZES)
    assert ranks[0]["acc1"] == ranks[1]["acc1"] == single["acc1"]
    assert 0 < single["acc1"] < 1
    if with_index:  # len() is each rank's own count of batches
        assert [r["batches"] for r in ranks] == [-(-len(r["keys"]) // 32) for r in ranks]


CUT = r'''
import json, logging, sys, torch.distributed as dist, stoker
rank, world, port, shards = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
said = []
handler = logging.Handler()
handler.emit = lambda record: said.append(record.getMessage())
logging.getLogger("stoker").addHandler(handler)
val = stoker.Loader(shards, batch_size=32, image_size=16, transform="eval", shuffle=False, threads=1)
n = sum(len(labels) for _, labels in val)
print(json.dumps({"n": n, "said": said, "cut": val.stats()["samples_cut_by_step_agreement"]}))
'''


def test_evaluation_cut_short_by_equal_steps_says_so(val_shards, clean_env_factory):
    """Without uneven=True (and no index) two ranks over 300 and 329 samples
    stop together after 10 batches: the rank with more samples says how many
    of its samples it did not deliver and names uneven=True, instead of an
    accuracy over fewer samples without a word (issue 35)."""
    ranks = run_ranks(CUT, 2, [json.dumps(val_shards)], clean_env_factory(), RUN_TIMEOUT_S)
    assert sorted(r["n"] for r in ranks) == [300, 320]
    long_rank = max(ranks, key=lambda r: r["cut"])
    assert long_rank["cut"] >= 1 and min(r["cut"] for r in ranks) == 0
    said = " ".join(long_rank["said"])
    assert "uneven=True" in said and f"at least {long_rank['cut']} samples" in said, said


def test_even_false_refuses_samples_per_rank(val_shards):
    with pytest.raises(stoker.OptionError, match="samples_per_rank.*uneven"):
        stoker.Loader(val_shards, batch_size=8, image_size=16, uneven=True, samples_per_rank=10)
