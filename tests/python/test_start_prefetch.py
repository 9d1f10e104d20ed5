# SPDX-License-Identifier: MIT
"""Loader.start_prefetch() (issue 35): the next iteration's shuffle window is
read while the caller does something else (builds the model, loads a
checkpoint, evaluates between epochs), and the iteration continues those
threads: the same batches as without it, and no sample read twice."""
import time

import pytest
import stoker

OPTS = dict(batch_size=8, image_size=24, threads=2, seed=5)
STARTED_TIMEOUT_S = 30  # a loaded machine; a loader that never starts fails here


def batches(loader):
    return [(int(images.sum()), labels.tolist()) for images, labels in loader]


def samples_read(loader):
    return loader.stats()["samples_read"]


def wait_for_reads(loader, above):
    """Until the loader's threads have read more than `above` samples with no
    batch asked for; the loader must get there on its own."""
    deadline = time.monotonic() + STARTED_TIMEOUT_S
    while samples_read(loader) <= above:
        assert time.monotonic() < deadline, (
            f"no sample read {STARTED_TIMEOUT_S} s after start_prefetch()")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def reference(even_shards):
    """Epochs 0 and 1 of a loader that never prefetched."""
    with stoker.Loader(even_shards, **OPTS) as loader:
        return [batches(loader), batches(loader)]


def test_fresh_start_reads_before_the_loop_and_the_loop_continues(even_shards, reference,
                                                                   dataset):
    with stoker.Loader(even_shards, **OPTS) as loader:
        assert samples_read(loader) == 0  # nothing is read at construction
        loader.start_prefetch()
        wait_for_reads(loader, 0)  # read with no batch asked for
        assert batches(loader) == reference[0]
        # The loop took over the prefetching threads: every sample read once.
        assert samples_read(loader) == len(dataset)


def test_next_epoch_read_after_the_loop_while_the_caller_evaluates(even_shards, reference,
                                                                  dataset):
    with stoker.Loader(even_shards, **OPTS) as loader:
        assert batches(loader) == reference[0]
        one_epoch = samples_read(loader)
        assert one_epoch == len(dataset)
        loader.start_prefetch()  # the next epoch: 1
        wait_for_reads(loader, one_epoch)
        loader.set_epoch(1)  # the usual DDP loop says it again: kept
        assert batches(loader) == reference[1]
        assert samples_read(loader) == 2 * len(dataset)


def test_resume_prefetched_while_the_checkpoint_loads(even_shards, reference):
    with stoker.Loader(even_shards, **OPTS) as first:
        it = iter(first)
        for _ in range(3):
            next(it)
        state = first.state_dict()
        it.close()
    with stoker.Loader(even_shards, **OPTS) as plain:
        plain.load_state_dict(state)
        assert batches(plain) == reference[0][3:]
        read_plain = samples_read(plain)
    with stoker.Loader(even_shards, **OPTS) as loader:
        loader.load_state_dict(state)
        loader.start_prefetch()
        wait_for_reads(loader, 0)
        assert batches(loader) == reference[0][3:]
        assert samples_read(loader) == read_plain


def test_another_epoch_chosen_after_prefetching_drops_it(even_shards, reference):
    with stoker.Loader(even_shards, **OPTS) as loader:
        loader.start_prefetch()  # epoch 0
        wait_for_reads(loader, 0)
        loader.set_epoch(1)
        assert batches(loader) == reference[1]


def test_not_while_a_loop_is_open(even_shards):
    with stoker.Loader(even_shards, **OPTS) as loader:
        it = iter(loader)
        next(it)
        with pytest.raises(RuntimeError, match="after the loop"):
            loader.start_prefetch()
        it.close()
