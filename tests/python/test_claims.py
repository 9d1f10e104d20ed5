# SPDX-License-Identifier: MIT
"""The trainer's claim policy of Loader(cluster=...) alone (_claims.Claims):
which side makes which range, when a task is late, when the trainer takes
a range back; driven with a fake clock and a fake cluster, no threads, no
Dask."""
import pytest

from stoker.cluster.claims import CLUSTER, DONE, LOCAL, PENDING, Claims, TaskSizes


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Cluster:
    """What Claims asks of the Dask side: reachable, worker threads, workers."""

    def __init__(self, workers=("w1",), threads=1):
        self.up = True
        self.addresses = list(workers)
        self.threads = threads

    def usable(self):
        return self.up

    def workers(self):
        return self.threads * len(self.addresses)

    def worker_addresses(self):
        return list(self.addresses)


def index():
    return "index-future"


def make(n=40, per_range=4, first=0, **kw):
    clock, cluster = Clock(), Cluster(**kw)
    return Claims(first, n, per_range, cluster, clock), clock, cluster


def submit(claims, expect_range, expect_worker=None):
    """Submit what to_submit() picks, as Run does: one chunk per range."""
    r, start, worker, held = claims.to_submit(index)
    assert r == expect_range and held == "index-future"
    assert start == claims.ranges[r][0] or start >= claims.next
    if expect_worker is not None:
        assert worker == expect_worker
    chunk = f"chunk-{r}"
    claims.submitted_to_cluster(r, {chunk: worker})
    return chunk


def test_ranges_cover_the_batches_from_the_first():
    claims, _, _ = make(n=10, per_range=4, first=2)
    assert claims.ranges == [(2, 6), (6, 10)]
    assert claims.front() == 0
    claims.next = 6
    assert claims.front() == 1


def test_local_first_then_the_cluster_skips_the_range_after_the_local_one():
    claims, _, _ = make(workers=("w1",), threads=1)  # two ranges in flight at most
    assert claims.pick_local() == (0, None)  # the loop needs range 0 first
    assert claims.claim_local(0) == (False, {})
    assert claims.state[0] == LOCAL
    # Range 1 continues the local pipeline: the cluster gets 2 and 3.
    submit(claims, 2, "w1")
    submit(claims, 3, "w1")
    assert claims.state[2] == claims.state[3] == CLUSTER
    assert claims.to_submit(index) is None  # 2 per worker thread in flight
    # The local thread goes on with range 1 (continues its pipeline).
    for b in range(0, 4):
        assert claims.put(b, f"local {b}", local=True)
    assert claims.local_done(0) == {}
    assert claims.state[0] == DONE
    assert claims.pick_local() == (1, None)


def test_submissions_spread_over_the_least_loaded_worker():
    claims, _, _ = make(workers=("w1", "w2"), threads=1)
    claims.claim_local(0)
    submit(claims, 2, "w1")
    submit(claims, 3, "w2")
    submit(claims, 4, "w1")
    submit(claims, 5, "w2")
    assert claims.to_submit(index) is None  # 2 ranges x 2 workers


def test_no_submission_without_a_usable_cluster_or_its_index():
    claims, _, cluster = make()
    claims.claim_local(0)
    assert claims.to_submit(lambda: None) is None  # the index is still being sent
    cluster.up = False
    assert claims.to_submit(index) is None
    cluster.up, cluster.addresses = True, []
    assert claims.to_submit(index) is None


def test_late_task_is_taken_back_when_the_loop_waits():
    claims, clock, _ = make()
    claims.claim_local(0)
    for b in range(4):
        claims.put(b, b, local=True)
    claims.local_done(0)
    chunk = submit(claims, 1)  # the local thread was done: range 1 is free
    for b in range(4):
        claims.take(b)
    assert claims.front() == 1
    # The loop is not waiting: nothing is taken back, other work is claimed.
    clock.now += 60
    assert claims.pick_local() == (2, None)
    claims.claim_local(2)
    claims.local_done(2)  # stopped at once: range 2 is pending again
    assert claims.state[2] == PENDING
    # The loop waits on range 1. No turnaround known yet: late after 2 x 5 + 1 s.
    claims.waiting = True
    clock.now = 100.0 + 10.9
    assert claims.pick_local() == (3, None)  # after range 2: its pipeline continues
    clock.now = 100.0 + 11.5
    assert claims.pick_local() == (1, "its tasks have run for 11.5 s")
    assert claims.claim_local(1) == (True, {})  # taken back; its chunk kept until done here
    for b in range(4, 8):
        claims.put(b, b, local=True)
    # Complete here: the range's chunk still in flight is handed back to drop.
    assert claims.local_done(1) == {chunk: "w1"}
    assert claims.state[1] == DONE
    assert claims.chunk_done(1, chunk) is False  # its late result is not wanted


