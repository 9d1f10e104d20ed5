# SPDX-License-Identifier: MIT
"""Class names, as torchvision datasets give them (dataset.classes): one
per line in label order, in the classes.txt that `stoker pack --classes
DIR/classes.txt` writes beside the shards, or from the caller."""
import os

from .._ext._stoker import OptionError
from ..base.urls import _has_scheme

SIDECAR = "classes.txt"


def _read(path):
    with open(path, encoding="utf-8") as f:
        names = f.read().split("\n")
    if names and names[-1] == "":
        names.pop()
    if not names or "" in names:
        raise OptionError(f"{path}: class names must be one per line, none empty "
                          "(as `stoker pack --classes` writes them)")
    return names


def find_classes(urls, classes):
    """classes: a path to such a file, a sequence of names, or None: then
    the classes.txt beside the first local shard, when there is one (remote
    shards: give classes=). None when there are no names."""
    if classes is not None and not isinstance(classes, (str, os.PathLike)):
        names = list(classes)
        if not all(isinstance(n, str) for n in names):
            raise OptionError("classes must be a path to a file of names or a sequence of str")
        return names
    if classes is not None:
        return _read(os.fspath(classes))
    local = [u[7:] if u.startswith("file://") else u for u in urls
             if u.startswith("file://") or not _has_scheme(u)]
    if not local:
        return None
    path = os.path.join(os.path.dirname(local[0]), SIDECAR)
    return _read(path) if os.path.isfile(path) else None
