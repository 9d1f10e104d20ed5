# SPDX-License-Identifier: MIT
"""Loader(cluster=...) with fields=, map= or batch_map=: a range's batches
as the objects the training loop gets, made the same way by a Dask worker
and by the trainer's local thread, and the canary that checks a worker's
hook against the trainer's.

A Dask worker runs the hooks as a local Loader does, in hook processes
(_hooks.Pool) of its own: never on the worker's threads, where a hook that
holds the GIL would starve the worker's event loop (dask distributed issues
6324 and 6325). The keys of the hooks' random streams are those of a local
run (_hook_batches), so the batches are the same bytes wherever they are
made, as long as the hook gives the same bytes for the same input and key
there: the fingerprint (hooks.env, and hooks.code for the modules the
hooks run) compares what is known to change that, and the canary tries
each hook (map= and batch_map=) on its first call on each worker.
"""
import collections
import zlib

import numpy
import torch

from ..hooks import batches as _hook_batches
from ..base.fields import _Fields
from ..hooks.decode import DecodeFirst
from ..hooks.pool import Task

CANARY_TIMEOUT_S = 120.0  # a cold hook process imports torch first


def _walk(value, leaf):
    """value with leaf() applied to every tensor and numpy array in it."""
    if isinstance(value, (torch.Tensor, numpy.ndarray)):
        return leaf(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_walk(v, leaf) for v in value)
    if isinstance(value, dict):
        return {k: _walk(v, leaf) for k, v in value.items()}
    return value


def owned(value):
    """value with its arrays copied: none is a view of a C loader's buffer."""
    return _walk(value, lambda a: a.clone() if isinstance(a, torch.Tensor) else a.copy())


def digest(value):
    """CRC-32 of a batch object: its arrays' dtypes, shapes and bytes and the
    repr of everything else, in order. As cluster.worker.batch_digest, an
    integrity check of what crossed the network, not a signature."""
    crc = [0]

    def leaf(a):
        array = a.detach().contiguous().numpy() if isinstance(a, torch.Tensor) else \
            numpy.ascontiguousarray(a)
        crc[0] = zlib.crc32(memoryview(array).cast("B"),
                            zlib.crc32(repr((array.dtype.str, array.shape)).encode(), crc[0]))
        return None

    skeleton = _walk(value, leaf)
    return zlib.crc32(repr(skeleton).encode(), crc[0])


def nbytes(value):
    """Bytes of the arrays in a batch object."""
    total = [0]

    def leaf(a):
        total[0] += a.numel() * a.element_size() if isinstance(a, torch.Tensor) else a.nbytes

    _walk(value, leaf)
    return total[0]


def same(a, b):
    """Whether two hook results are the same bytes and structure."""
    return type(a) is type(b) and digest(a) == digest(b)


class Outputs:
    """How the C loader's batches of a range become the loop's objects:
    fields= picks the members, the hooks (a _hook_batches.HookedBatches,
    or None) run on them. images_of(buffer, n) is the images tensor of a
    batch; own: copy what would otherwise be a view of the C loader's
    buffer (a Dask worker sends its batches away)."""

    def __init__(self, fields, hooked, images_of, own=False, raw_labels=None):
        self.fields, self.hooked, self.images_of, self.own = fields, hooked, images_of, own
        self.raw_labels = raw_labels  # transform=None: the label members

    def made(self, loader, epoch, first, count):
        """Yield (object, samples, bad-input counts) of each batch of
        [first, first + count), fewer at the epoch's end (the counts: the C
        batch's skips and the samples map= failed on, replaced under
        on_error="skip"); bad input under
        on_error="fail" or a hook's failure raises after the batches
        before it. Closing the generator stops the hooks' thread."""
        loader.seek_range(epoch, first, count)
        counts = collections.deque()  # (size, skips) of the C batches taken, in order

        def c_batches():
            for _ in range(count):
                b = loader.next()
                if b is None:
                    return
                counts.append((b.size, b.skips))
                yield b
                del b

        if self.hooked is None:
            for b in c_batches():
                out = self.fields.batch(b, self.images_of(b.images, b.size))
                del b
                n, skips = counts.popleft()
                yield (owned(out) if self.own else out), n, skips + (0,)
                del out
            return
        raw_skips = collections.deque()  # with transform=None: samples skipped per batch
        if self.raw_labels is None:
            source = _hook_batches.samples(c_batches(), self.images_of, self.fields)
        else:
            source = self._raw_source(c_batches(), raw_skips)
        hooked = self.hooked.batches(source, epoch, with_skips=True)
        try:
            for out, hook_skips in hooked:
                n, skips = counts.popleft()
                if raw_skips:  # charged to samples_skipped, as a local loader does
                    skips = (skips[0] + raw_skips.popleft(),) + skips[1:]
                yield out, n, skips + (hook_skips,)
                del out
        finally:
            hooked.close()

    def _raw_source(self, c_batches, raw_skips):
        """_hook_batches.raw_samples, and into raw_skips the samples it
        skipped in each batch, in order (it counts them before yielding the
        batch)."""
        pending = [0]

        def on_skip(n):
            pending[0] += n

        for item in _hook_batches.raw_samples(c_batches, self.fields, self.raw_labels,
                                              self.hooked.skip, on_skip):
            raw_skips.append(pending[0])
            pending[0] = 0
            yield item


