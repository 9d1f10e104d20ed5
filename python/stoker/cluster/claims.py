# SPDX-License-Identifier: MIT
"""The trainer's claim policy for Loader(cluster=...): which side makes
each range of an epoch's batches, the local thread or the Dask cluster,
when a task is late and when the trainer takes a range back.

Kept apart from the threads and from Dask (trainer.Run drives it under
its lock) so that tests drive it alone, with a fake clock and a fake
cluster. The cluster is anything with usable(), workers() (worker
threads) and worker_addresses(), asked only when a decision needs them;
chunks are any hashable values (Dask futures in a Run).

Range sizes. With batches_per_task=N every range holds N batches. Left to
stoker (the default), ranges are cut as they are claimed, each sized by
TaskSizes for the side that takes it: half that side's share of the
batches left at the speeds measured so far (guided self-scheduling, as
OpenMP's schedule(guided)), so ranges shrink towards the epoch's end and
both sides finish together; never so small that re-reading the shuffle
reach and starting the task cost more than a tenth of its time. Which
side makes a batch never changes its bytes.
"""
import bisect
import math
import time

PENDING, LOCAL, CLUSTER, DONE = range(4)


class TaskSizes:
    """The batches of each range when batches_per_task is left to stoker,
    from what is measured as the run goes (kept across epochs): the local
    thread's time per batch, a worker thread's (its tasks' own time, not
    their wait in Dask's queue), the samples a task reads beyond its own
    (the shuffle reach a range read from scratch fills first; about none in
    the global order, which reads by offset) and the time to read one.
    most: the largest range (the local C loader's buffers are sized for
    it); reread: the samples a task is expected to read again before any
    has been measured."""

    # A range is 1/SHARE of its side's fair share of the batches left.
    SHARE = 2
    # Re-reading and starting a task may cost this share of its time...
    OVERHEAD = 0.1
    # ... where starting one (Dask's round trip, the worker's pipeline and
    # hook processes picking up) costs about this.
    TASK_START_S = 0.05

    def __init__(self, batch_size, most, reread):
        self.batch_size = batch_size
        self.most = most
        self.reread = reread
        self.local_batch_s = None   # running means, None until measured
        self.worker_batch_s = None
        self.read_s = None          # reading one sample, the local loader's readers

    @staticmethod
    def _mean(old, new):
        return new if old is None else 0.8 * old + 0.2 * new

    def timed_local(self, seconds, batches):
        self.local_batch_s = self._mean(self.local_batch_s, seconds / batches)

    def timed_worker(self, seconds, batches, extra_samples=None):
        """A task made `batches` in `seconds` of its worker's thread; when it
        started a range, it read extra_samples beyond the range's own."""
        if batches:
            self.worker_batch_s = self._mean(self.worker_batch_s, seconds / batches)
        if extra_samples is not None:
            self.reread = 0.8 * self.reread + 0.2 * max(0, extra_samples)

    def timed_read(self, seconds, samples):
        if samples:
            self.read_s = self._mean(self.read_s, seconds / samples)

    def least(self):
        """The smallest range worth a task: re-reading its window and
        starting it cost at most OVERHEAD of its time (before anything is
        measured: it reads again at most what it delivers)."""
        batch_s = min((s for s in (self.local_batch_s, self.worker_batch_s) if s), default=None)
        if batch_s is None or self.read_s is None:
            return math.ceil(self.reread / self.batch_size)
        cost = self.reread * self.read_s + self.TASK_START_S
        return math.ceil(cost / (self.OVERHEAD * batch_s))

    def size(self, left, workers, cluster):
        """Batches of the next range of the `left` not cut yet, for a worker
        thread (cluster) or the local thread; workers: the worker threads
        (at least one is assumed: with none, the local thread takes range
        after range, each continuing the previous one's pipeline)."""
        here = self.local_batch_s or self.worker_batch_s or 1.0
        there = self.worker_batch_s or here
        rate = 1.0 / (there if cluster else here)
        share = rate / (1.0 / here + max(workers, 1) / there)
        guided = math.ceil(left * share / self.SHARE)
        return max(1, min(left, self.most, max(guided, self.least())))


