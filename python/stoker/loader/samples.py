# SPDX-License-Identifier: MIT
"""stoker.Samples: raw samples as dicts, split across DataLoader workers,
with the epoch agreed between the process and its workers."""
import hashlib
import logging
import multiprocessing
import multiprocessing.sharedctypes

import torch

from .._ext._stoker import DataError, PlanError
from .._ext._stoker import Loader as _CLoader
from ..base.ranks import rank_and_world as _rank_and_world
from ..base.urls import _as_list
from .classes import find_classes
from . import scope as _scope

log = logging.getLogger("stoker")


class _Epochs:
    """Which epoch each iteration of a Samples uses, agreed between the
    process that made it and the DataLoader workers that iterate copies of
    it (a copy made per epoch, or one kept for good with
    persistent_workers=True).

    The words live in shared memory made in the parent, which fork
    inherits and spawn/forkserver workers receive with the dataset. Word 0
    is the epoch of the first iteration after set_epoch() (0 at first);
    the other words remember the latest iterations as (iteration id << 32 |
    iteration number since set_epoch + 1). All workers of one DataLoader
    iteration compute the same id, so the first one to start takes the
    next number and the others find it; two workers taking it at once both
    write the same word. Each word is written with one aligned 8-byte
    store, so no lock is needed (a SemLock made for fork cannot be handed
    to a spawned worker)."""

    SLOTS = 16
    LOW = 0xFFFFFFFF

    def __init__(self, values=None):
        self.words = multiprocessing.sharedctypes.RawArray("Q", 1 + self.SLOTS)
        if values is not None:
            self.words[:] = values

    def __reduce__(self):
        if multiprocessing.context.get_spawning_popen() is not None:
            return _Epochs._shared, (self.words,)  # to a worker: the same memory
        return _Epochs, (list(self.words),)  # a plain copy (pickle, deepcopy): its own

    @classmethod
    def _shared(cls, words):
        self = cls.__new__(cls)
        self.words = words
        return self

    def set(self, epoch):
        self.words[0] = epoch
        for i in range(1, 1 + self.SLOTS):
            self.words[i] = 0

    def take(self, ident):
        """The epoch of a new iteration. ident (1 .. 2**32 - 1) names a
        DataLoader iteration, the same in all of its workers; 0 is an
        iteration in this process, always a new one."""
        slots = self.words[1:]
        for word in slots if ident else ():
            if word >> 32 == ident:
                return self.words[0] + (word & self.LOW) - 1
        number = max(word & self.LOW for word in slots)  # the latest one's + 1
        self.words[1 + number % self.SLOTS] = ident << 32 | (number + 1)
        return self.words[0] + number


def _iteration_id(info, iterations):
    """The same 32-bit id in every worker of one DataLoader iteration: the
    iteration's base seed (drawn anew for each iteration) and how many times
    this worker's copy has been iterated (grows with persistent workers,
    whose seed stays)."""
    text = f"{info.seed - info.id}:{iterations}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "little") or 1


