# SPDX-License-Identifier: MIT
"""`meson install` of the build under test, used as a C user would use it.

The build is the one $STOKER_BIN comes from (build-asan in tests/run_all.sh).
It is installed with --destdir into a temporary directory; a small C
program (install/epoch.c) is compiled against the installed header and
shared library with the flags `pkg-config --cflags --libs stoker` gives, and
runs an epoch over generated shards. The installed libstoker.so must export
exactly the functions stoker.h declares STK_API, and no internal stk__ name.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, TIMEOUT_S, find_binary

HEADER = REPO / "include" / "stoker.h"
PROGRAM = Path(__file__).parent / "install" / "epoch.c"


def build_option(options, name):
    return next(o["value"] for o in options if o["name"] == name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(destdir, prefix inside it, libdir inside it, b_sanitize) of the
    installed build."""
    binary = find_binary()
    if binary is None:
        pytest.fail("no build to install: set STOKER_BIN", pytrace=False)
    build = binary.resolve().parent
    options = json.loads(subprocess.run(["meson", "introspect", "--buildoptions", str(build)],
                                        capture_output=True, text=True, check=True).stdout)
    dest = tmp_path_factory.mktemp("install")
    proc = subprocess.run(["meson", "install", "-C", str(build), "--no-rebuild", "--quiet",
                           "--destdir", str(dest)], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prefix = dest / build_option(options, "prefix").lstrip("/")
    return dest, prefix, prefix / build_option(options, "libdir"), build_option(options,
                                                                                "b_sanitize")


def pkg_config(installed, *args):
    dest, _, libdir, _ = installed
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"), PKG_CONFIG_SYSROOT_DIR=str(dest))
    env.pop("PKG_CONFIG_LIBDIR", None)
    proc = subprocess.run(["pkg-config", *args, "stoker"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_installs_header_library_cli_and_man_page(installed):
    _, prefix, libdir, _ = installed
    assert (prefix / "include" / "stoker.h").read_bytes() == HEADER.read_bytes()
    assert (prefix / "share" / "man" / "man1" / "stoker.1").is_file()
    so = libdir / "libstoker.so"
    assert os.readlink(so) == "libstoker.so.0"
    assert os.readlink(libdir / "libstoker.so.0") == "libstoker.so.0.1.0"
    soname = subprocess.run(["objdump", "-p", str(so)], capture_output=True, text=True,
                            check=True).stdout
    assert re.search(r"SONAME\s+libstoker\.so\.0$", soname, re.M), soname
    version = subprocess.run([str(prefix / "bin" / "stoker"), "--version"], capture_output=True,
                             text=True, env=dict(os.environ, LD_LIBRARY_PATH=str(libdir)))
    assert version.returncode == 0 and version.stdout == "stoker 0.1.0\n", version
    assert pkg_config(installed, "--modversion") == ["0.1.0"]


def test_exports_exactly_the_public_api(installed):
    _, _, libdir, _ = installed
    out = subprocess.run(["nm", "-D", "--defined-only", str(libdir / "libstoker.so")],
                         capture_output=True, text=True, check=True).stdout
    exported = set()
    for line in out.splitlines():
        _, kind, name = line.split()
        if kind == "A":  # the version node itself (STOKER_0)
            assert re.fullmatch(r"STOKER_\d+", name), line
            continue
        name = name.split("@")[0]
        assert name.startswith("stk_") and not name.startswith("stk__"), line
        exported.add(name)
    # Every function declaration of the header, marked STK_API or not.
    declarations = re.findall(r"^((?:STK_API )?)(?!typedef|enum|struct \w+ \{)[a-z][\w ]*[ *](stk_\w+)\(",
                              HEADER.read_text(), re.M)
    assert [name for api, name in declarations if not api] == []
    assert len(declarations) > 20 and exported == {name for _, name in declarations}


def test_c_program_links_with_pkg_config_and_runs_an_epoch(installed, dataset, tmp_path):
    _, _, libdir, sanitize = installed
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.fail(f"no C compiler ({cc}) to build the program with", pytrace=False)
    flags = pkg_config(installed, "--cflags", "--libs")
    assert any(f.startswith("-I") and f.endswith("/include") for f in flags), flags
    # A library built with sanitizers needs their runtimes in the program.
    san = [f"-fsanitize={sanitize}"] if sanitize not in ("none", "") else []
    exe = tmp_path / "epoch"
    proc = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", *san, "-o", str(exe), str(PROGRAM),
                           *flags], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    linked = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True,
                            check=True).stdout
    assert "[libstoker.so.0]" in linked, linked
    shards = dataset([7, 5, 9])
    run = subprocess.run([str(exe), *map(str, shards)], capture_output=True, text=True,
                         timeout=TIMEOUT_S, env=dict(os.environ, LD_LIBRARY_PATH=str(libdir)))
    assert run.returncode == 0, run.stderr
    assert run.stdout == "21 5\n"
