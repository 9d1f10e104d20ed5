# SPDX-License-Identifier: MIT
"""What crosses from the hook processes (Loader(map=, batch_map=)) to the
trainer, and what it costs there.

The promises under test: arrays of numbers cross with their values, every
dtype torch has (bfloat16 too) in both directions; an array that cannot
cross (object, structured, datetime, text) is a HookError naming the hook,
the sample and why, never pointers of another process or raw bytes; an
image bigger than max_image_pixels is refused from its header in the hook
process as stoker's own decoder refuses it; a hooked batch is built in
place, without a copy per sample and a stacked copy of them: the hook
processes write the results into the batch's shared memory, which the
trainer's batch is a view of.
"""
import os
import re
import struct
import subprocess
import sys
import time
import zlib

import numpy
import pytest
import torch

import stoker
import hook_data_fns
import hook_fns
from stoker.hooks.pool import Pool, Task, dumps

SMALL = dict(batch_size=8, image_size=32, shuffle_buffer=16, seed=5)


def run_tasks(pool, args, within_s=60):
    """The finished tasks of pool for these arguments, in order."""
    owner = object()
    tasks = [Task("map", k, arg, owner) for k, arg in enumerate(args)]
    for task in tasks:
        pool.submit(task)
    deadline = time.monotonic() + within_s
    while not all(t.done for t in tasks) and time.monotonic() < deadline:
        pool.step(0.05)
    assert all(t.done for t in tasks), "the hook process did not answer in time"
    return tasks


@pytest.fixture(scope="module")
def make_pool():
    pool = Pool(dumps({"map": hook_data_fns.make}), 1, None)
    yield pool
    pool.close()


def expected_array(name):
    a = hook_data_fns.NUMBERS[name]()
    return a if isinstance(a, torch.Tensor) else a.astype(a.dtype.newbyteorder("="))


def test_arrays_of_numbers_cross_with_their_values(make_pool):
    names = list(hook_data_fns.NUMBERS)
    for name, task in zip(names, run_tasks(make_pool, names)):
        assert task.error is None, (name, task.error)
        got, want = task.result, expected_array(name)
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want), name
        else:
            assert got.dtype == want.dtype and got.dtype.isnative, (name, got.dtype)
            assert numpy.array_equal(got, want), (name, got, want)


def test_what_cannot_cross_is_refused_saying_why(make_pool):
    names = list(hook_data_fns.REFUSED)
    for name, task in zip(names, run_tasks(make_pool, names)):
        assert task.error is not None, (name, task.result)
        exc, text, _ = task.error
        assert isinstance(exc, TypeError), (name, text)
        assert "its result is a " in str(exc) and "cannot cross between the trainer and its " \
            "hook processes" in str(exc), (name, str(exc))
        assert re.search(hook_data_fns.REFUSED[name][1], str(exc)), (name, str(exc))


def test_map_results_of_every_dtype_make_a_batch(even_shards):
    """uint16 and uint32, which torch lacks, arrive as int32 and int64;
    big-endian arrays in the machine's byte order; bfloat16 as itself."""
    with stoker.Loader(even_shards, map=hook_data_fns.numbers, hook_processes=1,
                       **SMALL) as loader:
        batch, labels = next(iter(loader))
    assert labels.shape == (8,)
    wider = {"uint16": numpy.int32, "uint32": numpy.int64}
    for name in hook_data_fns.NUMBERS:
        got, want = batch[name], expected_array(name)
        if not isinstance(want, torch.Tensor):
            want = torch.from_numpy(want.astype(wider.get(name, want.dtype)))
        assert got.dtype == want.dtype and got.shape == (8, 3), (name, got.dtype)
        assert torch.equal(got[:, 1:], want[1:].expand(8, 2)), (name, got, want)
    assert set(batch["uint8"][:, 0].tolist()) <= {0, 1}  # each sample its own


def test_batch_map_results_of_every_dtype_arrive(even_shards):
    """numpy arrays stay numpy (uint64 too); bfloat16 stays a tensor."""
    with stoker.Loader(even_shards, batch_map=hook_data_fns.numbers_of_batch,
                       hook_processes=1, **SMALL) as loader:
        batch = next(iter(loader))
    for name in hook_data_fns.NUMBERS:
        got, want = batch[name], expected_array(name)
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want), name
        else:
            assert got.dtype == want.dtype and numpy.array_equal(got, want), (name, got)
    assert batch["uint64"].dtype == numpy.uint64
    assert numpy.array_equal(batch["uint64"], hook_data_fns.UINT64())


def test_an_object_array_from_map_is_a_hook_error_naming_the_sample(even_shards):
    with stoker.Loader(even_shards, map=hook_data_fns.object_array, hook_processes=1,
                       **SMALL) as loader:
        with pytest.raises(stoker.HookError, match=r"hook map=object_array failed on sample "
                           r"'[^']+' of .*\.tar .*its result\['tags'\] is a numpy array of "
                           r"dtype object, which cannot cross .*pointers into the memory"):
            next(iter(loader))


