#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""docs/layout.md and the folders agree: where the page lists the folders
of a folder (src/, python/stoker/), it lists each of them and no other, and
a folder of the Python package (one with an __init__.py) names every
module in it (a .py by its name, a C file with its .c or .h). A folder
added, moved or renamed without the page, or the page without the tree,
fails here.

usage: layout_doc.py docs/layout.md REPO_ROOT
"""
import os
import re
import sys

# The folders whose folders the page must list, whether it does or not.
REQUIRED = ("src/", "python/stoker/")


def entries(page):
    """{top folder: {child folder: the text of its entry}} from the page's
    block, where a top folder starts at the line's start and a child is
    indented by two spaces."""
    with open(page, encoding="utf-8") as f:
        block = f.read().split("```")[1]
    tops, top, child = {}, None, None
    for line in block.splitlines():
        m = re.match(r"(\S+/)\s", line + " ")
        if m:
            top, child = m[1], None
            tops[top] = {}
            continue
        m = re.match(r"  (\S+/)\s", line + " ")
        if m and top is not None:
            child = m[1]
            tops[top][child] = line
        elif child is not None:
            tops[top][child] += "\n" + line
    return {t: children for t, children in tops.items() if children}


def main():
    page, root = sys.argv[1], sys.argv[2]
    faults = []
    tops = entries(page)
    for top in REQUIRED:
        tops.setdefault(top, {})
    for top, children in sorted(tops.items()):
        folder = os.path.join(root, top)
        actual = {d + "/" for d in os.listdir(folder)
                  if os.path.isdir(os.path.join(folder, d)) and d != "__pycache__"}
        for d in sorted(actual - set(children)):
            faults.append(f"{page}: {top}{d} is not listed")
        for d in sorted(set(children) - actual):
            faults.append(f"{page}: {top}{d} is listed, no such folder")
        for d in sorted(set(children) & actual):
            path = os.path.join(folder, d)
            if not os.path.exists(os.path.join(path, "__init__.py")):
                continue
            text = children[d]
            for name in sorted(os.listdir(path)):
                stem, ext = os.path.splitext(name)
                said = (ext == ".py" and re.search(rf"\b{re.escape(stem)}\b", text)) or \
                       (ext in (".c", ".h") and name in text)
                if ext in (".py", ".c", ".h") and name != "__init__.py" and not said:
                    faults.append(f"{page}: {top}{d}{name} is not named in its entry")
    print("\n".join(faults) or f"{page}: {sum(map(len, tops.values()))} folders agree")
    sys.exit(1 if faults else 0)


if __name__ == "__main__":
    main()
