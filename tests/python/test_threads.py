# SPDX-License-Identifier: MIT
"""One Loader and several Python threads. next() releases the GIL, so
calls from other threads run while one waits in C: they are serialised on
the loader, close() from another thread wakes a waiting next() (which then
raises), a second iterator of one loader is refused with a clear error
while the first is open, and nothing aborts or hangs.

The scenarios that crashed (pthread_mutex_destroy failed with error 16) or
hung run in subprocesses with timeouts, so a failure fails the test, not
the suite."""
import os
import subprocess
import sys
import threading

import pytest
import torch

import stoker

TIMEOUT_S = 120


def run_script(script, *args, env):
    try:
        proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hung for {TIMEOUT_S} s; output so far:\n{e.stdout}", pytrace=False)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stdout
    return proc.stdout


SMALL = dict(batch_size=8, image_size=16, transform="eval", shuffle=False, threads=2)


def first_error(iterable):
    """What iterating gives first: "a batch", or the RuntimeError's text."""
    try:
        for _ in iterable:
            return "a batch"
    except RuntimeError as e:
        return str(e)


CLOSE_WHILE_WAITING = r"""
import sys, threading, time
import stoker

if sys.argv[1] == "hooked":  # a hook that never returns: next() waits for the hooks' thread
    sys.path.insert(0, sys.argv[2])
    import hook_fns
    loader = stoker.Loader(sys.argv[3:], map=hook_fns.hang, hook_processes=1,
                           transform="eval", image_size=16, batch_size=4, threads=1)
else:  # a shard that never comes: next() waits in C with the GIL released
    loader = stoker.Loader(["pipe:sleep 60"], allow_pipe=1, transform="eval", image_size=16,
                           batch_size=4, threads=1)
outcome = []

def consume():
    try:
        for _ in loader:
            outcome.append("batch")
    except ValueError as e:
        outcome.append(str(e))

t = threading.Thread(target=consume, daemon=True)
t.start()
time.sleep(0.3)
start = time.monotonic()
loader.close()
closed_in = time.monotonic() - start
t.join(30)
assert not t.is_alive(), "next() still waits after close()"
assert closed_in < 10, closed_in
assert len(outcome) == 1 and "closed" in outcome[0], outcome
assert "stoker-hooks" not in [t.name for t in threading.enumerate()]  # ended, not spinning
loader.close()  # again: nothing to do
print("done")
"""


@pytest.mark.parametrize("what", ["plain", "hooked"])
def test_close_from_another_thread_wakes_a_waiting_next(what, even_shards, clean_env_factory):
    run_script(CLOSE_WHILE_WAITING, what, os.path.dirname(__file__), *even_shards,
               env=clean_env_factory())


CLOSE_WHILE_ITERATING = r"""
import sys, threading, time
import stoker

urls = sys.argv[1:]
for trial in range(10):
    loader = stoker.Loader(urls, transform="eval", image_size=16, batch_size=2, threads=2,
                           max_batches=2)
    errors = []

    def consume():
        try:
            for epoch in range(1000):
                for images, labels in loader:
                    pass
        except ValueError as e:
            errors.append(str(e))

    ts = [threading.Thread(target=consume)]
    ts[0].start()
    time.sleep(0.01 * trial)
    loader.close()
    ts[0].join(30)
    assert not ts[0].is_alive()
    assert len(errors) == 1 and "closed" in errors[0], errors
print("done")
"""


def test_close_while_another_thread_iterates(even_shards, clean_env_factory):
    run_script(CLOSE_WHILE_ITERATING, *even_shards, env=clean_env_factory())


def test_second_iterator_is_refused_while_the_first_is_open(even_shards):
    reference = [(im.clone(), lb.clone()) for im, lb in stoker.Loader(even_shards, **SMALL)]
    loader = stoker.Loader(even_shards, **SMALL)
    first = iter(loader)
    got = [tuple(t.clone() for t in next(first))]
    # The same thread...
    with pytest.raises(RuntimeError, match="already being iterated"):
        next(iter(loader))
    # ...and another one.
    refused = []
    t = threading.Thread(target=lambda: refused.append(first_error(loader)))
    t.start()
    t.join(30)
    assert len(refused) == 1 and "already being iterated" in refused[0], refused
    # The first iterator was not disturbed: the epoch's batches, in order.
    got += [(im.clone(), lb.clone()) for im, lb in first]
    assert len(got) == len(reference)
    for (a, b), (c, d) in zip(got, reference):
        assert torch.equal(a, c) and torch.equal(b, d)
    # Once the first is finished (or closed, or dropped), iterating works
    # again; after one that stopped early it continues that epoch.
    assert sum(im.shape[0] for im, _ in loader) == 120
    it = iter(loader)
    first_batch = next(it)[0].shape[0]
    it.close()
    assert sum(im.shape[0] for im, _ in loader) == 120 - first_batch
    it = iter(loader)
    first_batch = next(it)[0].shape[0]
    del it
    assert sum(im.shape[0] for im, _ in loader) == 120 - first_batch


THREADS_SHARE_ONE_LOADER = r"""
import sys, threading
import stoker

urls = sys.argv[1:]
loader = stoker.Loader(urls, transform="eval", image_size=16, batch_size=4, threads=2,
                       shuffle=False)
batches, refused, other = [], [], []

def iterate():
    for epoch in range(20):
        try:
            n = 0
            for images, labels in loader:
                n += images.shape[0]
            batches.append(n)
        except RuntimeError as e:
            assert "already being iterated" in str(e), e
            refused.append(1)
        except Exception as e:
            other.append(repr(e))

ts = [threading.Thread(target=iterate) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join(60)
assert not any(t.is_alive() for t in ts)
assert not other, other
assert len(batches) + len(refused) == 80
assert all(n == 120 for n in batches), batches  # a finished epoch is a whole one
print(len(batches), "epochs,", len(refused), "refused")

# The C loader itself, several threads calling next() at once: the calls
# are serialised, every batch is delivered once.
c = stoker._ext._stoker.Loader(urls, transform="eval", image_size=16, batch_size=2, threads=2,
                          max_batches=8)
seen, lock = [], threading.Lock()

def pull():
    while True:
        b = c.next()
        if b is None:
            return
        with lock:
            seen.append(b.index)
        del b

for epoch in range(5):
    seen.clear()
    c.seek(epoch, 0)
    ts = [threading.Thread(target=pull) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert sorted(seen) == list(range(60)), sorted(seen)
# seek, info and stats from other threads while one pulls
stop = threading.Event()

def poke():
    while not stop.is_set():
        c.stats()
        c.info()

p = threading.Thread(target=poke)
p.start()
for epoch in range(3):
    c.seek(epoch, 0)
    n = 0
    while c.next() is not None:
        n += 1
    assert n == 60, n
stop.set()
p.join()
c.close()
print("done")
"""


def test_threads_sharing_one_loader(even_shards, clean_env_factory):
    out = run_script(THREADS_SHARE_ONE_LOADER, *even_shards, env=clean_env_factory())
    assert "epochs," in out
