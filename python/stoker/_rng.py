"""Keys of the random streams that user hooks get (Loader(map=, batch_map=)).

A key depends on the sample's identity only (seed, epoch, rank, its place
in the epoch, its shard URL and key), never on which process or thread
runs the hook, so a keyed hook gives the same bytes with any number of
hook processes or decode threads, after a resume and on any host.
"""
import hashlib
import random
from typing import NamedTuple

import numpy
import torch

_KEY_BITS = 63  # torch.Generator.manual_seed takes up to 2**64 - 1; keep it signed-safe


def sample_key(seed, epoch, rank, batch_index, position, url, key):
    """The key of the sample at `position` of batch `batch_index`."""
    return _digest(("sample", seed, epoch, rank, batch_index, position, url, key))


def batch_key(seed, epoch, rank, batch_index):
    """The key of batch `batch_index` (for batch hooks)."""
    return _digest(("batch", seed, epoch, rank, batch_index))


def _digest(identity):
    # A hash of the identity's repr: stable across processes and hosts
    # (Python's hash() of a str is salted per process).
    raw = hashlib.blake2b(repr(identity).encode(), digest_size=8).digest()
    return int.from_bytes(raw, "little") & ((1 << _KEY_BITS) - 1)


class Rng(NamedTuple):
    """What a hook gets as `rng`: its key, a seeded torch.Generator and a
    seeded numpy.random.Generator (Philox)."""
    key: int
    torch: torch.Generator
    numpy: numpy.random.Generator


def seeded(key):
    """Rng for `key`, after re-seeding the global torch, numpy and random
    generators from it: transforms that draw from the global generators
    (torchvision's classic transforms use torch's) become keyed too."""
    torch.manual_seed(key)
    numpy.random.seed([key & 0xFFFFFFFF, key >> 32])
    random.seed(key)
    generator = torch.Generator()
    generator.manual_seed(key)
    return Rng(key, generator, numpy.random.Generator(numpy.random.Philox(key)))
