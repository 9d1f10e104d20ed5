# SPDX-License-Identifier: MIT
"""next() releases the GIL while it waits for a batch: another Python thread
keeps running during the calls."""
import threading
import time

import pytest
import torch

import stoker

# The ticker's rate is measured: a test beside it would take the core it ticks on.
pytestmark = pytest.mark.serial

TICK_S = 0.0005
EPOCHS = 4


class Ticker(threading.Thread):
    """Counts in a loop of short sleeps (it needs the GIL for every tick)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.ticks = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.ticks += 1
            time.sleep(TICK_S)


def test_next_releases_the_gil(even_shards, monkeypatch):
    ticker = Ticker()
    calls = []  # (seconds in next(), ticks during it)

    class TimedLoader:
        def __init__(self, *a, **kw):
            self._real = stoker._ext._stoker.Loader(*a, **kw)

        def next(self):
            t0, k0 = time.perf_counter(), ticker.ticks
            batch = self._real.next()
            calls.append((time.perf_counter() - t0, ticker.ticks - k0))
            return batch

        def __getattr__(self, name):
            return getattr(self._real, name)

    monkeypatch.setattr(stoker.loader.loader, "_CLoader", TimedLoader)
    # Slow on purpose: one thread, full-scale decodes, float output.
    ld = stoker.Loader(even_shards, transform="eval", image_size=224, batch_size=16,
                       dtype=torch.float32, threads=1, shards_in_flight=1, full_decode=1,
                       shuffle=False, max_batches=2)
    ticker.start()
    try:
        # The ticker's rate is taken over the loop itself, not in a quiet moment
        # before it: a loaded machine slows its wake-ups (0.5 ms sleeps) during
        # the loop and during the calls alike, so only the GIL tells them apart.
        t0, k0 = time.perf_counter(), ticker.ticks
        n = 0
        for _epoch in range(EPOCHS):
            for images, _ in ld:
                n += images.shape[0]
        total_ticks = ticker.ticks
        rate = (total_ticks - k0) / (time.perf_counter() - t0)
    finally:
        ticker.stop.set()
        ticker.join(5)
    assert n == EPOCHS * 120 and total_ticks > 0
    seconds = sum(c[0] for c in calls)
    ticks = sum(c[1] for c in calls)
    assert seconds > 0.3, f"the loader was too fast to tell ({seconds:.3f} s in next())"
    # Holding the GIL for the call would let the other thread tick only at
    # its edges (a few ticks per call, well under 10% of the time); released,
    # it ticks in the calls at least as fast as over the loop (outside them
    # this thread holds the GIL).
    assert ticks >= 0.3 * rate * seconds, (
        f"the other thread ticked {ticks} times during {seconds:.2f} s spent in "
        f"next() ({len(calls)} calls); it ticked {rate:.0f}/s over the loop")
