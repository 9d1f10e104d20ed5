# SPDX-License-Identifier: MIT
"""stoker.ShardWriter and stoker.verify: samples written from Python read
back the same by stoker.Samples and stoker.Loader, failures leave no
half-written shard, and verify finds every bad sample and shard."""
import os

import pytest

import stoker


def read_all(pattern):
    return list(stoker.Samples(pattern, shuffle=False))


def test_round_trip(tmp_path, dataset):
    pattern = str(tmp_path / "w-%03d.tar")
    originals = dataset[:7]
    with stoker.ShardWriter(pattern, max_samples=3) as w:
        for i, s in enumerate(originals):
            w.write({"__key__": s.key, "jpg": s.jpg, "cls": i % 4, "txt": f"caption {i}",
                     "__url__": "left out"})
    assert sorted(os.listdir(tmp_path)) == ["w-000.tar", "w-001.tar", "w-002.tar"]
    back = read_all(str(tmp_path / "w-{000..002}.tar"))
    assert [b["__key__"] for b in back] == [s.key for s in originals]
    for i, (b, s) in enumerate(zip(back, originals)):
        assert b["jpg"] == s.jpg and b["cls"] == str(i % 4).encode()
        assert b["txt"] == f"caption {i}".encode() and b["__url__"].endswith(".tar")
    # the loader decodes them, labels from .cls
    labels = [int(x) for _, lb in stoker.Loader(str(tmp_path / "w-{000..002}.tar"),
                                                batch_size=7, image_size=16, transform="eval",
                                                shuffle=False) for x in lb]
    assert labels == [i % 4 for i in range(7)]


def test_close_reports_counts_and_then_refuses(tmp_path):
    w = stoker.ShardWriter(str(tmp_path / "c-%d.tar"), max_bytes=10)
    for i in range(3):
        w.write({"__key__": f"k{i}", "bin": bytes(8)})
    assert w.close() == (3, 3)  # 8 + 8 > 10: a shard each
    with pytest.raises(ValueError, match="closed"):
        w.write({"__key__": "late", "bin": b"x"})


def test_exception_in_block_publishes_nothing(tmp_path):
    """e-0 was complete, but alone it would read as a whole, smaller
    dataset: a run is published at the end of the block or not at all."""
    with pytest.raises(RuntimeError):
        with stoker.ShardWriter(str(tmp_path / "new" / "e-%d.tar"), max_samples=2) as w:
            for i in range(5):
                w.write({"__key__": f"k{i}", "bin": b"x"})
            raise RuntimeError("the producer failed")
    assert os.listdir(tmp_path) == []  # nor the directory it made


def test_writer_makes_its_directory_and_refuses_another_run(tmp_path):
    out = tmp_path / "new" / "deeper"
    with stoker.ShardWriter(str(out / "d-%06d.tar"), max_samples=1) as w:
        for i in range(3):
            w.write({"__key__": f"old{i}", "txt": "old"})
    assert sorted(os.listdir(out)) == ["d-000000.tar", "d-000001.tar", "d-000002.tar"]
    # Another width: the same family, which a glob (d-*.tar) reads together.
    with pytest.raises(FileExistsError, match="d-000000.tar.*overwrite=True"):
        stoker.ShardWriter(str(out / "d-%d.tar"))
    with stoker.ShardWriter(str(out / "d-%d.tar"), overwrite=True) as w:
        w.write({"__key__": "new", "txt": "new"})
    assert os.listdir(out) == ["d-0.tar"]
    # Another prefix is another dataset: left alone.
    with stoker.ShardWriter(str(out / "val-%d.tar")) as w:
        w.write({"__key__": "v", "txt": "val"})
    assert sorted(os.listdir(out)) == ["d-0.tar", "val-0.tar"]


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="exactly one %d"):
        stoker.ShardWriter(str(tmp_path / "no-number.tar"))
    with stoker.ShardWriter(str(tmp_path / "b-%d.tar")) as w:
        with pytest.raises(ValueError, match="key 'a.b'"):
            w.write({"__key__": "a.b", "bin": b"x"})
        with pytest.raises(ValueError, match="__key__"):
            w.write({"bin": b"x"})
        with pytest.raises(TypeError, match="'f'"):
            w.write({"__key__": "k", "f": 1.5})
        with pytest.raises(TypeError):
            w.write([("__key__", "k")])
        w.write({"__key__": "good", "bin": b"x"})
    assert [s["__key__"] for s in read_all(str(tmp_path / "b-0.tar"))] == ["good"]


