# SPDX-License-Identifier: MIT
"""Which code the user's hooks run in this process: the files of the
modules their pickle refers to, as this process resolves them.

cloudpickle sends a function, class or instance of an importable module
by reference (module and name), not by value: the pickled bytes are the
same on the trainer and on a Dask worker that has another version of
that module, and the worker would run its own. So the pickle is loaded
with an Unpickler that notes every module it imports from (functions and
classes by reference: a hook module's functions, functools.partial's
function, a torchvision transform's class) and every module a by-value
function's globals import (cloudpickle's subimport), and the digest of
each such module's file becomes part of a worker's identity (env,
cluster.worker.build_identity): another file there, and the worker is
refused with the module named.

Left out: the standard library's modules (the Python version, compared
already, stands for them), the pickler's own helpers, modules built into
the interpreter (no file), and the modules that a hook module imports in
turn but the pickle does not name.
"""
import hashlib
import io
import os
import pickle
import sys
import sysconfig

try:
    from cloudpickle.cloudpickle import subimport as _subimport
except ImportError:  # plain pickle: no by-value function, no subimport
    _subimport = None


class _Recorder(pickle.Unpickler):
    """An Unpickler that notes the modules the pickle loads from."""

    def __init__(self, data):
        super().__init__(io.BytesIO(data))
        self.modules = set()

    def find_class(self, module, name):
        self.modules.add(module)
        found = super().find_class(module, name)
        if found is _subimport and _subimport is not None:
            return self._subimport
        return found

    def _subimport(self, name):
        self.modules.add(name)
        return _subimport(name)


def load(data):
    """(the unpickled hooks, {"code MODULE": digest of its file}) for the
    hooks pickled in data (pool.dumps); raises what unpickling raises
    (ModuleNotFoundError where a hook's module is missing)."""
    recorder = _Recorder(data)
    hooks = recorder.load()
    return hooks, {f"code {name}": _file_digest(name) for name in sorted(recorder.modules)
                   if _counted(name)}


# The standard library's directory; the packages installed under it
# (site-packages, Debian's dist-packages) are not part of it.
_STDLIB = os.path.join(sysconfig.get_paths()["stdlib"], "")


def _counted(name):
    path = getattr(sys.modules.get(name), "__file__", None)
    return path is not None and name.partition(".")[0] != "cloudpickle" and not (
        path.startswith(_STDLIB) and "-packages" + os.sep not in path[len(_STDLIB):])


def _file_digest(name):
    """SHA-256 (128 bits in hex) of the file module `name` was loaded from
    (through its loader: a module in a zip archive has no file of its own),
    or why it cannot be read."""
    module = sys.modules[name]
    try:
        data = module.__loader__.get_data(module.__file__)
    except (AttributeError, OSError) as e:
        return f"unreadable ({type(e).__name__})"
    return hashlib.sha256(data).hexdigest()[:32]