class RecordingPool:
    """A hook Pool that keeps, since reset(True), the first call of each
    hook (map= and batch_map=) that succeeded (which hook, its key, a copy
    of its input, its result): the canary samples a Dask worker sends with
    its task's result while the trainer has not checked it yet."""

    def __init__(self, pool):
        self.pool = pool
        self._recording = False
        self._canaries = {}  # which -> canary
        self._first = {}     # which -> (task, copy of its input), not a canary yet

    def reset(self, recording):
        self._recording, self._canaries, self._first = recording, {}, {}

    def canaries(self):
        return list(self._canaries.values())

    def submit(self, task):
        if self._recording and task.which not in self._canaries:
            first = self._first.get(task.which)
            if first is None or first[0].error is not None:
                self._first[task.which] = (task, owned(task.arg))
        self.pool.submit(task)

    def step(self, timeout):
        finished = self.pool.step(timeout)
        for which, (task, arg) in list(self._first.items()):
            if task.done and task.error is None:
                self._canaries[which] = {"which": which, "key": task.key, "arg": arg,
                                         "out": task.result}
                del self._first[which]
        return finished

    def __getattr__(self, name):  # restarts, pids(), close() of the pool itself
        return getattr(self.pool, name)


def worker_outputs(spec, hooks, info, pool):
    """The Outputs of a Dask worker's task for the trainer's spec (None for
    plain (images, labels) batches), its hooks (unpickled, or None) in
    pool's hook processes (forked by the worker process's fork server)."""
    if spec["fields"] is None and hooks is None:
        return None
    fields = None if spec["fields"] is None else \
        _Fields(spec["fields"], spec["options"].get("num_classes", 0))
    hooked = None
    if hooks is not None:
        options = spec["options"]
        map_fn, decode = hooks.get("map"), None
        if isinstance(map_fn, DecodeFirst):  # transform=None: the hook process decodes
            map_fn, decode = map_fn.fn, (map_fn.field, map_fn.channels_last,
                                         map_fn.max_pixels)
        hooked = _hook_batches.make(map_fn, hooks.get("batch_map"),
                                    spec["hook_processes"], spec["hook_timeout"],
                                    options["seed"], options["rank"],
                                    options.get("on_error") == "skip", options["max_batches"],
                                    spec["map_shape"], decode, pool=pool)
        hooked.pool = RecordingPool(hooked.pool)
    dtype = getattr(torch, spec["options"].get("dtype", "uint8"))  # its name in the C options
    h, w = info["image_height"], info["image_width"]
    nchw = spec["options"].get("layout", "nchw") == "nchw"

    def images_of(buffer, n):
        shape = (n, 3, h, w) if nchw else (n, h, w, 3)
        return torch.frombuffer(buffer, dtype=dtype).view(shape)

    return Outputs(fields, hooked, images_of, own=True, raw_labels=spec["raw_labels"])


class Canary:
    """The trainer's side of the canary: its own hook processes (the
    loader's Pool, shared with the batches made here: no interpreter more
    to start on the trainer's cores) recompute a worker's canary sample
    from its input and key."""

    def __init__(self, pool):
        self._pool = pool

    def check(self, canaries):
        """'' when the trainer's hooks give the worker's bytes for each
        canary's input and key, else what differs."""
        if not isinstance(canaries, list) or not canaries:
            return "it sent no canary sample"
        for canary in canaries:
            why = self._check(canary) if isinstance(canary, dict) else "a canary is not a dict"
            if why:
                return why
        return ""

    def _check(self, canary):
        """check() of one canary."""
        task = Task(canary["which"], canary["key"], canary["arg"], None)
        if not self._pool.run_aside(task, CANARY_TIMEOUT_S):
            return f"the trainer's canary hook did not return within {CANARY_TIMEOUT_S:.0f} s"
        if task.error is not None:
            return ("the hook fails here on the worker's canary sample: "
                    f"{task.error[1] or task.error[2]}")
        if not same(task.result, canary["out"]):
            return (f"hook {canary['which']}= gives other bytes on the worker for the same "
                    f"input and rng key {canary['key']} (canary CRC-32 "
                    f"{digest(canary['out']):08x} there, {digest(task.result):08x} here)")
        return ""