def test_a_structured_array_from_batch_map_is_a_hook_error(even_shards):
    with stoker.Loader(even_shards, batch_map=hook_data_fns.structured_batch,
                       hook_processes=1, **SMALL) as loader:
        with pytest.raises(stoker.HookError, match=r"hook batch_map=structured_batch failed on "
                           r"batch 0 .*its result is a numpy array of dtype .*structured"):
            next(iter(loader))


def test_uint64_from_map_names_the_hook_and_what_torch_lacks(even_shards):
    with stoker.Loader(even_shards, map=hook_data_fns.uint64_labels, hook_processes=1,
                       **SMALL) as loader:
        with pytest.raises(stoker.HookError, match=r"hook map=uint64_labels returned ndarray of "
                           r"shape \[3\] and dtype uint64 for sample '[^']+' of .*\.tar and the "
                           r"rest of batch 0: .*torch has no uint64"):
            next(iter(loader))


def test_bfloat16_batches_go_through_the_hooks_both_ways(even_shards):
    with stoker.Loader(even_shards, dtype=torch.bfloat16, threads=1, **SMALL) as plain:
        want = next(iter(plain))[0].clone()
    with stoker.Loader(even_shards, dtype=torch.bfloat16, map=hook_data_fns.as_is,
                       batch_map=hook_data_fns.halve, hook_processes=1, threads=1,
                       **SMALL) as loader:
        got = next(iter(loader))[0]
    assert got.dtype == torch.bfloat16 and torch.equal(got, want / 2)
    with stoker.Loader(even_shards, threads=1, **SMALL) as plain:
        pixels = next(iter(plain))[0].clone()
    with stoker.Loader(even_shards, map=hook_data_fns.to_bfloat16, hook_processes=1, threads=1,
                       **SMALL) as loader:
        got = next(iter(loader))[0]
    assert got.dtype == torch.bfloat16 and torch.equal(got, pixels.to(torch.bfloat16) / 255)


def png_bomb(width, height):
    """A valid black PNG of width x height pixels, compressed to almost nothing."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    deflate = zlib.compressobj(9)
    row = b"\0" * (3 * width + 1)  # filter byte, RGB
    idat = b"".join(deflate.compress(row) for _ in range(height)) + deflate.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                              0, 0, 0)) +
            chunk(b"IDAT", idat) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def bomb_shard(tmp_path_factory, dataset):
    """Eight samples; the fourth a PNG of 144 megapixels in a few hundred KB."""
    from test_fields import write_rows
    rows = [(s.key, {"jpg": s.jpg, "cls": s.cls}) for s in dataset[:8]]
    bomb = png_bomb(12000, 12000)
    assert len(bomb) < 512 * 1024
    rows[3] = (rows[3][0], {"png": bomb, "cls": dataset[3].cls})
    return write_rows(tmp_path_factory.mktemp("bomb") / "b-0.tar", rows), rows[3][0]


WHOLE = dict(batch_size=4, shuffle=False, seed=5, transform=None, map=hook_fns.crop_whole,
             hook_processes=1)


def test_transform_none_refuses_an_image_above_max_image_pixels_from_its_header(bomb_shard):
    shard, key = bomb_shard
    with stoker.Loader([shard], **WHOLE) as loader:
        with pytest.raises(stoker.HookError, match=rf"hook map=crop_whole failed on sample "
                           rf"'{key}' of .*b-0.tar .*PNG of 12000x12000 pixels is above the "
                           r"limit of 100000000 pixels \(max_image_pixels"):
            list(loader)
    with stoker.Loader([shard], on_error="skip", **WHOLE) as loader:
        batches = list(loader)
        assert loader.stats()["hook_samples_skipped"] == 1
    assert sum(len(b[0]) for b in batches) == 8  # replaced, not dropped
    # The limit is the loader's: here the photos are above it too.
    with stoker.Loader([shard], max_image_pixels=1000, **WHOLE) as loader:
        with pytest.raises(stoker.HookError, match=r"JPEG of \d+x\d+ pixels is above the limit "
                           r"of 1000 pixels \(max_image_pixels"):
            list(loader)


MEMORY_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
import stoker, hook_data_fns


def peak(**hooks):
    # The peak RSS of this process over an epoch whose loop is slower than
    # the hooks (each batch held 0.3 s): the pipeline fills as far as it may.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak starts again from now
    with stoker.Loader({shards!r}, batch_size=32, image_size=32, threads=1, shuffle=False,
                       **hooks) as loader:
        for batch in loader:
            float(batch[0].float().sum())  # the loop reads its batch, as training does
            time.sleep(0.3)
        del batch
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


plain = peak()  # the C loader's own memory, the same in both
print((peak(map=hook_data_fns.mib_and_a_half, hook_processes=1) - plain) / (32 * 3 * 512 * 256 * 4))
"""


