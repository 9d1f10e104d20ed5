#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Fail when a file of src/ includes a header of a folder it may not use: a
layer reaches only the layers below it (src/meson.build), never up and never
sideways. check_file_cycles.py sees calls the linker resolves; this sees
what an include brings in without a call (a struct, an inline function, a
macro), which is how a layer starts to lean on another one.

Every internal include names its folder ("tar/sample.h"; only include/ and
src/ are on the include path), so the folder of a header is read off the
include line itself. A header without a folder is the public stoker.h, one
of src/'s own top-level headers, or a file next to the one including it.

usage: check_include_order.py [SRC_DIR]   (default: src/ of this checkout)
"""
import os
import re
import sys

# Which folders each folder of src/ may include from, besides itself. The
# top level ("src": loader, options, index, verify, report, writer) may use
# them all. image/ is pixels only: it knows no shards or samples, which is
# why it is not allowed tar/ although it sits above it in the build order.
ALLOWED = {
    "base": set(),
    "io": {"base"},
    "list": {"base", "io"},
    "cache": {"base", "io"},
    "tar": {"base", "io", "cache"},
    "image": {"base"},
    "plan": {"base", "io", "tar"},
    "pipeline": {"base", "io", "cache", "tar", "image", "plan"},
}
ALLOWED["src"] = set(ALLOWED)

# Crossings allowed by name while an item of issue 24 is still to do; the
# list only shrinks (a stale entry fails too). Empty: every crossing that
# existed when this check was written is gone.
KNOWN = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path):
    """'tar' for 'tar/sample.h', 'src' for a top-level file."""
    return path.split("/", 1)[0] if "/" in path else "src"


def check(src):
    problems, seen_known, count = [], set(), 0
    for root, _, names in os.walk(src):
        for name in sorted(names):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.relpath(os.path.join(root, name), src).replace(os.sep, "/")
            here = folder_of(path)
            with open(os.path.join(root, name), encoding="utf-8") as f:
                text = f.read()
            for header in INCLUDE.findall(text):
                count += 1
                if "/" in header:
                    there = header.split("/", 1)[0]
                    if there not in ALLOWED:
                        problems.append(f"{path}: #include \"{header}\": no such folder of src/")
                        continue
                elif header == "stoker.h" or os.path.exists(os.path.join(root, header)):
                    continue  # the public header, or a file of the same folder
                elif here != "src" and os.path.exists(os.path.join(src, header)):
                    problems.append(f"{path}: #include \"{header}\" reaches src/'s top level "
                                    f"from {here}/ (up)")
                    continue
                else:
                    continue  # generated into the build tree (build_commit.h)
                if there == here or there in ALLOWED[here]:
                    continue
                if (path, header) in KNOWN:
                    seen_known.add((path, header))
                    continue
                way = "up" if here in ALLOWED[there] else "sideways"
                problems.append(f"{path}: #include \"{header}\": {here}/ may not use {there}/ "
                                f"({way}; {here}/ may use: "
                                f"{', '.join(sorted(ALLOWED[here])) or 'nothing else'})")
    for path, header in sorted(KNOWN - seen_known):
        problems.append(f"{path}: #include \"{header}\" is gone: remove it from KNOWN in {__file__}")
    return problems, count


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    problems, count = check(src)
    for p in problems:
        print(p)
    print(f"{count} includes, {len(problems)} out of order")
    if count < 100:
        sys.exit(f"{src}: only {count} includes: not stoker's src/?")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
