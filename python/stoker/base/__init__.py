# SPDX-License-Identifier: MIT
"""Helpers every layer above uses: shard URL lists (urls), keyed random
generators (rng), the rank and world size (ranks), the fields of a batch
(fields). Imports only stoker._ext.

Internal: stoker's public names are those of stoker/__init__.py."""
