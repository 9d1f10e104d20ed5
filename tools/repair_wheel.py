#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Make a wheel carry the shared libraries its programs and extension need.

    tools/repair_wheel.py WHEEL OUTDIR

What auditwheel repair does, with Debian's patchelf (auditwheel is not
packaged in Debian): every ELF file of the wheel is asked (ldd) for the
libraries it loads; each one the system must not be relied on for (all but
glibc's own and the compiler runtime, the set manylinux policies allow) is
copied into stoker.libs/ under a name made unique by a hash of its bytes
(libcurl-1a2b3c4d.so.4), so that a library of the same soname that another
package (torch) loaded first is never taken for it; every reference is
renamed (DT_NEEDED, DT_SONAME) and found through a RUNPATH relative to the
file ($ORIGIN). RECORD is rewritten with the new hashes.

The wheel keeps its linux_x86_64 tag: it runs where glibc is at least the
build machine's (Debian 12: 2.36) on x86-64, which no manylinux tag checked
here can claim for it.
"""
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

LIBS = "stoker.libs"
# glibc's libraries, the loader and the compiler runtime: what manylinux
# policies let a wheel take from the system (a second copy of libc in a
# process does not work).
SYSTEM = re.compile(r"^(ld-linux.*|linux-vdso\.so\.1|lib(c|m|dl|rt|pthread|resolv|util|anl|nsl)"
                    r"\.so\.\d+|libgcc_s\.so\.1|libstdc\+\+\.so\.6)$")
# Where the scripts of a wheel land relative to its platlib, in a venv and
# in Debian's /usr/local scheme: the command's RUNPATH tries each.
SCRIPT_TO_PLATLIB = ("../lib/python{v}/site-packages", "../lib/python{v}/dist-packages",
                     "../local/lib/python{v}/dist-packages")


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def needed_libraries(path):
    """{soname: path} of every library path loads, directly or not (ldd)."""
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+) \(0x", line)
        if m:
            found[m[1]] = m[2]
        elif "not found" in line:
            sys.exit(f"repair_wheel: {path}: {line.strip()}")
    return found


def patchelf(*args):
    subprocess.run(["patchelf", *map(str, args)], check=True, capture_output=True)


def unique_name(soname, path):
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:8]
    stem, dot, rest = soname.partition(".so")
    return f"{stem}-{digest}{dot}{rest}"


def record_line(root, path):
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [path.relative_to(root).as_posix(), f"sha256={digest}", str(len(data))]


def repair(wheel, outdir):
    version = "{}.{}".format(*sys.version_info[:2])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with zipfile.ZipFile(wheel) as z:
            z.extractall(root)
            modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
        for name, mode in modes.items():
            if mode:
                os.chmod(root / name, mode)
        elves = [p for p in sorted(root.rglob("*")) if p.is_file() and is_elf(p)]
        bundle = {}
        for elf in elves:
            bundle.update({k: v for k, v in needed_libraries(elf).items() if not SYSTEM.match(k)})
        libs = root / LIBS
        libs.mkdir()
        renamed = {}
        for soname, path in sorted(bundle.items()):
            renamed[soname] = unique_name(soname, path)
            shutil.copyfile(path, libs / renamed[soname])
            os.chmod(libs / renamed[soname], 0o755)
            patchelf("--set-soname", renamed[soname], libs / renamed[soname])
            patchelf("--set-rpath", "$ORIGIN", libs / renamed[soname])
        for elf in [*elves, *(libs / n for n in renamed.values())]:
            needed = subprocess.run(["patchelf", "--print-needed", str(elf)], capture_output=True,
                                    text=True, check=True).stdout.split()
            for old in needed:
                if old in renamed:
                    patchelf("--replace-needed", old, renamed[old], elf)
            if elf.parent == libs:
                continue
            if ".data" in elf.relative_to(root).parts[0]:  # a script: bin/ of the install
                paths = [f"$ORIGIN/{p.format(v=version)}/{LIBS}" for p in SCRIPT_TO_PLATLIB]
            else:
                paths = ["$ORIGIN/" + os.path.relpath(libs, elf.parent)]
            # Kept: what the build set (meson-python's $ORIGIN/../.stoker.mesonpy.libs).
            before = subprocess.run(["patchelf", "--print-rpath", str(elf)], capture_output=True,
                                    text=True, check=True).stdout.strip()
            patchelf("--set-rpath", ":".join([*filter(None, before.split(":")), *paths]), elf)
        record, = root.glob("*.dist-info/RECORD")
        rows = [record_line(root, p) for p in sorted(root.rglob("*"))
                if p.is_file() and p != record]
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(
            [*rows, [record.relative_to(root).as_posix(), "", ""]])
        record.write_text(text.getvalue())
        outdir.mkdir(parents=True, exist_ok=True)
        out = outdir / Path(wheel).name
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            for p in sorted(root.rglob("*")):
                if p.is_file():
                    info = zipfile.ZipInfo(p.relative_to(root).as_posix(), (2020, 1, 1, 0, 0, 0))
                    info.external_attr = (p.stat().st_mode & 0o777 | 0o100000) << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    z.writestr(info, p.read_bytes())
    return out, sorted(renamed.values())


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: repair_wheel.py WHEEL OUTDIR")
    out, libs = repair(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{out}: {len(libs)} libraries in {LIBS}/")


if __name__ == "__main__":
    main()
