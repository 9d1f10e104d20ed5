#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The include order check must fail on a crossing it is meant to catch: a
copy of src/ is checked as it is (clean), then with one planted include
each of the kinds it rejects, and the message must name the file and say
which way the include points.

usage: planted_include.py CHECK_SCRIPT SRC_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

PLANTS = [
    # (file, include planted, words the report must contain)
    ("base/alloc.c", "pipeline/batch.h", "base/ may not use pipeline/ (up"),
    ("image/resize.c", "tar/sample.h", "image/ may not use tar/ (sideways"),
    ("tar/sample.c", "options.h", "reaches src/'s top level from tar/ (up)"),
]


def run(check, src):
    p = subprocess.run([sys.executable, check, src], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    check, src = sys.argv[1], sys.argv[2]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "src")
        shutil.copytree(src, copy)
        rc, out = run(check, copy)
        if rc != 0:
            print(f"unplanted copy should pass, got rc={rc}:\n{out}")
            failures += 1
        for path, header, words in PLANTS:
            target = os.path.join(copy, path)
            with open(target, encoding="utf-8") as f:
                original = f.read()
            with open(target, "a", encoding="utf-8") as f:
                f.write(f'#include "{header}"\n')
            rc, out = run(check, copy)
            if rc != 1 or path not in out or words not in out:
                print(f"planting #include \"{header}\" in {path}: expected rc=1 and "
                      f"'{path}' ... '{words}', got rc={rc}:\n{out}")
                failures += 1
            else:
                print(f"planted #include \"{header}\" in {path}: rejected")
            with open(target, "w", encoding="utf-8") as f:
                f.write(original)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
