# SPDX-License-Identifier: MIT
"""Arrays between the trainer and its hook processes through shared memory.

A value sent to or from a hook is packed: every tensor or numpy array in
it (at any depth of tuples, lists and dicts) is copied into an Arena, a
memfd mapped by both processes, and replaced by a small reference; the
rest is pickled with the control message. memfds rather than
multiprocessing.shared_memory: they have no name to leak when a process
is killed (-9) and no resource tracker to unregister them from; the
kernel frees one when its last descriptor closes.
"""
import mmap
import os

import numpy
import torch

_ALIGN = 64


class _Ref:
    """Where one array lies in an arena."""
    __slots__ = ("offset", "shape", "dtype", "is_torch")

    def __init__(self, offset, shape, dtype, is_torch):
        self.offset, self.shape, self.dtype, self.is_torch = offset, shape, dtype, is_torch

    def __getstate__(self):
        return (self.offset, self.shape, self.dtype, self.is_torch)

    def __setstate__(self, state):
        self.offset, self.shape, self.dtype, self.is_torch = state


class Arena:
    """A growable shared buffer: the side that writes creates it (and a
    larger one when a value does not fit) and hands its fd to the reader."""

    def __init__(self, fd=None, size=0):
        self.fd, self.size, self.map = None, 0, None
        if fd is not None:
            self._attach(fd, size)

    def _attach(self, fd, size):
        self.close()
        self.fd, self.size = fd, size
        self.map = mmap.mmap(fd, size)

    def ensure(self, nbytes):
        """Make room for nbytes; True when a new fd must be handed over."""
        if nbytes <= self.size:
            return False
        size = max(nbytes, 2 * self.size, 1 << 20)
        fd = os.memfd_create("stoker-hook")
        os.ftruncate(fd, size)
        self._attach(fd, size)
        return True

    def close(self):
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:
                pass  # a view still exists: the mapping goes with the last one
            os.close(self.fd)
        self.fd, self.size, self.map = None, 0, None


def _arrays(value, found):
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif isinstance(value, numpy.ndarray):
        found.append(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _arrays(v, found)
    elif isinstance(value, dict):
        for v in value.values():
            _arrays(v, found)
    return found


def packed_size(value):
    """Bytes that pack(value) needs in an arena."""
    return sum(_aligned(_nbytes(a)) for a in _arrays(value, []))


def _nbytes(a):
    return a.numel() * a.element_size() if isinstance(a, torch.Tensor) else a.nbytes


def _aligned(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def pack(value, arena, start=0):
    """(value with its arrays copied into arena from byte `start` on, the
    end of what it took); the arena must hold start + packed_size(value)."""
    offset = [start]

    def walk(v):
        if isinstance(v, (torch.Tensor, numpy.ndarray)):
            is_torch = isinstance(v, torch.Tensor)
            a = v.detach().cpu().numpy() if is_torch else v
            n = a.nbytes
            dst = numpy.ndarray(a.shape, a.dtype, arena.map, offset[0])
            dst[...] = a
            ref = _Ref(offset[0], a.shape, a.dtype.str, is_torch)
            offset[0] += _aligned(n)
            return ref
        if isinstance(v, tuple):
            return like(v, [walk(x) for x in v])
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    packed = walk(value)
    return packed, offset[0]


def like(value, items):
    """A tuple of items of value's kind: a namedtuple stays one (pickled
    by its class's name, which must then import where it is unpickled),
    any other tuple is a plain one."""
    return type(value)._make(items) if hasattr(value, "_fields") else tuple(items)


def unpack(value, arena, copy):
    """The value pack() made, its arrays views of arena (copy=False) or
    copies (copy=True: the arena may be overwritten afterwards)."""
    if isinstance(value, _Ref):
        a = numpy.ndarray(value.shape, numpy.dtype(value.dtype), arena.map, value.offset)
        if copy:
            a = a.copy()
        return torch.from_numpy(a) if value.is_torch else a
    if isinstance(value, tuple):
        return like(value, [unpack(x, arena, copy) for x in value])
    if isinstance(value, list):
        return [unpack(x, arena, copy) for x in value]
    if isinstance(value, dict):
        return {k: unpack(x, arena, copy) for k, x in value.items()}
    return value
