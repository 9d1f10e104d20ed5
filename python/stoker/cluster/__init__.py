# SPDX-License-Identifier: MIT
"""The Dask offload: the trainer side (trainer), its claim policy (claims),
the task in Dask workers (worker), hooks on workers (hooks). Imports
stoker.hooks, stoker.base and stoker._ext.

Internal: stoker's public names are those of stoker/__init__.py."""
