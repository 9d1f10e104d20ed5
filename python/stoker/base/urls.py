# SPDX-License-Identifier: MIT
"""URLs as users give them: one or many, str or path-like, with local
glob patterns expanded (stoker's own patterns are braces, expanded in C)."""
import glob
import os


def _has_scheme(url):
    return url.startswith("pipe:") or "://" in url.split("/", 1)[0] + "//"


def _expand_glob(url):
    """A local path with * ? or [ as Python users write it (glob, sorted);
    stoker's own patterns are braces. A pattern that matches nothing is
    left as it is, for the loader to name the missing shard."""
    if _has_scheme(url) or not glob.has_magic(url):
        return [url]
    return sorted(glob.glob(url)) or [url]


def _as_list(urls):
    """URLs as str: one str or path-like, or a sequence of them; local
    glob patterns expanded."""
    if isinstance(urls, (str, os.PathLike)):
        urls = [urls]
    return [u for url in urls for u in _expand_glob(os.fspath(url))]
