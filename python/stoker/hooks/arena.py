# SPDX-License-Identifier: MIT
"""Arrays between the trainer and its hook processes through shared memory.

A value sent to or from a hook is packed: every tensor or numpy array in
it (at any depth of tuples, lists and dicts) is copied into an Arena, a
memfd mapped by both processes, and replaced by a small reference; the
rest is pickled with the control message. memfds rather than
multiprocessing.shared_memory: they have no name to leak when a process
is killed (-9) and no resource tracker to unregister them from; the
kernel frees one when its last descriptor closes.

Only numbers cross: arrays of bool, int, uint, float or complex (in the
byte order of the machine; a big-endian one is converted). An object
array holds pointers into the memory of the process that made it, a
structured one would arrive as raw bytes, datetime and text arrays carry
meaning the bytes alone do not: pack() refuses them, naming where in the
value they are. torch.bfloat16, which numpy lacks, crosses as its 16 bits
and is viewed as bfloat16 again on the other side.
"""
import itertools
import mmap
import os

import numpy
import torch

_ALIGN = 64
_NUMBERS = "biufc"  # numpy dtype kinds that are plain numbers
_BFLOAT16 = "bfloat16"  # _Ref.dtype of a torch.bfloat16 tensor (its bits as int16)
_REFUSED = {  # dtype kind -> why it cannot cross, and what to send instead
    "O": "an object array holds pointers into the memory of the process that made it; "
         "return a tensor or an array of numbers (or a list: Python values cross pickled)",
    "V": "a structured (or void) array would arrive as raw bytes; return each field as an "
         "array of its own (a dict of arrays)",
    "M": "its time unit is not a number torch keeps; convert it, e.g. .astype('int64')",
    "m": "its time unit is not a number torch keeps; convert it, e.g. .astype('int64')",
    "U": "return a list of str instead (Python values cross pickled)",
    "S": "return a list of bytes instead (Python values cross pickled)",
}


class _Ref:
    """Where one array lies in an arena, or (in_slot) in its row of the
    batch slot the result was written to (see Slot)."""
    __slots__ = ("offset", "shape", "dtype", "is_torch", "in_slot")

    def __init__(self, offset, shape, dtype, is_torch, in_slot=False):
        self.offset, self.shape, self.dtype, self.is_torch = offset, shape, dtype, is_torch
        self.in_slot = in_slot

    def __getstate__(self):
        return (self.offset, self.shape, self.dtype, self.is_torch, self.in_slot)

    def __setstate__(self, state):
        self.offset, self.shape, self.dtype, self.is_torch, self.in_slot = state


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

    def close_fd(self):
        """Close the fd only: the mapping stays while anything refers to
        it (numpy views of an mmap hold no buffer export, so close() would
        unmap memory they still point at)."""
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None

    def close(self):
        """Unmap and close. Only for an arena nothing reads any more: numpy
        views of the map hold no buffer export, so close() unmaps memory
        they would still point at (close_fd() is for arenas whose views
        outlive the handle)."""
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:
                pass  # a memoryview still exports it: the mapping goes with the last one
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


def packed_size(value, dest=None):
    """Bytes that pack(value, dest=dest) needs in an arena."""
    return sum(_aligned(_nbytes(a)) for k, a in enumerate(_arrays(value, []))
               if _place(dest, k, a) is None)


def _place(dest, k, a):
    """The offset in the slot where the k-th array a of a result goes
    (dest: a Slot's row_dest), or None when it is not laid out there."""
    if dest is None or k >= len(dest[1]):
        return None
    offset, shape, dtype, is_torch = dest[1][k]
    if isinstance(a, torch.Tensor):
        if not is_torch or a.dtype == torch.bfloat16 or tuple(a.shape) != shape:
            return None  # bfloat16 and the odd ones take the general path
        try:
            kind = numpy.dtype(str(a.dtype).replace("torch.", "")).str
        except TypeError:
            return None
    elif isinstance(a, numpy.ndarray):
        if is_torch or a.shape != shape:
            return None
        kind = a.dtype.str
    else:
        return None
    return offset if kind == dtype else None


