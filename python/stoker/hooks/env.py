# SPDX-License-Identifier: MIT
"""The environment fingerprint of a process that runs user hooks.

The same hook can give other bytes under another torch, torchvision or
numpy, or on a CPU where torch dispatches to other kernels (torchvision
issue 9122, pytorch issue 155552). A process whose fingerprint differs
from the trainer's must not make batches for it; compare() says what
differs, for the message that refuses it. Kept apart from the stoker
version check of the Dask workers (cluster.worker) so that both can be
extended separately: a worker's whole identity is that check's fields plus
fingerprint(hooks_digest) and the digests of the hooks' module files
(code).
"""
import importlib
import platform
import re

from .._ext._stoker import version as _stoker_version

_LIBRARIES = ("torch", "torchvision", "numpy", "PIL", "cv2", "albumentations")


def _cpu_capability(torch):
    backends_cpu = getattr(torch.backends, "cpu", None)
    if backends_cpu is not None and hasattr(backends_cpu, "get_cpu_capability"):
        return backends_cpu.get_cpu_capability()
    # torch < 2.0: only the build report says which kernels it dispatches to
    match = re.search(r"CPU capability usage: (\S+)", torch.__config__.show())
    return match.group(1) if match else "unknown"


def fingerprint(hooks_digest):
    """A dict of what decides a hook's bytes besides its input and key."""
    import torch
    out = {"stoker": _stoker_version, "python": platform.python_version(),
           "hooks": hooks_digest, "cpu_capability": _cpu_capability(torch)}
    for name in _LIBRARIES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            out[name] = None  # absent on both sides is a match
            continue
        out[name] = getattr(module, "__version__", "unknown")
    return out


def compare(trainer, worker):
    """'' when they match, else one clause per difference, e.g.
    "torch 2.1.0 here, 1.13.1 on the worker"."""
    diffs = []
    for key in sorted(set(trainer) | set(worker)):
        mine, theirs = trainer.get(key), worker.get(key)
        if mine != theirs:
            diffs.append(f"{key} {_shown(mine)} on the trainer, {_shown(theirs)} on the worker")
    return "; ".join(diffs)


def _shown(value):
    return "absent" if value is None else str(value)
