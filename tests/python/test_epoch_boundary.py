# SPDX-License-Identifier: MIT
"""The epoch boundary under the shuffle window (issue 35): the next epoch's
readers fill its window while the last epoch's tail is delivered, so its first
batch is made from samples already read; the loop continues those threads
(the same batches as a loader started at that epoch, nothing read twice), and a
set_epoch() elsewhere or close() in the middle of it stops them."""
import time

import pytest
import stoker

OPTS = dict(batch_size=8, image_size=24, threads=2, seed=5)
READ_AHEAD_TIMEOUT_S = 30  # a loaded machine; a loader that never reads ahead fails here


def batches(it):
    return [(int(images.sum()), labels.tolist()) for images, labels in it]


def fresh_epoch(shards, epoch, **opts):
    """Epoch `epoch` of a loader that starts there: nothing was read ahead."""
    with stoker.Loader(shards, epoch=epoch, **dict(OPTS, **opts)) as loader:
        return batches(loader)


def stat(loader, name):
    return loader.stats()[name]


def wait_read_ahead(loader, at_least):
    """Until the loader's threads have read `at_least` samples of the next
    epoch with no batch of it asked for; they must get there on their own."""
    deadline = time.monotonic() + READ_AHEAD_TIMEOUT_S
    while stat(loader, "samples_read_ahead") < at_least:
        assert time.monotonic() < deadline, (
            f"{stat(loader, 'samples_read_ahead')} samples of the next epoch read ahead "
            f"{READ_AHEAD_TIMEOUT_S} s after the last epoch's input ended, want {at_least}")
        time.sleep(0.02)


def test_next_epoch_is_read_while_the_last_one_ends(even_shards, dataset):
    n = len(dataset)
    # sequential_start: the first batch waits for the window, which at the
    # default size holds the whole epoch: its input is over before its first
    # batch, and the next epoch starts reading then. (Read by offset, the
    # first batches come before that: test_fast_start.py.)
    with stoker.Loader(even_shards, sequential_start=True, **OPTS) as loader:
        it = iter(loader)
        got = batches([next(it)])
        wait_read_ahead(loader, n)  # all of epoch 1, while epoch 0 is delivered
        got += batches(it)
        assert got == fresh_epoch(even_shards, 0)
        # Epoch 0 counts its own reads; epoch 1's count once it begins.
        assert stat(loader, "samples_read") == n
        it = iter(loader)  # epoch 1
        got = batches([next(it)])
        # Its first batch came from what was read ahead: nothing more read.
        assert stat(loader, "samples_read") == 2 * n
        got += batches(it)
        assert got == fresh_epoch(even_shards, 1)
        assert stat(loader, "samples_read") == 2 * n


@pytest.mark.parametrize("threads", [1, 2])
def test_a_window_smaller_than_the_epoch_in_a_tight_byte_budget(even_shards, dataset, threads):
    """A window of 16 drains a tail while the next one fills, both within a
    shuffle_buffer_bytes that holds one window and a half (2 x 16 + 1 samples
    of the largest): the two share it, and the batches stay those of a loader
    started at each epoch."""
    largest = max(len(s.jpg) + len(s.cls) for s in dataset)
    opts = dict(threads=threads, shuffle_buffer=16, shuffle_buffer_bytes=50 * largest)
    want = [fresh_epoch(even_shards, e, **opts) for e in range(3)]
    with stoker.Loader(even_shards, **dict(OPTS, **opts)) as loader:
        for e in range(3):
            it = iter(loader)
            got = batches([next(it)])
            # This epoch began (it counts no more ahead) and its input goes
            # on past this batch (2 x 16 + 1 held, 4 batches made ahead):
            # the next one has not started.
            ahead = stat(loader, "samples_read_ahead")
            got += batches(it)
            assert got == want[e]
            assert stat(loader, "samples_read") == (e + 1) * len(dataset)  # none read twice
            wait_read_ahead(loader, ahead + 16)  # the next window, before the loop asks


def test_set_epoch_elsewhere_or_close_stops_the_read_ahead(even_shards, dataset):
    n = len(dataset)
    with stoker.Loader(even_shards, **OPTS) as loader:
        assert batches(loader) == fresh_epoch(even_shards, 0)
        wait_read_ahead(loader, 1)
        loader.set_epoch(3)  # not epoch 1: what epoch 1 read is dropped
        assert batches(loader) == fresh_epoch(even_shards, 3)
        # What epoch 1 read ahead counts once it stopped: some of it, at most
        # all (its window holds the epoch).
        epoch_1 = stat(loader, "samples_read") - 2 * n
        assert 0 < epoch_1 <= n
        wait_read_ahead(loader, epoch_1 + 1)  # epoch 4 now
    # close() above stopped epoch 4 mid read-ahead; a loader still works
    # after (sequential_start: its first batch comes once its input is over)
    with stoker.Loader(even_shards, sequential_start=True, **OPTS) as loader:
        it = iter(loader)
        next(it)
        wait_read_ahead(loader, 1)
        it.close()
        loader.close()


def test_no_epoch_read_ahead_past_the_epochs_given(even_shards, dataset):
    """epochs=2: epoch 1 is read ahead at the first boundary, nothing of
    epoch 2 at the second (the last epoch's tail reads nothing more)."""
    n = len(dataset)
    with stoker.Loader(even_shards, epochs=2, **OPTS) as loader:
        assert batches(loader) == fresh_epoch(even_shards, 0)
        wait_read_ahead(loader, n)
        assert batches(loader) == fresh_epoch(even_shards, 1)
        assert stat(loader, "samples_read_ahead") == n
        assert batches(loader) == fresh_epoch(even_shards, 2)  # read when asked for
        assert stat(loader, "samples_read_ahead") == n
        assert stat(loader, "samples_read") == 3 * n
