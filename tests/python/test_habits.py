# SPDX-License-Identifier: MIT
"""The loader as a PyTorch user writes a loop: DDP with no options beyond
URLs and batch size (2 and 3 gloo ranks over uneven shards), resume with
the usual set_epoch loop, breaking out and iterating again, holding labels,
Path and glob URLs, `with`, repr, each rank's share of the cores, a missing
shard at construction, and skipped input in the `stoker` logger."""
import json
import logging
import os

import pytest
import torch

import stoker
from conftest import run_ranks

RUN_TIMEOUT_S = 180
SMALL = dict(batch_size=8, image_size=16, threads=1)

DDP_RANK = r'''
import json, sys, torch, torch.distributed as dist, stoker
rank, world, port, shards = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
loader = stoker.Loader(shards, batch_size=8, image_size=16)    # nothing else
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3 * 16 * 16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps = []
for epoch in range(2):
    loader.set_epoch(epoch)
    n = 0
    for images, labels in loader:
        loss = model(images.float().flatten(1)).sum()   # an all-reduce per step
        opt.zero_grad(); loss.backward(); opt.step()
        n += 1
    steps.append(n)
print(json.dumps({"steps": steps, "agreements": loader._agree.steps}))
'''


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_needs_no_option_for_equal_steps(uneven_shards, clean_env_factory, world):
    """Shards of 3 to 40 samples: without samples_per_rank or an index the
    ranks hold different numbers of batches, and used to hang in DDP."""
    out = run_ranks(DDP_RANK, world, [json.dumps(uneven_shards)], clean_env_factory(),
                    RUN_TIMEOUT_S)
    steps = [o["steps"] for o in out]
    assert all(s == steps[0] for s in steps), steps
    assert all(n > 0 for n in steps[0])


def test_several_ranks_without_a_way_to_agree_are_refused(uneven_shards, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(stoker.PlanError, match=r"torch\.distributed.*index=.*samples_per_rank"):
        stoker.Loader(uneven_shards, **SMALL)
    # Either way out works.
    stoker.Loader(uneven_shards, samples_per_rank=40, **SMALL).close()


def epoch_digests(loader):
    return [(images.sum().item(), labels.tolist()) for images, labels in loader]


def test_resume_survives_the_usual_set_epoch_loop(even_shards):
    full = stoker.Loader(even_shards, samples_per_rank=120, **SMALL)
    full.set_epoch(1)
    want = epoch_digests(full)
    first = stoker.Loader(even_shards, samples_per_rank=120, **SMALL)
    first.set_epoch(1)
    got = []
    for step, batch in enumerate(first):
        got.append((batch[0].sum().item(), batch[1].tolist()))
        if step == 4:
            state = first.state_dict()
            break
    second = stoker.Loader(even_shards, samples_per_rank=120, **SMALL)
    second.load_state_dict(state)
    for epoch in range(state["epoch"], 2):
        second.set_epoch(epoch)     # keeps the saved batch for the saved epoch
        got += epoch_digests(second)
    assert got == want


def test_breaking_out_and_iterating_again_continues_the_epoch(even_shards):
    want = epoch_digests(stoker.Loader(even_shards, **SMALL))
    loader = stoker.Loader(even_shards, **SMALL)
    got = []
    for batch in loader:
        got.append((batch[0].sum().item(), batch[1].tolist()))
        if len(got) == 3:
            break
    got += epoch_digests(loader)        # the rest of the epoch, nothing twice
    assert got == want
    assert len(epoch_digests(loader)) == len(want)  # then the next epoch, whole


def test_holding_labels_holds_no_image_buffer(even_shards):
    loader = stoker.Loader(even_shards, max_batches=2, **SMALL)
    kept = [labels for _, labels in loader]     # used to raise BusyError after 2
    assert sum(len(labels) for labels in kept) == 120
    with pytest.raises(stoker.BusyError, match=r"holds the images .*\.clone\(\)") as e:
        list(loader)                            # holding every image tensor cannot work
    assert "stk_" not in str(e.value)


def test_path_glob_with_and_repr(sample_dir, even_shards):
    path = sorted(sample_dir.glob("train-*.tar"))[0]
    with stoker.Loader(path, **SMALL) as loader:         # a Path alone
        assert sum(len(labels) for _, labels in loader) == 20
        assert "batch_size=8" in repr(loader) and "train-000000.tar" in repr(loader)
    with pytest.raises(ValueError, match="closed"):
        next(iter(loader))
    globbed = stoker.Loader(str(sample_dir / "train-*.tar"), **SMALL)  # as Python users write it
    assert sum(len(labels) for _, labels in globbed) == 120


def test_threads_default_to_this_ranks_share_of_the_cores(even_shards, monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores))
    loader = stoker.Loader(even_shards, image_size=16, batch_size=8)
    next(iter(loader))
    assert loader.stats()["decode_threads"] == 1   # not `cores` threads per rank
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    loader = stoker.Loader(even_shards, image_size=16, batch_size=8)
    next(iter(loader))
    assert loader.stats()["decode_threads"] == cores


def test_missing_shard_and_directory_fail_at_construction(even_shards, tmp_path):
    missing = tmp_path / "train-000099.tar"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        stoker.Loader(even_shards + [str(missing)], **SMALL)
    with pytest.raises(ValueError, match="stoker pack"):
        stoker.Loader([str(tmp_path)], **SMALL)


def test_skipped_input_reaches_the_logger_and_the_report(even_shards, dataset, write_shard,
                                                         tmp_path, caplog):
    from conftest import Sample
    broken = write_shard(tmp_path / "broken.tar",
                         dataset[:3] + [Sample("bad", None, b"not a jpeg", b"1", 1)])
    loader = stoker.Loader(even_shards + [broken, str(tmp_path / "gone.tar")], on_error="skip",
                           **SMALL)
    with caplog.at_level(logging.WARNING, logger="stoker"):
        assert sum(len(labels) for _, labels in loader) == 120 + 4
    messages = [r.getMessage() for r in caplog.records if r.name == "stoker"]
    assert any("gone.tar" in m and "skipped" in m for m in messages), messages
    assert any("bad" in m and "broken.tar" in m for m in messages), messages
    assert "bad input skipped: 1 sample (1 image replaced), 1 shard" in loader.report()
