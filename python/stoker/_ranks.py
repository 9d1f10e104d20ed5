"""Ranks: who this process is, its share of the node's cores, and equal
steps on every rank when the samples per rank are not known in advance."""
import os
import time

import torch

from ._stoker import OptionError

_ENV_RANKS = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"),
              ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))
# Ranks on this node, as launchers say it (torchrun, Open MPI, Slurm).
_ENV_LOCAL_WORLD = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")


def distributed():
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized()


def rank_and_world(rank, world_size):
    """Explicit values, else torch.distributed when initialised, else the
    launcher's environment (torchrun, Slurm, Open MPI), else 0 of 1."""
    if rank is not None and world_size is not None:
        return int(rank), int(world_size)
    if (rank is None) != (world_size is None):
        raise OptionError("give both rank and world_size, or neither")
    if distributed():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    for r, w in _ENV_RANKS:
        if r in os.environ and w in os.environ:
            return int(os.environ[r]), int(os.environ[w])
    return 0, 1


def local_world_size():
    """Ranks sharing this node: 1 unless a launcher says otherwise."""
    for name in _ENV_LOCAL_WORLD:
        value = os.environ.get(name, "")
        # Slurm may write "8(x2)": 8 tasks per node on 2 nodes.
        digits = value.split("(")[0].split(",")[0]
        if digits.isdigit() and int(digits) > 0:
            return int(digits)
    return 1


def default_threads():
    """This rank's fair share of the cores it may run on: a node with 8
    ranks does not start 8 x cores decode threads."""
    return max(1, len(os.sched_getaffinity(0)) // local_world_size())


class StepAgreement:
    """Equal steps on every rank without counting samples first. Before each
    batch the ranks agree, with one all_reduce (MIN) of one int over gloo,
    whether every rank still has one; the first rank to run out ends the
    epoch for all, so DDP never waits on a rank that has nothing left (the
    batches the other ranks had left are not used this epoch). Made by
    every rank in the same order, as DDP needs anyway: with a backend other
    than gloo (NCCL) it creates a gloo group for the flag, which stays on
    the CPU."""

    def __init__(self):
        dist = torch.distributed
        self._group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        self._flag = torch.zeros(1, dtype=torch.int32)
        self.ns = 0     # time spent agreeing
        self.steps = 0  # agreements made

    def __call__(self, have_batch):
        start = time.perf_counter_ns()
        self._flag[0] = int(have_batch)
        torch.distributed.all_reduce(self._flag, op=torch.distributed.ReduceOp.MIN,
                                     group=self._group)
        self.ns += time.perf_counter_ns() - start
        self.steps += 1
        return bool(self._flag[0])
