# SPDX-License-Identifier: MIT
"""`pip install --no-build-isolation .`, as docs/python.md says, on a fresh copy
of the repository (the files git would check out, no build directory), in a
fresh venv with the system's packages; a wheel (`pip wheel`) that a Dask
worker or GPU host with the same Debian libraries installs with no compiler
on its PATH; and that wheel repaired (tools/repair_wheel.py) to carry every
library but glibc's and the compiler runtime's. Needs python3-mesonpy and
patchelf (tools/install_deps.sh).

`pip install` and `pip wheel` compile in one meson build directory of the
fresh copy (meson-python's `builddir` setting): the first compiles the
library and the extension, the second finds them built, and the run
builds stoker once instead of twice (some 45 s on two cores)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import repair_wheel  # noqa: E402  the libraries a repaired wheel may take from the system

BUILD_TIMEOUT_S = 900  # a whole build of the library and extension, on a loaded machine
PYTHON = "/usr/bin/python3"
USE = r'''
import sys, stoker
samples = stoker.Samples(sys.argv[1:], shuffle=False)  # the C extension reading the shards
print(stoker.__file__, sum(1 for _ in samples))
'''


def fresh_copy(dest):
    """The tracked files (and new ones git would add) of the working tree."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, names):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def venv(path):
    subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", str(path)], check=True,
                   timeout=120)
    return path / "bin" / "python"


def build_dir_setting(source):
    """pip's option for the one meson build directory of the fresh copy `source`."""
    return f"--config-settings=builddir={source.parent / 'meson-build'}"


def run(args, **kw):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    for tool in ("patchelf",):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: run tools/install_deps.sh", pytrace=False)
    return fresh_copy(tmp_path_factory.mktemp("clone") / "tree")  # clone0/meson-build beside it


def test_pip_install_in_a_fresh_venv(source, tmp_path, dataset):
    python = venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "-q",
         build_dir_setting(source), "."], cwd=source, timeout=BUILD_TIMEOUT_S)
    out = run([python, "-c", USE, *dataset([5, 3])], cwd=tmp_path, timeout=120)
    assert out.startswith(str(tmp_path / "venv")) and out.split()[-1] == "8", out


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory):
    """The wheel `pip wheel` builds of the fresh copy."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    builder = venv(tmp_path / "builder")
    run([builder, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-q",
         build_dir_setting(source), "-w", tmp_path / "dist", "."], cwd=source,
        timeout=BUILD_TIMEOUT_S)
    built, = (tmp_path / "dist").glob("stoker-*.whl")
    return built


def test_wheel_installs_without_a_compiler(wheel, tmp_path, dataset):
    python = venv(tmp_path / "host")
    bare = {"HOME": str(tmp_path), "PATH": "/nonexistent"}  # no cc, gcc, meson or ninja
    run([python, "-m", "pip", "install", "--no-index", "--no-deps", "-q", wheel], env=bare,
        timeout=300)
    out = run([python, "-c", USE, *dataset([5, 3])], cwd=tmp_path, env=bare, timeout=120)
    assert out.startswith(str(tmp_path / "host")) and out.split()[-1] == "8", out
    version = run([tmp_path / "host" / "bin" / "stoker", "--version"], env=bare, timeout=60)
    assert version == "stoker 0.1.0\n"


def test_repaired_wheel_carries_its_libraries(wheel, tmp_path, dataset):
    """The wheel needs libarchive, libcurl, libjpeg, libspng, cJSON, expat,
    zlib and yajl from the system, and through them some 40 more: it ran
    only where the same Debian packages were installed. Repaired, every
    library but glibc's and the compiler runtime's is inside the install
    (ldd resolves each there, for the extension and the command alike),
    and it reads shards."""
    out = run([PYTHON, REPO / "tools" / "repair_wheel.py", wheel, tmp_path / "repaired"],
              timeout=300)
    repaired, = (tmp_path / "repaired").glob("stoker-*.whl")
    assert "libraries in stoker.libs/" in out, out
    host = tmp_path / "host"
    python = venv(host)
    bare = {"HOME": str(tmp_path), "PATH": "/nonexistent"}
    run([python, "-m", "pip", "install", "--no-index", "--no-deps", "-q", repaired], env=bare,
        timeout=300)
    elves = [p for p in host.rglob("*") if p.is_file() and not p.is_symlink()
             and "stoker" in str(p.relative_to(host)) and p.read_bytes()[:4] == b"\x7fELF"]
    assert any(p.name.startswith("_stoker") for p in elves), elves
    assert host / "bin" / "stoker" in elves, elves
    for elf in elves:
        listing = run(["ldd", elf], timeout=60)
        for m in re.finditer(r"^\s*(\S+) => (\S+)", listing, re.M):
            name, path = m[1], Path(m[2])
            if not repair_wheel.SYSTEM.match(name):  # glibc's and the compiler's
                assert path.resolve().is_relative_to(host.resolve()), (elf, name, path)
    out = run([python, "-c", USE, *dataset([5, 3])], cwd=tmp_path, env=bare, timeout=120)
    assert out.split()[-1] == "8", out
    version = run([host / "bin" / "stoker", "--version"], env=bare, timeout=60)
    assert version == "stoker 0.1.0\n"
