# SPDX-License-Identifier: MIT
"""The CPython extension (_stoker, built from the C files here): the C
library's API for the Python layers above it. Imports nothing of stoker's.

Internal: stoker's public names are those of stoker/__init__.py."""
