# SPDX-License-Identifier: MIT
"""One schema for options and stats (src/options_table.h, src/base/stats_table.h): every option of
the C library's table is a keyword of stoker.Loader and of the C loader and
is listed with its default in help(stoker.Loader); where the table says the
stoker command takes it, every command the table names accepts its flag
(with the default value) and lists it in --help, and refuses a value out of
range naming the flag; the other commands that read shards refuse it. Every counter is a key of stats(), of `stoker bench
--json` and of the stats() help."""
import importlib.util
import inspect
import json
import os
import subprocess

import pytest

import stoker

OPTIONS = stoker._ext._stoker.options()
CLI_OPTIONS = [o for o in OPTIONS if o["cli"]]
STATS = [name for name, _ in stoker._ext._stoker.stats_fields()]
INIT = inspect.signature(stoker.Loader.__init__).parameters
READERS = ("bench", "ls", "cat", "index", "verify", "reshard")


def py_name(o):
    return stoker.loader.options_doc._PY_NAMES.get(o["name"], o["name"])


def test_the_table_is_whole():
    """The options a training script uses most are in it, each with a doc
    and a well-formed CLI scope."""
    names = {o["name"] for o in OPTIONS}
    assert {"batch_size", "threads", "shuffle_buffer", "on_error", "transform", "image_size",
            "dtype", "layout", "cache_dir", "io_timeout_ms", "require_members"} <= names
    for o in OPTIONS:
        assert o["doc"] and o["accepts"], o
        assert (o["cli"] is None) == (not o["cli_commands"]), o
        assert set(o["cli_commands"]) <= set(READERS), o
        if o["type"] == "choice":
            assert o["default"] in o["choices"].split(","), o


@pytest.mark.parametrize("o", OPTIONS, ids=lambda o: o["name"])
def test_python_takes_and_documents_every_option(even_shards, o):
    name = py_name(o)
    assert f"\n    {name}=" in stoker.Loader.__doc__, name
    value = INIT[name].default if name in INIT else stoker.loader.options_doc._default_value(o)
    kw = dict(batch_size=4, image_size=16, transform="eval", rank=0, world_size=1)
    kw[name] = value
    if name in ("rank", "world_size") and value is None:
        del kw["rank"], kw["world_size"]  # both or neither
    stoker.Loader(even_shards, **kw).close()
    # the C loader itself, with the table's own default
    default = stoker.loader.options_doc._default_value(o)
    stoker._ext._stoker.Loader(even_shards, **{o["name"]: default}).close()


def flag(o):
    """The flag for o and a value: its default (a bool's flag flips it)."""
    if o["type"] == "bool":
        return ["--" + ("no-" if o["default"] == "1" else "") + o["cli"]]
    return ["--" + o["cli"], o["default"] if o["default"] is not None else "x"]


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("o", CLI_OPTIONS, ids=lambda o: o["name"])
def test_the_cli_takes_and_lists_every_option_of_its_scope(stoker_bin, o):
    args = flag(o)
    for command in READERS:
        if command not in o["cli_commands"]:
            if f"  {args[0]} " in run(stoker_bin, command, "--help").stdout:
                continue  # the command's own flag of that name (reshard --seed)
            proc = run(stoker_bin, command, *args, "x.tar")
            assert proc.returncode == 2 and "unrecognized option" in proc.stderr, (command, args)
            continue
        shown = run(stoker_bin, command, "--help")
        assert shown.returncode == 0 and f"  {args[0]} " in shown.stdout + " ", (command, args)
        proc = run(stoker_bin, command, *args, "--help")
        assert proc.returncode == 0, (command, args, proc.stderr)
        if o["type"] == "int":
            proc = run(stoker_bin, command, args[0], str(o["max"] + 1), "x.tar")
            assert proc.returncode == 2 and args[0] in proc.stderr, (command, proc.stderr)
            assert str(o["max"]) in proc.stderr, proc.stderr


def test_stats_keys_are_the_table(even_shards, stoker_bin):
    loader = stoker.Loader(even_shards[:1], batch_size=4, image_size=16, transform="eval",
                           rank=0, world_size=1)
    next(iter(loader))
    assert list(loader.stats()) == STATS
    loader.close()
    for name in STATS:
        assert f"\n        {name}: " in stoker.Loader.stats.__doc__, name
    report = json.loads(run(stoker_bin, "bench", "--json", even_shards[0]).stdout)
    assert set(STATS) <= set(report), set(STATS) - set(report)


def test_every_counter_has_a_kind_from_the_table():
    """The kind column (count, ns, gauge) covers every counter: times are
    the _ns fields, the gauges the values that may go down, and the
    Prometheus exposition types each metric by it."""
    kinds = stoker._ext._stoker.stats_kinds()
    assert list(kinds) == STATS
    assert {k for k, v in kinds.items() if v == "ns"} == {k for k in STATS if k.endswith("_ns")}
    assert {k for k, v in kinds.items() if v == "gauge"} == {
        "read_threads", "decode_threads", "shuffle_epoch_shards", "samples_padded",
        "cache_epoch_hits", "cache_epoch_misses", "cache_epoch_origin_bytes"}
    text = stoker.loader.metrics.prometheus_text({k: 1 for k in STATS})
    for name, kind in kinds.items():
        if kind == "gauge":
            assert f"# TYPE stoker_{name} gauge" in text, name
        elif kind == "ns":
            assert f"# TYPE stoker_{name[:-3]}_seconds_total counter" in text, name
        else:
            assert f"# TYPE stoker_{name}_total counter" in text, name


def test_the_options_reference_is_generated_from_the_table():
    """docs/options.md is tools/options_doc.py's output: regenerate it when
    the table changes."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    spec = importlib.util.spec_from_file_location("options_doc",
                                                  os.path.join(root, "tools", "options_doc.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    with open(os.path.join(root, "docs", "options.md"), encoding="utf-8") as f:
        assert f.read() == tool.markdown(), (
            "docs/options.md is stale: PYTHONPATH=build-rel/python tools/options_doc.py "
            "> docs/options.md")
