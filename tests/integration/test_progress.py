# SPDX-License-Identifier: MIT
"""The progress line of long commands (pack, reshard, index, verify, bench)
under a pseudo-terminal, piped, and with --quiet; and bench --plot's SVG."""
import os
import pty
import re
import select
import subprocess
import xml.etree.ElementTree as ET

import pytest

from conftest import RANK_ENV, TIMEOUT_S, assert_no_crash


def run_on_terminal(stoker, args):
    """Run stoker with standard error on a pseudo-terminal (standard output
    piped); returns (returncode, what the terminal showed, stdout)."""
    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in RANK_ENV}
    proc = subprocess.Popen([str(stoker), *map(str, args)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=secondary, env=env)
    os.close(secondary)
    shown = b""
    while True:
        ready, _, _ = select.select([primary], [], [], TIMEOUT_S)
        assert ready, "the command printed nothing for TIMEOUT_S"
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the command closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(primary)
    out = proc.stdout.read()
    proc.wait(timeout=TIMEOUT_S)
    assert_no_crash(subprocess.CompletedProcess(proc.args, proc.returncode, out, shown))
    return proc.returncode, shown.decode(), out.decode()


@pytest.fixture
def shards(make_shard, tmp_path):
    paths = []
    for i in range(4):
        samples = [{"__key__": f"s{i}_{k:03d}", "txt": f"{i} {k}".encode()} for k in range(30)]
        paths.append(str(make_shard(tmp_path / f"in-{i}.tar", samples)))
    return paths


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "files"
    root.mkdir()
    for k in range(40):
        (root / f"k{k:03d}.txt").write_bytes(b"x" * k)
    return root


def commands(shards, folder, tmp_path):
    """Each long command, with arguments that write into a fresh place."""
    out = tmp_path / "out"
    return {
        "pack": lambda n: ["pack", "--flat", "-o", out / f"pack{n}-%d.tar", folder],
        "reshard": lambda n: ["reshard", "-o", out / f"reshard{n}-%d.tar", *shards],
        "index": lambda n: ["index", "-o", out / f"index{n}.json", *shards],
        "verify": lambda n: ["verify", "--no-images", *shards],
        "bench": lambda n: ["bench", "--batch-size", "8", *shards],
    }


# What the line counts, per command.
UNIT = {"pack": "samples", "reshard": "samples", "index": "shards", "verify": "shards",
        "bench": "samples"}


@pytest.mark.parametrize("command", sorted(UNIT))
def test_progress_on_a_terminal_only(stoker, run, shards, folder, tmp_path, command):
    (tmp_path / "out").mkdir()
    make = commands(shards, folder, tmp_path)[command]
    rc, shown, _ = run_on_terminal(stoker, make(1))
    assert rc == 0, shown
    # A line redrawn in place: items, rate, and erased at the end.
    unit = UNIT[command]
    assert re.search(r"\r\d+(/\d+)? %s, \d+ %s/s" % (unit, unit), shown), repr(shown)
    assert shown.endswith("\r\033[K") or "\r\033[K" in shown, repr(shown)
    if command in ("pack", "index", "verify"):  # totals known: the time left
        assert re.search(r"\d+/\d+ %s.*s left" % UNIT[command], shown), repr(shown)

    rc, shown, _ = run_on_terminal(stoker, make(2) + ["--quiet"])
    assert rc == 0, shown
    assert "\r" not in shown and "/s," not in shown, repr(shown)

    piped = run(make(3))
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stderr and "\r" not in piped.stdout
    assert "/s," not in piped.stderr, piped.stderr


def test_bench_plot_is_svg_with_every_series(run, shards, tmp_path):
    plot = tmp_path / "bench.svg"
    proc = run(["bench", "--batch-size", "4", "--epochs", "3", "--plot", plot, *shards])
    assert proc.returncode == 0, proc.stderr
    root = ET.parse(plot).getroot()  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == ns + "svg"
    lines = {p.get("id"): p.get("points") for p in root.iter(ns + "polyline")}
    # Raw samples: samples/s, no image series.
    assert set(lines) == {"samples_per_s", "read_busy", "batching_busy", "wait_share"}
    counts = {len(points.split()) for points in lines.values()}
    assert len(counts) == 1 and counts.pop() >= 1  # one point per interval, every series
    for points in lines.values():
        for xy in points.split():
            x, y = map(float, xy.split(","))
            assert 0 <= x <= 720 and 0 <= y <= 420


def test_bench_plot_with_images_and_an_unwritable_path(run, tmp_path, make_shard):
    from test_pack import jpeg  # a tiny real JPEG
    samples = [{"__key__": f"k{k}", "jpg": jpeg(k), "cls": b"1"} for k in range(12)]
    shard = make_shard(tmp_path / "img.tar", samples)
    plot = tmp_path / "img.svg"
    proc = run(["bench", "--decode", "eval", "--size", "16", "--batch-size", "4", "--plot", plot,
                shard])
    assert proc.returncode == 0, proc.stderr
    ns = "{http://www.w3.org/2000/svg}"
    ids = {p.get("id") for p in ET.parse(plot).getroot().iter(ns + "polyline")}
    assert ids == {"images_per_s", "read_busy", "decode_busy", "batching_busy", "wait_share"}
    bad = tmp_path / "missing-dir" / "x.svg"
    proc = run(["bench", "--plot", bad, shard])
    assert proc.returncode == 1 and f"{bad}: cannot write the plot" in proc.stderr