def test_verify_lists_every_problem(tmp_path, dataset, even_shards):
    """stoker.verify: the same checks and counts as `stoker verify`."""
    clean = stoker.verify(even_shards, threads=2)
    assert clean == {"samples": 120, "bad_samples": 0, "shards": len(even_shards),
                     "shards_failed": 0, "shards_empty": 0, "images_decoded": 120,
                     "problems": []}
    pattern = str(tmp_path / "v-%d.tar")
    with stoker.ShardWriter(pattern) as w:
        for s in dataset[:4]:
            w.write({"__key__": s.key, "jpg": s.jpg, "cls": s.cls})
        w.write({"__key__": "broken", "jpg": dataset[4].jpg[:300], "cls": 1})
        w.write({"__key__": "unlabelled", "jpg": dataset[5].jpg})
    missing = str(tmp_path / "missing.tar")
    r = stoker.verify([str(tmp_path / "v-0.tar"), missing])
    assert (r["samples"], r["bad_samples"], r["shards"], r["shards_failed"],
            r["images_decoded"]) == (6, 2, 1, 1, 4)
    assert len(r["problems"]) == 3, r["problems"]  # one per bad sample and shard
    text = "\n".join(r["problems"])
    assert "'broken' member jpg" in text and "'unlabelled' has no label member" in text
    assert f"{missing}: " in text
    r = stoker.verify(str(tmp_path / "v-0.tar"), labels=False)
    assert (r["bad_samples"], r["images_decoded"]) == (1, 5)
    r = stoker.verify(str(tmp_path / "v-0.tar"), images=False)
    assert (r["samples"], r["bad_samples"], r["images_decoded"]) == (6, 0, 0)
    with pytest.raises(TypeError, match="unknown option 'bogus'"):
        stoker.verify(even_shards, bogus=1)


WRITER_FROM_TWO_THREADS = r"""
import sys, threading
import stoker

w = stoker.ShardWriter(sys.argv[1] + "/t-%d.tar", max_samples=4)
big = bytes(64 << 20)
started, refused = threading.Event(), []

def producer():
    for i in range(6):
        started.set()
        w.write({"__key__": f"big{i}", "bin": big})  # the GIL is released while it writes

t = threading.Thread(target=producer)
t.start()
started.wait()
for attempt in ("write", "close", "reinit"):
    try:
        if attempt == "write":
            w.write({"__key__": "small", "txt": "x"})
        elif attempt == "close":
            w.close()
        else:
            w.__init__(sys.argv[1] + "/u-%d.tar")
    except RuntimeError as e:
        refused.append(attempt)
        assert "another thread" in str(e) or "already" in str(e), e
t.join()
print(w.close(), refused)
assert refused == ["write", "close", "reinit"], refused
print("done")
"""


def test_writer_used_from_two_threads_is_refused(tmp_path, clean_env_factory):
    """write() releases the GIL while stk_writer_add runs: a second thread's
    write(), close() or __init__() meanwhile is refused with a clear error
    instead of using the C writer at the same time (a use-after-free for
    close). In a subprocess: without the check it could crash."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", WRITER_FROM_TWO_THREADS, str(tmp_path)],
                          env=clean_env_factory(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stdout
    assert "(2, 6)" in proc.stdout  # the producer's 6 samples, in 2 shards


def test_writer_init_again_is_refused(tmp_path):
    w = stoker.ShardWriter(str(tmp_path / "a-%d.tar"))
    w.write({"__key__": "k", "txt": "x"})
    with pytest.raises(RuntimeError, match="already"):
        w.__init__(str(tmp_path / "b-%d.tar"))
    assert w.close() == (1, 1)
    assert sorted(os.listdir(tmp_path)) == ["a-0.tar"]


def test_writer_refuses_existing_shards_unless_overwrite(tmp_path):
    pattern = str(tmp_path / "o-%d.tar")
    with stoker.ShardWriter(pattern, max_samples=1) as w:
        for i in range(4):
            w.write({"__key__": f"old{i}", "txt": "old"})
    with pytest.raises(FileExistsError, match="overwrite=True"):
        stoker.ShardWriter(pattern)
    with stoker.ShardWriter(pattern, max_samples=2, overwrite=True) as w:
        for i in range(3):
            w.write({"__key__": f"new{i}", "txt": "new"})
    # The earlier run's o-2 and o-3 are gone: the pattern names this run only.
    assert sorted(os.listdir(tmp_path)) == ["o-0.tar", "o-1.tar"]
    assert [s["__key__"] for s in read_all(str(tmp_path / "o-{0..1}.tar"))] == \
        ["new0", "new1", "new2"]
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "l-0.tar.tmp").symlink_to(victim)
    with stoker.ShardWriter(str(tmp_path / "l-%d.tar")) as w:
        w.write({"__key__": "k", "txt": "x"})
    assert victim.read_bytes() == b"precious"


REENTRANT_WRITE = r"""
import sys
import stoker

w = stoker.ShardWriter(sys.argv[1] + "/r-%d.tar")
refused = []

class Sneaky(int):
    def __str__(self):  # runs while write() converts the value
        for call in (w.close, lambda: w.write({"__key__": "inner", "txt": "x"})):
            try:
                call()
            except RuntimeError as e:
                refused.append(str(e))
        sample.clear()  # and the dict changes under the loop
        return "7"

sample = {"__key__": "k", "cls": Sneaky(7), "txt": "x"}
w.write(sample)
assert len(refused) == 2, refused
assert w.close() == (1, 1)
got = list(stoker.Samples(sys.argv[1] + "/r-0.tar"))
assert got[0]["__key__"] == "k" and got[0]["cls"] == b"7", got
print("done")
"""


def test_write_refuses_calls_from_the_values_it_converts(tmp_path, clean_env_factory):
    """Converting a member value can run Python code: a close() or write()
    from there is refused, and a dict emptied meanwhile does not pull the
    key or the names from under the call (in a subprocess: it crashed)."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", REENTRANT_WRITE, str(tmp_path)],
                          env=clean_env_factory(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stdout
