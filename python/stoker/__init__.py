# SPDX-License-Identifier: MIT
"""stoker: WebDataset tar shards to PyTorch batches, decoded in C.

Three lines in a training script::

    loader = stoker.Loader("/data/train-{000000..001023}.tar", batch_size=256,
                           transform="train", samples_per_rank=1_281_167 // world)
    for images, labels in loader:          # uint8 NCHW tensors, zero copy
        ...

`Loader` yields (images, labels) torch tensors that share memory with the
C loader's batch buffers: a buffer goes back to the loader only when no
tensor uses it any more, so holding a batch is always safe. `Samples`
yields raw samples as dicts for any modality and splits shards across
DataLoader workers by itself.
"""
from ._ext._stoker import (BusyError, CacheError, DataError, Error, HTTPError, Interrupted, NotFound,
                      OptionError, OptionTypeError, OutOfMemory, OutputExists, PlanError,
                      ReadError, ShardWriter, version)
from .cluster.trainer import ClusterError
from .loader.elastic import merge_states
from .hooks.pool import HookError
from .loader.loader import Loader, log, verify  # log: the "stoker" logger, as before
from .loader.metrics import prometheus_text, rates, tensorboard
from .loader.samples import Samples

__all__ = ["Loader", "Samples", "ShardWriter", "verify", "Error", "DataError", "PlanError",
           "BusyError", "ClusterError", "HookError", "OptionError", "OptionTypeError", "NotFound",
           "ReadError", "CacheError", "HTTPError", "OutOfMemory", "Interrupted", "OutputExists", "version",
           "rates", "tensorboard", "prometheus_text", "merge_states"]

# Named as the package's own, as before the split: help(), reprs and pickles
# of a Samples say stoker.Samples.
for _public in (Loader, Samples, verify, merge_states):
    _public.__module__ = __name__
del _public
