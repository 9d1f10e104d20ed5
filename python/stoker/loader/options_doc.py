# SPDX-License-Identifier: MIT
"""The options section of Loader's docstring and the options' defaults as
Python values, both from the C library's option table."""
import fractions
import inspect
import textwrap

from .._ext import _stoker

# Python names of the C options that Loader spells otherwise.
_PY_NAMES = {"index_path": "index"}


def _default_value(o):
    """An option's default from the C table as a Python value."""
    text, kind = o["default"], o["type"]
    if text is None or kind in ("str", "choice"):
        return text
    if kind == "bool":
        return text == "1"
    if kind in ("float", "float3"):
        values = tuple(float(fractions.Fraction(part)) for part in text.split(","))
        return values if kind == "float3" else values[0]
    return _stoker.parse_size(text) if o["bytes"] else int(text)


def _c_default(o):
    """An option's default as help shows it: Python, and the table's text
    where that reads better (4/3, 2G)."""
    value = _default_value(o)
    if o["type"] in ("int", "float") and o["default"] != repr(value):
        return f"{value!r} ({o['default']})"
    return repr(value)


def _options_doc(init):
    """The options section of a docstring, made from the C library's option
    table (stoker._ext._stoker.options()), with init's own defaults where its
    signature has the option."""
    defaults = {name: p.default for name, p in inspect.signature(init).parameters.items()
                if p.default is not inspect.Parameter.empty}
    lines = ["", "    Options: every keyword of the C loader, with its default and what it",
             "    accepts (one table in the C library also makes `stoker bench --help`):", ""]
    for o in _stoker.options():
        name = _PY_NAMES.get(o["name"], o["name"])
        if name not in defaults:
            shown = _c_default(o)
        elif defaults[name] is None:
            shown = "None (" + {"threads": "this rank's share of the cores",
                                "rank": "from torch.distributed or the environment",
                                "world_size": "from torch.distributed or the environment",
                                "samples_per_rank": "all of the rank's shards"}.get(name, "none") + ")"
        else:
            shown = repr(defaults[name])
        accepts = "True or False" if o["type"] == "bool" else o["accepts"]
        needs = f" Acts only with {o['needs']} (else refused)." if o["needs"] else ""
        lines += textwrap.wrap(f"{name}={shown}: {o['doc']}; {accepts}.{needs}", 76,
                               initial_indent="    ", subsequent_indent="        ")
    return "\n".join(lines) + "\n"