def test_lost_cluster_is_named_as_the_reason():
    claims, _, cluster = make()
    claims.claim_local(0)
    submit(claims, 2)
    claims.next = 8  # the loop is at range 2, which the cluster holds
    claims.waiting = True
    cluster.addresses = []
    assert claims.pick_local() == (2, "the Dask cluster has no worker")
    cluster.up = False
    assert claims.pick_local() == (2, "the Dask scheduler is unreachable")


def test_turnaround_is_learnt_from_finished_ranges():
    claims, clock, _ = make(workers=("w1",), threads=2)
    claims.claim_local(0)
    chunk = submit(claims, 2)
    clock.now += 3.0
    assert claims.chunk_done(2, chunk) is True
    for b in range(8, 12):
        assert claims.put(b, f"cluster {b}", local=False)
    assert not claims.put(8, "a second copy", local=True)  # the first made is kept
    claims.chunks_settled(2)
    assert claims.state[2] == DONE
    assert claims.turnaround == pytest.approx(3.0)
    assert 2 not in claims.futures and 2 not in claims.submitted
    # A range whose tasks stopped short goes back to whoever is free.
    chunk = submit(claims, 3)
    clock.now += 1.0
    claims.chunk_done(3, chunk)
    claims.put(12, "cluster 12", local=False)
    claims.chunks_settled(3)
    assert claims.state[3] == PENDING
    assert claims.missing_from(3) == 13
    assert claims.turnaround == pytest.approx(0.8 * 3.0 + 0.2 * 1.0)
    # With a known turnaround, a task is late after 2 x turnaround + 1 s.
    chunk = submit(claims, 3)
    claims.next, claims.waiting = 12, True
    claims.take(12)
    claims.next = 13
    for r in range(4, len(claims.ranges)):
        claims.state[r] = DONE  # nothing else to claim
    clock.now += 6.0
    assert claims.pick_local() is None
    clock.now += 1.0
    assert claims.pick_local() == (3, "its tasks have run for 7.0 s")


def test_failed_range_is_made_again():
    claims, _, _ = make()
    claims.claim_local(0)
    chunk = submit(claims, 2)
    assert claims.chunk_done(2, chunk) is True
    assert claims.range_failed(2) == {}
    claims.chunks_settled(2)
    assert claims.state[2] == PENDING and 2 not in claims.submitted
    assert claims.to_submit(index)[0] == 2  # submitted again


def test_local_take_back_when_the_cluster_is_slower_than_here():
    claims, clock, _ = make()
    claims.claim_local(0)
    claims.timed_local(0.4, 4)  # 0.1 s per batch here
    claims.turnaround = 8.0     # a range takes 8 s on the cluster
    submit(claims, 2)
    for r in range(len(claims.ranges)):
        if claims.state[r] == PENDING:
            claims.state[r] = DONE  # nothing else left to claim
    claims.next, claims.waiting = 8, True
    clock.now += 1.0
    assert claims.pick_local() == (2, "made here in 0.4 s, due from the cluster in 7.0 s")
    clock.now += 6.7  # due in 0.3 s: waiting is quicker
    assert claims.pick_local() is None


def test_at_the_epochs_end_the_local_thread_takes_the_range_due_last():
    # 16 one-batch ranges; 14 and 15 are on the one worker (15 queued behind
    # 14), everything before is read: rather than idle, or make 14 twice,
    # the local thread takes 15 and the worker is spared it.
    claims, clock, _ = make(n=16, per_range=1)
    claims.claim_local(0)
    claims.local_done(0)
    claims.timed_local(2.7, 1)  # 2.7 s per batch here
    for r in range(1, 14):
        claims.state[r] = DONE
    claims.next = 14
    chunk14 = submit(claims, 14)
    chunk15 = submit(claims, 15)
    claims.turnaround = 5.0  # a range takes 5 s from submission on the cluster
    clock.now += 0.6
    assert claims.pick_local() == (15, "made here in 2.7 s, due from the cluster in 4.4 s")
    assert claims.claim_local(15) == (True, {chunk15: "w1"})  # dropped at once
    assert claims.chunk_done(15, chunk15) is False  # its result, if any, is not wanted
    assert claims.chunk_done(14, chunk14) is True
    # Slower here than the cluster: the local thread waits instead.
    claims, clock, _ = make(n=16, per_range=1)
    claims.timed_local(6.0, 1)
    for r in range(14):
        claims.state[r] = DONE
    claims.next = 14
    submit(claims, 14)
    submit(claims, 15)
    claims.turnaround = 5.0
    clock.now += 0.6
    assert claims.pick_local() is None


