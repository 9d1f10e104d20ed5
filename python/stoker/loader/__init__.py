# SPDX-License-Identifier: MIT
"""The torch layer: Loader and verify (loader), Samples (samples) and what
they share: class names (classes), the index len() remembers (index),
metrics exports (metrics), pinned buffers (pinned), which options each
entry point uses (scope), the options' docstring (options_doc). Imports
every subpackage below it; none imports it.

Internal: stoker's public names are those of stoker/__init__.py."""
