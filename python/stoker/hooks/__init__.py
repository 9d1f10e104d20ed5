# SPDX-License-Identifier: MIT
"""User hooks in processes of their own: the pool (pool), the fork server
that starts them (forkserver) and its client (processes), their loop
(worker), the shared-memory arena batches travel through (arena), batches
through them (batches), whole images for transform=None (decode), hook
code and environment fingerprints for remote workers (code, env), the
hooks' share of the report (report). Imports stoker.base and stoker._ext.

Internal: stoker's public names are those of stoker/__init__.py."""