class Claims:
    """Batches [first, n) cut into ranges, each claimed by one side, and
    the batches made and not read yet (the reorder buffer: the first made
    of each batch is kept, wherever it came from). per_range: the batches
    of every range, or with sizes (a TaskSizes) the most one holds; ranges
    are then cut as the sides claim them."""

    def __init__(self, first, n, per_range, cluster, clock=time.monotonic, sizes=None):
        self.cluster = cluster
        self.clock = clock
        self.per_range = per_range
        self.sizes = sizes
        self.n = n
        self.ranges, self.state, self._starts = [], [], []
        self.cut = first  # the batches before it are cut into ranges
        if sizes is None:
            while self.cut < n:
                self._cut(per_range)
        else:
            self._has(0, LOCAL)  # the loop's first range, the local thread's
        self.ready = {}        # batch index -> item, made and not read yet
        self.held_local = set()  # the batches of ready made by the local thread
        self.futures = {}      # range -> {chunk: worker}, its chunks not finished
        self.submitted = {}    # range -> when its chunks were submitted
        self.local_only = set()  # ranges a worker sent bad data for: made here
        self.next = first      # the batch the loop reads next
        self.local_range = None  # the range the local thread is making
        self.last_local = None
        self.waiting = False   # the loop waits for batch `next`
        self.turnaround = None     # running mean of a range's time from submission to its end
        self.local_batch_s = None  # running mean of the local thread's time per batch
        self.spared = None  # the range pick_local takes from the cluster at the epoch's end

    def _cut(self, size):
        end = min(self.cut + size, self.n)
        self.ranges.append((self.cut, end))
        self._starts.append(self.cut)
        self.state.append(PENDING)
        self.cut = end

    def _has(self, r, side):
        """Whether range r exists: with TaskSizes, the ranges up to r are
        cut now (sized for side, LOCAL or CLUSTER) if the epoch has batches
        left for them."""
        while len(self.ranges) <= r and self.cut < self.n:
            self._cut(self.sizes.size(self.n - self.cut, self.cluster.workers(), side == CLUSTER))
        return r < len(self.ranges)

    def _at_end(self, end):
        """Whether range `end` is past the epoch's last range."""
        return self.cut >= self.n and end >= len(self.ranges)

    def front(self):
        """The range holding the batch the loop reads next (len(ranges) when
        it is not cut yet)."""
        if self.next >= self.cut:
            return len(self.ranges)
        return bisect.bisect_right(self._starts, self.next) - 1

    def limits(self):
        """(ranges in flight on the cluster, ranges claimed ahead of the loop)."""
        # Two ranges per worker thread: one running, one queued behind it.
        # Ahead of them, room for the local thread to work on without
        # waiting for the loop to catch up with the cluster.
        in_flight = 2 * self.cluster.workers() if self.cluster.usable() else 0
        return in_flight, in_flight + 3

    def missing_from(self, r):
        """The first batch of range r not made yet (at or after the loop's
        position), or None when it is complete."""
        first, end = self.ranges[r]
        for b in range(max(first, self.next), end):
            if b not in self.ready:
                return b
        return None

    def _pick_worker(self):
        """The worker with the fewest chunks of this run in flight."""
        load = {w: 0 for w in self.cluster.worker_addresses()}
        for chunks in self.futures.values():
            for w in chunks.values():
                if w in load:
                    load[w] += 1
        return min(load, key=load.get) if load else None

    # -- the cluster's side --

    def to_submit(self, shared):
        """(range, its first batch not made, worker, shared()) to submit to
        the cluster now, or None. shared() is what the workers get once per
        job (the dataset index, the hooks), or None while they cannot have
        it yet."""
        in_flight, lookahead = self.limits()
        front = self.front()
        for r in range(front, front + lookahead):
            if len(self.futures) >= in_flight:
                return None
            # The range after the local thread's is left to it: its pipeline
            # continues there without reading anything again.
            after_local = self.local_range is not None and r == self.local_range + 1
            if not self._has(r, LOCAL if after_local else CLUSTER):
                return None
            if self.state[r] != PENDING or r in self.local_only or after_local:
                continue
            start = self.missing_from(r)
            worker, held = self._pick_worker(), shared()
            if start is None or worker is None or held is None:
                continue
            return r, start, worker, held
        return None

    def submitted_to_cluster(self, r, chunks):
        """Range r went to the cluster as chunks ({chunk: worker})."""
        self.state[r] = CLUSTER
        self.futures[r] = chunks
        self.submitted[r] = self.clock()

    def chunk_done(self, r, chunk):
        """Whether chunk of range r was still wanted (then it is no longer
        in flight)."""
        return self.futures.get(r, {}).pop(chunk, None) is not None

    def range_failed(self, r, local_only=False):
        """A chunk of range r failed or was lost: whoever is free makes the
        range again (with local_only, the local thread). Returns its other
        chunks, to be dropped."""
        if local_only:
            self.local_only.add(r)
        chunks = self.futures.pop(r)
        self.submitted.pop(r, None)
        self.state[r] = PENDING
        return chunks

    def chunks_settled(self, r):
        """After a chunk of range r ended: when it was the range's last one,
        time the range and settle its claim."""
        if r in self.futures and not self.futures[r]:
            del self.futures[r]
            s = self.clock() - self.submitted.pop(r)
            self.turnaround = s if self.turnaround is None else 0.8 * self.turnaround + 0.2 * s
            if self.state[r] == CLUSTER:
                self.state[r] = DONE if self.missing_from(r) is None else PENDING

    # -- the local thread's side --

    def _late(self, r):
        """Why the cluster shows no sign of finishing range r soon, or None:
        the cluster is gone or has no worker, or the range has taken far
        longer than ranges take (its worker may have died unnoticed)."""
        if not self.cluster.usable():
            return "the Dask scheduler is unreachable"
        if self.cluster.workers() == 0:
            return "the Dask cluster has no worker"
        now = self.clock()
        age = now - self.submitted.get(r, now)
        if age > 2 * (self.turnaround or 5.0) + 1.0:
            return f"its tasks have run for {age:.1f} s"
        return None

    def _sooner_here(self, r):
        """The local thread would finish range r before the cluster is
        expected to (a slow or overloaded worker): a reason, or None."""
        if self.local_batch_s is None or self.turnaround is None or r not in self.submitted:
            return None
        start = self.missing_from(r)
        if start is None:
            return None
        here = self.local_batch_s * (self.ranges[r][1] - start)
        there = self.submitted[r] + self.turnaround - self.clock()
        return f"made here in {here:.1f} s, due from the cluster in {there:.1f} s" \
            if here < there else None

    def pick_local(self):
        """(range, reason it is taken back from the cluster or None) for
        the local thread to make next, or None."""
        front = self.front()
        if not self._has(front, LOCAL):
            return None
        if self.state[front] == PENDING:
            return front, None  # first the batches the loop needs next
        front_waits = self.state[front] == CLUSTER and self.waiting
        why = self._late(front) if front_waits else None
        if why is not None:
            return front, why
        _, lookahead = self.limits()
        end = front + lookahead
        if len(self.held_local) > self.per_range:
            # Wait for the loop (trainer.LOCAL_RANGES), but at the epoch's
            # end make the cluster's last range: the third range held.
            if not self._at_end(end) or len(self.held_local) > 2 * self.per_range:
                return None
            return self._spare_last(front, len(self.ranges))
        # The range after the previous one continues its pipeline: nothing
        # is read again.
        if self.last_local is not None:
            nxt = self.last_local + 1
            if front <= nxt < end and self._has(nxt, LOCAL) and self.state[nxt] == PENDING:
                return nxt, None
        r = front
        while r < end and self._has(r, LOCAL):
            if self.state[r] == PENDING:
                return r, None
            r += 1
        if self._at_end(end):
            return self._spare_last(front, len(self.ranges))
        # Nothing left to claim: rather than idle, make the range the loop
        # waits for if that is quicker than waiting for the cluster.
        why = self._sooner_here(front) if front_waits else None
        return (front, why) if why is not None else None

    def _spare_last(self, front, end):
        """At the epoch's end, every range left claimed: rather than idle,
        (the range the cluster would finish last, why) if it is made here
        sooner: the one queued behind the others on its worker, which is
        then spared it, not the one it is making. None otherwise."""
        for r in range(end - 1, front - 1, -1):
            why = self._sooner_here(r) if self.state[r] == CLUSTER else None
            if why is not None:
                self.spared = r
                return r, why
        return None

    def claim_local(self, r):
        """The local thread makes range r: (whether it took it back from
        the cluster, the range's chunks to drop now)."""
        taken_back = self.state[r] == CLUSTER
        self.state[r] = LOCAL
        self.local_range = r
        dropped = {}
        if r == self.spared:  # not wanted from the cluster any more
            dropped = self.futures.pop(r, {})
            self.submitted.pop(r, None)
            self.spared = None
        return taken_back, dropped

    def local_done(self, r):
        """The local thread stopped making range r. Returns the range's
        chunks still on the cluster, to be dropped when it is complete."""
        self.last_local, self.local_range = r, None
        if self.missing_from(r) is None:
            self.state[r] = DONE
            return self.futures.pop(r, {})
        if self.state[r] == LOCAL:
            self.state[r] = PENDING  # stopped early: whoever is free makes the rest
        return {}

    def timed_local(self, seconds, batches):
        """The local thread made `batches` batches in `seconds`."""
        per_batch = seconds / batches
        self.local_batch_s = per_batch if self.local_batch_s is None else \
            0.8 * self.local_batch_s + 0.2 * per_batch
        if self.sizes is not None:
            self.sizes.timed_local(seconds, batches)

    # -- the reorder buffer --

    def put(self, index, item, local):
        """Keep batch `index` unless it was made already or read: whether
        it was kept."""
        if index >= self.next and index not in self.ready:
            self.ready[index] = item
            if local:
                self.held_local.add(index)
            return True
        return False

    def take(self, index):
        """The item of batch `index`, which the loop reads now."""
        self.held_local.discard(index)
        self.next = index + 1
        return self.ready.pop(index)

    def clear(self):
        """Forget every chunk in flight and every batch held: the chunks."""
        chunks = [f for c in self.futures.values() for f in c]
        self.futures.clear()
        self.ready.clear()
        self.held_local.clear()
        return chunks
