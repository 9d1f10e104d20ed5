# SPDX-License-Identifier: MIT
"""Hooks for test_hook_data.py: module-level, so hook processes import
them by name. They return arrays of every dtype, the ones that cross to
the trainer and the ones that cannot."""
import numpy
import torch

# Arrays of numbers: each crosses and arrives with its values (big-endian
# ones in the machine's byte order).
NUMBERS = {
    "bool": lambda: numpy.array([True, False, True]),
    "int8": lambda: numpy.array([-128, 0, 127], dtype=numpy.int8),
    "int16": lambda: numpy.array([-32768, 1, 32767], dtype=numpy.int16),
    "int32": lambda: numpy.array([-2**31, 2, 2**31 - 1], dtype=numpy.int32),
    "int64": lambda: numpy.array([-2**63, 3, 2**63 - 1], dtype=numpy.int64),
    "uint8": lambda: numpy.array([0, 1, 255], dtype=numpy.uint8),
    "uint16": lambda: numpy.array([0, 1, 65535], dtype=numpy.uint16),
    "uint32": lambda: numpy.array([0, 1, 2**32 - 1], dtype=numpy.uint32),
    "float16": lambda: numpy.array([-1.5, 0, 65504], dtype=numpy.float16),
    "float32": lambda: numpy.array([-1.5, 1e-30, 3e38], dtype=numpy.float32),
    "float64": lambda: numpy.array([-1.5, 1e-300, 1e300], dtype=numpy.float64),
    "complex64": lambda: numpy.array([1 + 2j, -3j, 0], dtype=numpy.complex64),
    "complex128": lambda: numpy.array([1 + 2j, -3j, 1e300], dtype=numpy.complex128),
    "int32 big-endian": lambda: numpy.array([-2**31, 2, 2**31 - 1], dtype=">i4"),
    "float64 big-endian": lambda: numpy.array([-1.5, 1e-300, 1e300], dtype=">f8"),
    "bfloat16 tensor": lambda: torch.tensor([-1.5, 0.0, 3e38], dtype=torch.bfloat16),
}
# Numbers that cross, but make no batch tensor: torch has no uint64.
UINT64 = lambda: numpy.array([0, 1, 2**64 - 1], dtype=numpy.uint64)  # noqa: E731

# What cannot cross: kind -> (array, what the refusal says).
REFUSED = {
    "object": (lambda: numpy.array([1, "a", None], dtype=object), "pointers into the memory"),
    "structured": (lambda: numpy.zeros(3, dtype=[("a", "<i4"), ("b", "<f4")]),
                   "structured .or void. array would arrive as raw bytes"),
    "void": (lambda: numpy.zeros(3, dtype="V4"), "structured .or void. array"),
    "datetime": (lambda: numpy.array(["2026-01-01"], dtype="datetime64[D]"),
                 r"astype\('int64'\)"),
    "timedelta": (lambda: numpy.array([5], dtype="timedelta64[s]"), r"astype\('int64'\)"),
    "str": (lambda: numpy.array(["ab", "c"]), "return a list of str"),
    "bytes": (lambda: numpy.array([b"ab", b"c"]), "return a list of bytes"),
    "complex32 tensor": (lambda: torch.zeros(3, dtype=torch.complex32),
                         "tensor of dtype torch.complex32"),
}


def numbers(sample, rng):
    """map=: every array of numbers, the first value the sample's own."""
    first = int(sample[0, 0, 0]) % 2
    out = {name: make() for name, make in NUMBERS.items()}
    out["uint8"][0] = first
    return out


def numbers_of_batch(batch, rng):
    """batch_map=: every array of numbers, uint64 too (arrays stay numpy)."""
    out = {name: make() for name, make in NUMBERS.items()}
    out["uint64"] = UINT64()
    return out


def make(name, rng):
    """For a Pool: the array named by the task's argument."""
    return REFUSED[name][0]() if name in REFUSED else NUMBERS[name]()


def object_array(sample, rng):
    return {"image": sample, "tags": numpy.array(["cat", 3], dtype=object)}


def structured_batch(batch, rng):
    return numpy.zeros(len(batch[1]), dtype=[("a", "<i4"), ("b", "<f4")])


def uint64_labels(sample, rng):
    return UINT64()


def as_is(sample, rng):
    return sample


def to_bfloat16(sample, rng):
    return sample.to(torch.bfloat16) / 255


def halve(batch, rng):
    images, labels = batch
    return images / 2, labels


def mib_and_a_half(sample, rng):
    """1.5 MiB of float32 whatever the sample: a batch of 32 is 48 MiB."""
    return torch.full((3, 512, 256), float(sample[0, 0, 0]), dtype=torch.float32)
