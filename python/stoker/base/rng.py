# SPDX-License-Identifier: MIT
"""Keys of the random streams that user hooks get (Loader(map=, batch_map=)).

A sample hook's key is the one stoker's own crop, flip and augmentations
draw from: the C batch carries it (stk_batch.sample_keys), a hash of the
sample's identity (seed, epoch, shard, pass, position among the shard's
good samples). A batch hook's key is a hash of (seed, epoch, rank, batch
index). Neither depends on which process or thread runs the hook, so a
keyed hook gives the same bytes with any number of hook processes or
decode threads, after a resume and on any host.
"""
import hashlib
import random

import numpy
import torch

def batch_key(seed, epoch, rank, batch_index):
    """The key of batch `batch_index` (for batch hooks)."""
    return _digest(("batch", seed, epoch, rank, batch_index))


def _digest(identity):
    # A hash of the identity's repr: stable across processes and hosts
    # (Python's hash() of a str is salted per process); 64 bits, as the C
    # keys, which is what torch.Generator.manual_seed takes.
    raw = hashlib.blake2b(repr(identity).encode(), digest_size=8).digest()
    return int.from_bytes(raw, "little")


class Rng:
    """What a hook gets as `rng`: its key, a seeded torch.Generator and a
    seeded numpy.random.Generator (Philox), the latter made on first use
    (20 us a sample that most hooks do not need)."""
    __slots__ = ("key", "torch", "_numpy")

    def __init__(self, key, generator):
        self.key, self.torch, self._numpy = key, generator, None

    @property
    def numpy(self):
        if self._numpy is None:
            self._numpy = numpy.random.Generator(numpy.random.Philox(self.key))
        return self._numpy


def seeded(key):
    """Rng for `key`, after re-seeding the global torch, numpy and random
    generators from it: transforms that draw from the global generators
    (torchvision's classic transforms use torch's) become keyed too."""
    # torch.manual_seed() as it applies here, at a tenth of its cost per
    # sample: the CPU generator, and CUDA's only where the hook uses CUDA.
    torch.default_generator.manual_seed(key)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(key)
    numpy.random.seed([key & 0xFFFFFFFF, key >> 32])
    random.seed(key)
    generator = torch.Generator()
    generator.manual_seed(key)
    return Rng(key, generator)
