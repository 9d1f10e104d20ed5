# SPDX-License-Identifier: MIT
"""Ranks: who this process is, its share of the node's cores, and equal
steps on every rank when the samples per rank are not known in advance."""
import os
import sys
import time

import torch

from .._ext._stoker import OptionError, resolve_rank

# Ranks on this node, as launchers say it (torchrun, Open MPI, Slurm).
_ENV_LOCAL_WORLD = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")


def distributed():
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized()


def _xla_rank_and_world():
    """PyTorch/XLA's rank and world when the training script has imported
    torch_xla's runtime, else None. Under xmp.spawn on Cloud TPU no
    launcher variable is set and torch.distributed need not be initialised:
    without this every TPU process read the whole data set as rank 0 of 1.
    Never imported here, so a process without torch_xla pays nothing."""
    runtime = sys.modules.get("torch_xla.runtime")
    if runtime is None:
        return None
    return int(runtime.global_ordinal()), int(runtime.world_size())


def rank_and_world(rank, world_size):
    """Explicit values, else torch.distributed when initialised, else
    PyTorch/XLA's runtime when imported, else the launcher's environment
    (torchrun, Slurm, Open MPI), else 0 of 1."""
    if rank is not None and world_size is not None:
        return int(rank), int(world_size)
    if (rank is None) != (world_size is None):
        raise OptionError("give both rank and world_size, or neither")
    if distributed():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    xla = _xla_rank_and_world()
    if xla is not None:
        return xla
    return resolve_rank(-1, -1)  # the launcher's variables, as the C loader reads them


def local_world_size():
    """Ranks sharing this node: 1 unless a launcher says otherwise."""
    for name in _ENV_LOCAL_WORLD:
        value = os.environ.get(name, "")
        # Slurm may write "8(x2)": 8 tasks per node on 2 nodes.
        digits = value.split("(")[0].split(",")[0]
        if digits.isdigit() and int(digits) > 0:
            return int(digits)
    return 1


def _read(path):
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return None


def cpu_quota(root="/sys/fs/cgroup"):
    """CPUs the cgroup quota allows (a container's CPU limit), or None: the
    affinity mask of a pod limited to 32 CPUs still lists all the host's."""
    v2 = _read(os.path.join(root, "cpu.max"))  # "QUOTA PERIOD" or "max PERIOD"
    v1 = [_read(os.path.join(root, "cpu", name)) for name in ("cpu.cfs_quota_us",
                                                              "cpu.cfs_period_us")]
    quota, period = v2 if v2 else (v1[0][0], v1[1][0]) if all(v1) else (None, None)
    if quota is None or quota in ("max", "-1"):
        return None
    return max(1, -(-int(quota) // int(period)))


def usable_cores(root="/sys/fs/cgroup"):
    """The cores this process may run on: its affinity mask, capped by the
    cgroup CPU quota. The trainer's default threads and a Dask worker's
    both start from it."""
    cores = len(os.sched_getaffinity(0))
    quota = cpu_quota(root)
    return cores if quota is None else min(cores, quota)


def default_threads(root="/sys/fs/cgroup"):
    """This rank's fair share of the cores it may run on: a node with 8
    ranks does not start 8 x cores decode threads, nor a container limited
    to 2 CPUs 64."""
    return max(1, usable_cores(root) // local_world_size())


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
