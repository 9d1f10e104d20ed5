#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The file-cycle check must fail on the cycles it is meant to catch, within
one folder as across folders: two files of image/ calling each other in a
made-up library of ten object files (compiled here with cc), a call
planted in a copy of the extension's sources (python/stoker/_ext) that
closes a loop between two of its files, and in a copy of the Python
package (python/stoker) an import from the package above, a loop between
two subpackages and one between two modules. Each copy is first checked
clean, and the message must name the files.

usage: planted_cycle.py CHECK_SCRIPT PYTHON_EXT_DIR PYTHON_PACKAGE_DIR
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

# (extension file, call planted there, the files the report must name)
EXT_PLANT = ("_errors.c", "stk_py_batch_new(NULL, NULL, 0, NULL)", "_batch.c, _errors.c")
# (package module, import planted there, what the report must say)
PACKAGE_PLANTS = [
    ("hooks/arena.py", "from .. import Loader",
     "upward import: ", "stoker.hooks.arena imports stoker, from stoker, a package above"),
    ("base/rng.py", "from ..hooks import pool",
     "subpackages importing each other: stoker.base, stoker.hooks",
     "stoker.base.rng imports stoker.hooks.pool"),
    ("hooks/arena.py", "from . import pool",
     "modules importing each other: stoker.hooks.arena, stoker.hooks.pool",
     "stoker.hooks.pool imports stoker.hooks.arena"),
]


def run(check, *args):
    p = subprocess.run([sys.executable, check, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def library(tmp, plant):
    """Ten object files as meson names them (src_FOLDER_FILE.c.o) in an
    archive: image/a.c calls image/b.c, and with plant image/b.c calls back."""
    objs = []
    for i in range(10):
        name, body = f"plan_f{i}", f"int stk__f{i}(void) {{ return {i}; }}\n"
        if i == 0:
            name, body = "image_a", "int stk__b(void);\nint stk__a(void) { return stk__b(); }\n"
        elif i == 1:
            name = "image_b"
            body = ("int stk__a(void);\nint stk__b(void) { return stk__a(); }\n" if plant
                    else "int stk__b(void) { return 1; }\n")
        src = os.path.join(tmp, f"{name}.c")
        with open(src, "w", encoding="utf-8") as f:
            f.write(body)
        obj = os.path.join(tmp, f"src_{name}.c.o")
        subprocess.run([os.environ.get("CC", "cc"), "-c", src, "-o", obj], check=True)
        objs.append(obj)
    archive = os.path.join(tmp, "libplanted.a")
    if os.path.exists(archive):
        os.remove(archive)
    subprocess.run(["ar", "rcs", archive, *objs], check=True)
    return archive


def package_plants(check, tmp, clean, package_dir):
    """The failures of the Python package's plants, each in a fresh copy."""
    failures = []
    for i, (path, line, *said) in enumerate([(None, None)] + PACKAGE_PLANTS):
        copy = os.path.join(tmp, f"package{i}", "stoker")
        shutil.copytree(package_dir, copy, ignore=shutil.ignore_patterns("__pycache__"))
        if path is not None:
            with open(os.path.join(copy, path), "a", encoding="utf-8") as f:
                f.write(f"\n{line}\n")
        rc, out = run(check, clean, "--package", copy)
        if path is None and rc != 0:
            failures.append(f"the Python package as it is should pass, got rc={rc}:\n{out}")
        elif path is not None and (rc != 1 or not all(s in out for s in said)):
            failures.append(f"{line!r} planted in {path}: expected rc=1 and {said}, "
                            f"got rc={rc}:\n{out}")
        elif path is not None:
            print(f"planted {line!r} in {path}: rejected")
    return failures


def main():
    check, ext_dir, package_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        rc, out = run(check, library(tmp, plant=False))
        if rc != 0:
            failures.append(f"a library without a cycle should pass, got rc={rc}:\n{out}")
        rc, out = run(check, library(tmp, plant=True))
        if rc != 1 or "files calling into each other: image_a, image_b" not in out:
            failures.append(f"image_a <-> image_b (one folder): expected rc=1 naming both, "
                            f"got rc={rc}:\n{out}")
        else:
            print("planted image_a <-> image_b within image/: rejected")

        clean = library(tmp, plant=False)
        copy = os.path.join(tmp, "stoker")
        os.mkdir(copy)
        for path in glob.glob(os.path.join(ext_dir, "*.[ch]")):
            shutil.copy(path, copy)
        rc, out = run(check, clean, "--sources", copy)
        if rc != 0:
            failures.append(f"the extension's sources as they are should pass, got rc={rc}:\n{out}")
        path, call, names = EXT_PLANT
        with open(os.path.join(copy, path), "a", encoding="utf-8") as f:
            f.write(f"\nvoid stk_py_planted(void)\n{{\n    {call};\n}}\n")
        rc, out = run(check, clean, "--sources", copy)
        if rc != 1 or f"calling into each other: {names}" not in out:
            failures.append(f"a call planted in {path}: expected rc=1 naming {names}, "
                            f"got rc={rc}:\n{out}")
        else:
            print(f"planted {call} in {path}: rejected")
        failures += package_plants(check, tmp, clean, package_dir)
    print("\n".join(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