class Samples(torch.utils.data.IterableDataset):
    """Raw samples as dicts: "__key__", "__url__" and one bytes value per
    member extension, in WebDataset's layout. decode_cls=True gives the
    "cls" member as an int (a member that is not a decimal integer is a bad
    sample: stoker.DataError, or left out and logged under
    on_error="skip").

    Inside a torch DataLoader with num_workers > 0 each worker reads its own
    share of this rank's shards (no sample twice), so there must be at
    least world_size x num_workers shards; with shuffle=False the order
    within a worker is storage order. samples_per_rank counts the samples
    of the rank, whatever num_workers is: each worker yields a part in
    proportion to its number of shards (and cycles through its shards
    again if they hold fewer), so with shards of equal size no sample
    repeats while the rank's shards hold enough.

    classes: the class names, as for stoker.Loader (the classes attribute).

    Each new iteration of the object is a new epoch (0, 1, 2, ...: a new
    shuffle), whether it is iterated here or by DataLoader workers,
    persistent or not. set_epoch(e) makes the next iteration epoch e (the
    following ones e + 1, ...); it reaches persistent workers too. Workers
    of one DataLoader iteration recognise each other by the iteration's
    base seed, so a DataLoader whose generator is re-seeded with the same
    seed before every epoch repeats the epoch unless set_epoch() is called.
    """

    def __init__(self, urls, shuffle=True, seed=0, rank=None, world_size=None, threads=1,
                 samples_per_rank=None, decode_cls=False, classes=None, **options):
        super().__init__()
        _scope.refuse("Samples", options, _scope.SAMPLES_REFUSES, _scope.SAMPLES_WHY)
        self._urls = _as_list(urls)
        self.classes = find_classes(self._urls, classes)  # as for stoker.Loader
        self._rank, self._world = _rank_and_world(rank, world_size)
        self._options = dict(options, shuffle=int(bool(shuffle)), seed=seed, threads=threads)
        self._per_rank = samples_per_rank or 0
        self._decode_cls = decode_cls
        self._epochs = _Epochs()
        self._iterations = 0  # of this copy
        # Checks the URLs and options now (a missing local shard, too few
        # shards for the ranks) and counts the shards for the worker split.
        probe = _CLoader(self._urls, rank=self._rank, world_size=self._world, batch_size=64,
                         **self._options)
        self._num_shards = probe.info()["num_shards"]
        probe.close()

    def set_epoch(self, epoch):
        """The next iteration (here or in DataLoader workers) is epoch `epoch`."""
        epoch = int(epoch)
        if not 0 <= epoch < 2**63:
            raise ValueError(f"epoch must be between 0 and 2**63 - 1, not {epoch}")
        self._epochs.set(epoch)

    def __iter__(self):
        # Not a generator: the epoch is taken when the DataLoader (or a for
        # loop) asks for the iterator, which every worker does once per epoch.
        self._iterations += 1
        info = torch.utils.data.get_worker_info()
        ident = 0 if info is None else _iteration_id(info, self._iterations)
        return self._samples(self._epochs.take(ident), info)

    def _samples(self, epoch, info):
        rank, world, per_rank = self._rank, self._world, self._per_rank
        if info is not None:
            workers = info.num_workers
            self._check_workers(workers)
            if per_rank:
                per_rank = self._worker_share(workers, info.id)
                if per_rank == 0:
                    return
            # Worker w takes every workers-th shard of the rank's own list (the
            # plan deals shard i * world + rank to the rank), so a rank reads the
            # same shards whatever num_workers is.
            rank, world = info.id * self._world + rank, world * workers
        # Created here, in the process that iterates: a C loader and its
        # threads do not survive a fork.
        c = _CLoader(self._urls, rank=rank, world_size=world, epoch=epoch, batch_size=64,
                     samples_per_rank=per_rank, **self._options)
        try:
            while True:
                batch = c.next()
                if batch is None:
                    break
                samples = batch.samples()
                if self._decode_cls:
                    samples = self._cls_as_int(samples)
                yield from samples
        finally:
            c.close()

    def _check_workers(self, workers):
        """Each worker reads whole shards of its own, as a rank does."""
        shards, ranks = self._num_shards, self._world
        if shards >= ranks * workers:
            return
        over = (f"{workers} DataLoader workers" if ranks == 1 else
                f"{ranks} ranks x {workers} DataLoader workers")
        raise PlanError(
            f"{shards} shard(s) cannot be split over {over}: each worker reads whole shards of "
            f"its own. Use num_workers={shards // ranks} or fewer in the DataLoader, or split "
            "the data into more shards (`stoker reshard`)")

    def _worker_share(self, workers, worker):
        """This worker's part of samples_per_rank: the rank's count split in
        proportion to the workers' numbers of shards (exact sum, the same in
        every worker), so that with shards of equal size no worker runs out
        of samples before the rank does."""
        shards, world = self._num_shards, self._world * workers
        counts = [shards // world + (w * self._world + self._rank < shards % world)
                  for w in range(workers)]
        total = sum(counts)
        before = sum(counts[:worker])
        return (self._per_rank * (before + counts[worker]) // total -
                self._per_rank * before // total)

    def _cls_as_int(self, samples):
        for d in samples:
            if "cls" in d:
                try:
                    d["cls"] = int(d["cls"])
                except ValueError:
                    message = (f"{d['__url__']}: sample '{d['__key__']}': its cls member "
                               f"{d['cls'][:40]!r} is not a decimal integer (decode_cls=True)")
                    if self._options.get("on_error", "fail") != "skip":
                        raise DataError(message) from None
                    log.warning("skipped: %s", message)
                    continue
            yield d