@pytest.fixture(scope="module")
def long_shard(tmp_path_factory, dataset):
    """448 samples: fourteen batches of 32 in one epoch."""
    from test_fields import write_rows
    rows = [(f"{k:05d}", {"jpg": s.jpg, "cls": s.cls})
            for k, s in enumerate(dataset[i % len(dataset)] for i in range(448))]
    return write_rows(tmp_path_factory.mktemp("long") / "long-0.tar", rows)


@pytest.mark.serial  # peak RSS is measured
def test_a_hooked_batch_costs_the_trainer_few_batches_of_memory(long_shard, clean_env_factory):
    """The hook processes write map= results into the batch's slot of
    shared memory and the loop's batch is a view of it: the trainer copies
    no result (the first chunk's apart, sent before any result showed the
    layout) and touches only the batch its loop reads, under 2 batches
    above the same loader without hooks (1.00 measured; the slots in flight
    are the hook processes' writing, docs/hooks.md). Before: 2.45 to 2.95
    (each result copied out of an arena kept a chunk large, into rows of
    the trainer's own for the loop's batch and two in flight); before
    that, 5.6."""
    script = MEMORY_SCRIPT.format(tests=os.path.dirname(__file__), shards=[long_shard])
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=clean_env_factory())
    assert proc.returncode == 0, proc.stderr
    batches = float(proc.stdout.split()[-1])
    assert batches < 2, f"the hooked loader's peak is {batches:.2f} batches above the plain one"


def _mapping_of(address):
    """The path of the mapping of this process that holds address."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return fields[5].strip() if len(fields) > 5 else ""
    return None


def test_a_hooked_batch_is_the_shared_memory_the_hook_processes_wrote(even_shards):
    """Every batch of map= results is a view of the memfd its hook
    processes wrote the results into (not a copy in the trainer's own
    memory), one of its own per batch: batches the loop keeps stay the
    same bytes after later batches and after the loader closed."""
    kept, places = [], set()
    with stoker.Loader(even_shards, map=hook_data_fns.mib_and_a_half, hook_processes=2,
                       **SMALL) as loader:
        for images, labels in loader:
            assert "memfd:stoker-hook" in _mapping_of(images.data_ptr()), \
                _mapping_of(images.data_ptr())
            places.add(images.data_ptr())
            kept.append((images, images.clone()))
    assert len(kept) == 15 and len(places) == 15
    assert all(torch.equal(batch, copy) for batch, copy in kept)
    with stoker.Loader(even_shards, map=hook_data_fns.mib_and_a_half, hook_processes=1,
                       **SMALL) as loader:
        again = [images.clone() for images, _ in loader]
    assert all(torch.equal(batch, other) for (batch, _), other in zip(kept, again))


def test_the_thread_making_batches_holds_at_most_depth_of_them():
    """While the loop holds one batch, the thread takes no more C batches
    than it may hold made or in the making (depth): before, two queued, one
    waiting to be and two in flight."""
    from stoker.hooks import batches as _hook_batches
    drawn = []

    def source():
        for index in range(20):
            drawn.append(index)
            samples = [torch.full((3, 4, 4), index, dtype=torch.uint8) for _ in range(4)]
            yield index, samples, list(range(4)), torch.zeros(4, dtype=torch.int64), \
                [("s.tar", f"{index}-{i}") for i in range(4)], None

    hooked = _hook_batches.make(hook_data_fns.as_is, None, 1, None, 0, 0, False, 4)
    hooked.pool.start()
    batches = hooked.batches(source(), 0)
    try:
        first, _ = next(batches)
        assert torch.equal(first, torch.zeros((4, 3, 4, 4), dtype=torch.uint8))
        deadline, seen, since = time.monotonic() + 60, -1, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < 3:
            if len(drawn) != seen:  # wait until it has drawn all it will
                seen, since = len(drawn), time.monotonic()
            time.sleep(0.05)
        assert len(drawn) <= 1 + hooked.depth, (len(drawn), hooked.depth)
        rest = [b for b, _ in batches]
        assert [int(b[0, 0, 0, 0]) for b in rest] == list(range(1, 20))
    finally:
        batches.close()
        hooked.pool.close()


def test_a_map_batch_is_built_in_place_not_stacked(even_shards, monkeypatch):
    """Each sample's result is written into its row of the batch (by the
    hook process, or copied there from the arena for the first ones): no
    copy of its own, no torch.stack of the copies."""
    stacked = []
    stack = torch.stack
    monkeypatch.setattr(torch, "stack", lambda *a, **k: stacked.append(1) or stack(*a, **k))
    with stoker.Loader(even_shards, map=hook_data_fns.mib_and_a_half, hook_processes=2,
                       **SMALL) as loader:
        batches = [b[0].clone() for b in loader]
    assert len(batches) == 15 and batches[0].shape == (8, 3, 512, 256)
    assert stacked == []
