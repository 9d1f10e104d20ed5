# SPDX-License-Identifier: MIT
"""The trainer's claim policy for Loader(cluster=...): which side makes
each range of an epoch's batches, the local thread or the Dask cluster,
when a task is late and when the trainer takes a range back.

Kept apart from the threads and from Dask (_cluster.Run drives it under
its lock) so that tests drive it alone, with a fake clock and a fake
cluster. The cluster is anything with usable(), workers() (worker
threads) and worker_addresses(), asked only when a decision needs them;
chunks are any hashable values (Dask futures in a Run).
"""
import time

PENDING, LOCAL, CLUSTER, DONE = range(4)


class Claims:
    """Batches [first, n) cut into ranges of per_range batches, each claimed
    by one side, and the batches made and not read yet (the reorder buffer:
    the first made of each batch is kept, wherever it came from)."""

    def __init__(self, first, n, per_range, cluster, clock=time.monotonic):
        self.cluster = cluster
        self.clock = clock
        self.per_range = per_range
        self.ranges = [(b, min(b + per_range, n)) for b in range(first, n, per_range)]
        self.state = [PENDING] * len(self.ranges)
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

    def front(self):
        """The range holding the batch the loop reads next."""
        return (self.next - self.ranges[0][0]) // self.per_range if self.ranges else 0

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
        for r in range(front, min(len(self.ranges), front + lookahead)):
            if len(self.futures) >= in_flight:
                return None
            # The range after the local thread's is left to it: its pipeline
            # continues there without reading anything again.
            if self.state[r] != PENDING or r in self.local_only or (
                    self.local_range is not None and r == self.local_range + 1):
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
        if front >= len(self.ranges):
            return None
        if self.state[front] == PENDING:
            return front, None  # first the batches the loop needs next
        front_waits = self.state[front] == CLUSTER and self.waiting
        why = self._late(front) if front_waits else None
        if why is not None:
            return front, why
        _, lookahead = self.limits()
        end = min(len(self.ranges), front + lookahead)
        if len(self.held_local) > self.per_range:
            # Wait for the loop (_cluster.LOCAL_RANGES), but at the epoch's
            # end make the cluster's last range: the third range held.
            if end < len(self.ranges) or len(self.held_local) > 2 * self.per_range:
                return None
            return self._spare_last(front, end)
        # The range after the previous one continues its pipeline: nothing
        # is read again.
        if self.last_local is not None:
            nxt = self.last_local + 1
            if front <= nxt < end and self.state[nxt] == PENDING:
                return nxt, None
        for r in range(front, end):
            if self.state[r] == PENDING:
                return r, None
        if end == len(self.ranges):
            return self._spare_last(front, end)
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