def _nbytes(a):
    return a.numel() * a.element_size() if isinstance(a, torch.Tensor) else a.nbytes


def _aligned(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _numbers(v, where):
    """(v as a numpy array of numbers in native byte order, its _Ref
    dtype); TypeError naming `where` for what cannot cross."""
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu()
        if v.dtype == torch.bfloat16:
            return v.view(torch.int16).numpy(), _BFLOAT16
        try:
            v = v.numpy()
        except (TypeError, RuntimeError) as e:
            raise TypeError(f"{where} is a tensor of dtype {v.dtype}, which cannot cross between "
                            f"the trainer and its hook processes: {e}") from e
    kind = v.dtype.kind
    if kind not in _NUMBERS:
        raise TypeError(f"{where} is a numpy array of dtype {v.dtype}, which cannot cross between "
                        f"the trainer and its hook processes: {_REFUSED.get(kind, 'not a number')}")
    if not v.dtype.isnative:
        v = v.astype(v.dtype.newbyteorder("="))
    return v, v.dtype.str


def pack(value, arena, start=0, name="the value", dest=None, slot=None):
    """(value with its arrays copied into arena from byte `start` on, the
    end of what it took); the arena must hold start + packed_size(value,
    dest). name: what value is, for the TypeError of an array that cannot
    cross. dest, slot: a Slot's row_dest and the Arena mapping that slot:
    each array laid out there goes straight into its row of the batch
    instead."""
    offset = [start]
    k = [0]

    def walk(v, where):
        if isinstance(v, (torch.Tensor, numpy.ndarray)):
            at = _place(dest, k[0], v)
            k[0] += 1
            a, dtype = _numbers(v, where)
            in_slot = at is not None
            if not in_slot:
                at = offset[0]
                offset[0] += _aligned(a.nbytes)
            dst = numpy.ndarray(a.shape, a.dtype, (slot if in_slot else arena).map, at)
            dst[...] = a
            return _Ref(at, a.shape, dtype, isinstance(v, torch.Tensor), in_slot)
        if isinstance(v, tuple):
            return like(v, [walk(x, f"{where}[{i}]") for i, x in enumerate(v)])
        if isinstance(v, list):
            return [walk(x, f"{where}[{i}]") for i, x in enumerate(v)]
        if isinstance(v, dict):
            return {k: walk(x, f"{where}[{k!r}]") for k, x in v.items()}
        return v

    packed = walk(value, name)
    return packed, offset[0]


def like(value, items):
    """A tuple of items of value's kind: a namedtuple stays one (pickled
    by its class's name, which must then import where it is unpickled),
    any other tuple is a plain one."""
    return type(value)._make(items) if hasattr(value, "_fields") else tuple(items)


def _as_sent(a, ref):
    """The numpy array a (of ref's bits) as the side that packed it had it."""
    if ref.dtype == _BFLOAT16:
        return torch.from_numpy(a).view(torch.bfloat16)
    return torch.from_numpy(a) if ref.is_torch else a


def _numpy_dtype(ref):
    return numpy.dtype(numpy.int16 if ref.dtype == _BFLOAT16 else ref.dtype)


def unpack(value, arena, copy):
    """The value pack() made, its arrays views of arena (copy=False) or
    copies (copy=True: the arena may be overwritten afterwards)."""
    if isinstance(value, _Ref):
        a = numpy.ndarray(value.shape, _numpy_dtype(value), arena.map, value.offset)
        return _as_sent(a.copy() if copy else a, value)
    if isinstance(value, tuple):
        return like(value, [unpack(x, arena, copy) for x in value])
    if isinstance(value, list):
        return [unpack(x, arena, copy) for x in value]
    if isinstance(value, dict):
        return {k: unpack(x, arena, copy) for k, x in value.items()}
    return value


# A batch built in place: the results of a batch's samples are copied out
# of the arenas straight into its rows, not each into memory of its own
# and then all stacked into a batch (two copies, both alive at once). Once
# the first result has shown the layout, each batch is a Slot instead: a
# memfd laid out as the batch, which the hook processes write each result
# into, row by row, and whose rows the trainer's batch is a view of (no
# copy in the trainer, no result in an arena); the kernel frees it when the
# last view of the user's batch and the last process's mapping go.


class Rows:
    """The n rows of one array of a batch, shaped and typed as a sample's."""
    __slots__ = ("bits", "ref")

    def __init__(self, ref, bits):
        self.ref, self.bits = ref, bits

    def batch(self):
        """The batch's array: every row, as the hook returned each."""
        return _as_sent(self.bits, self.ref)


class Slot:
    """A batch of n results laid out as template's (a result as pack()
    made it): .rows, the same structure with a Rows over shared memory for
    each array, None for each other value;
    .arena, the Arena to hand to the hook processes (close_fd() once they
    have written every row: the rows keep the memory mapped)."""

    def __init__(self, template, n):
        layout = []  # (Ref, offset of its first row) per array, in pack()'s order
        size = [0]

        def walk(v):
            if isinstance(v, _Ref):
                layout.append((v, size[0]))
                size[0] += _aligned(n * _numpy_dtype(v).itemsize * int(numpy.prod(v.shape)))
            elif isinstance(v, (tuple, list)):
                for x in v:
                    walk(x)
            elif isinstance(v, dict):
                for x in v.values():
                    walk(x)

        walk(template)
        self.arena = Arena()
        if layout:
            self.arena.ensure(size[0])
        self.key = next(_slot_keys)  # names it to the hook processes (fd numbers are reused)
        self.layout = layout
        self.n = n
        it = iter(layout)
        self.rows = _map_rows(template, lambda ref: _slot_rows(self.arena, next(it), n))

    def row_dest(self, i):
        """What the hook process needs to write row i: (the slot's key,
        (offset, shape, numpy dtype str, is_torch) per array)."""
        return (self.key, [(start + i * _numpy_dtype(ref).itemsize *
                                 int(numpy.prod(ref.shape)), tuple(ref.shape), ref.dtype,
                                 ref.is_torch) for ref, start in self.layout])


_slot_keys = itertools.count()


def _slot_rows(arena, placed, n):
    ref, start = placed
    return Rows(ref, numpy.ndarray((n,) + tuple(ref.shape), _numpy_dtype(ref), arena.map, start))


def _map_rows(value, make):
    if isinstance(value, _Ref):
        return make(value)
    if isinstance(value, tuple):
        return like(value, [_map_rows(x, make) for x in value])
    if isinstance(value, list):
        return [_map_rows(x, make) for x in value]
    if isinstance(value, dict):
        return {k: _map_rows(x, make) for k, x in value.items()}
    return None


def unpack_into(value, arena, rows, i, slot=None):
    """unpack(value, arena, copy=True) with each array copied into row i of
    the matching Rows of rows (a Slot's) and a view of it; an array
    whose place, shape or dtype rows do not have gets memory of its own
    (the caller names the sample that differs). slot: the Arena of the
    Slot whose row i the hook process wrote arrays into (in_slot), which
    are views of it already."""
    if isinstance(value, _Ref):
        if value.in_slot:
            if isinstance(rows, Rows) and (rows.ref.shape, rows.ref.dtype) == \
                    (value.shape, value.dtype):
                return _as_sent(rows.bits[i, ...], value)
            return unpack(value, slot, copy=True)  # in another row's place: the caller names it
        if not isinstance(rows, Rows) or (rows.ref.shape, rows.ref.dtype, rows.ref.is_torch) != \
                (value.shape, value.dtype, value.is_torch):
            return unpack(value, arena, copy=True)
        row = rows.bits[i, ...]  # a view also of a 0-d array's row, not a scalar
        row[...] = numpy.ndarray(value.shape, row.dtype, arena.map, value.offset)
        return _as_sent(row, value)
    if isinstance(value, (tuple, list)):
        same = type(rows) is type(value) and len(rows) == len(value)
        items = [unpack_into(x, arena, rows[j] if same else None, i, slot)
                 for j, x in enumerate(value)]
        return like(value, items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        inner = rows if isinstance(rows, dict) else {}
        return {k: unpack_into(x, arena, inner.get(k), i, slot) for k, x in value.items()}
    return value