def test_local_thread_waits_for_the_loop_beyond_its_held_batches():
    claims, _, _ = make(per_range=4)
    claims.claim_local(0)
    for b in range(4):
        claims.put(b, b, local=True)
    claims.local_done(0)
    submit(claims, 1)
    claims.claim_local(2)
    claims.put(8, 8, local=True)  # a fifth batch held: more than a range's worth
    claims.local_done(2)
    assert claims.pick_local() is None  # the loop has read nothing yet
    claims.take(0)
    assert claims.pick_local() == (3, None)


def test_timed_local_is_a_running_mean():
    claims, _, _ = make()
    claims.timed_local(1.0, 4)
    assert claims.local_batch_s == pytest.approx(0.25)
    claims.timed_local(1.0, 1)
    assert claims.local_batch_s == pytest.approx(0.8 * 0.25 + 0.2 * 1.0)


def test_clear_hands_back_every_chunk_in_flight():
    claims, _, _ = make(workers=("w1",), threads=2)
    claims.claim_local(0)
    chunks = {submit(claims, 2), submit(claims, 3)}
    claims.put(9, 9, local=False)
    assert set(claims.clear()) == chunks
    assert not claims.ready and not claims.futures


def auto(n, most=32, reread=0, first=0, **kw):
    """Claims whose ranges TaskSizes cuts as they are claimed (batch 64)."""
    clock, cluster = Clock(), Cluster(**kw)
    sizes = TaskSizes(64, most, reread)
    return Claims(first, n, most, cluster, clock, sizes=sizes), sizes


def test_auto_sizes_send_a_short_epoch_to_the_worker():
    """An epoch of 16 batches, one worker: under one range of 32 batches
    (the default before) the local thread took the epoch whole and no task
    went out; cut as claimed, the worker gets ranges while the local thread
    makes the first."""
    claims, _ = auto(16)
    assert claims.pick_local() == (0, None)
    claims.claim_local(0)
    assert claims.ranges[0] == (0, 4)  # half the local share of 16 batches
    # Range 1 is cut for the local thread to continue with; the cluster gets 2 and 3.
    submit(claims, 2, "w1")
    submit(claims, 3, "w1")
    assert claims.ranges[1:] == [(4, 7), (7, 10), (10, 12)]
    assert claims.to_submit(index) is None  # two ranges per worker thread in flight


def test_auto_ranges_cover_the_epoch_and_shrink_towards_its_end():
    claims, _ = auto(100, first=3, workers=("w1", "w2"))
    while claims._has(len(claims.ranges), CLUSTER):
        pass
    assert claims.ranges[0][0] == 3 and claims.ranges[-1][1] == 100
    assert all(a[1] == b[0] for a, b in zip(claims.ranges, claims.ranges[1:]))
    sizes = [e - s for s, e in claims.ranges]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 1
    assert max(sizes) <= 32
    claims.next = 50
    s, e = claims.ranges[claims.front()]
    assert s <= 50 < e


def test_auto_sizes_follow_the_measured_speeds():
    """A worker thread three times slower than the local thread gets a third
    of the local thread's range; both finish their shares together."""
    sizes = TaskSizes(64, 1000, 0)
    assert sizes.size(400, 1, cluster=True) == sizes.size(400, 1, cluster=False) == 100
    sizes.timed_local(4.0, 4)   # 1 s a batch here
    sizes.timed_worker(6.0, 2)  # 3 s a batch on a worker thread
    assert sizes.size(400, 1, cluster=False) == 150  # 400 * 3/4 / 2
    assert sizes.size(400, 1, cluster=True) == 50    # 400 * 1/4 / 2
    assert sizes.size(400, 3, cluster=True) == 34    # ceil(400 * (1/3) / 2 / 2)


def test_auto_sizes_pay_for_the_window_a_task_reads_again():
    """A range read from scratch first fills the shuffle reach: before
    anything is measured it may read again what it delivers at most; then
    re-reading and starting it may take a tenth of its time."""
    sizes = TaskSizes(64, 1000, reread=2000)
    assert sizes.least() == 32  # 2000 samples / 64
    assert sizes.size(16, 1, cluster=True) == 16  # the epoch left is too short to split
    sizes.timed_local(2.4, 1)
    sizes.timed_read(2.0, 2000)  # 1 ms a sample
    assert sizes.least() == 9    # (2000 * 1 ms + 50 ms) / (0.1 * 2.4 s), rounded up
    # A task that started a range read 100 samples beyond its own: the
    # expected re-read follows it.
    sizes.timed_worker(2.4, 1, extra_samples=100)
    assert sizes.reread == pytest.approx(0.8 * 2000 + 0.2 * 100)
    # The global order re-reads nothing: ranges are as small as the shares ask.
    assert TaskSizes(64, 1000, reread=0).least() == 0
