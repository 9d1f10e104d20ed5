#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Check that every paragraph, list item, table row and code block of an old
README is still said somewhere in the README and docs/ (issue 33 moved the
README's text into docs/ pages; merging a branch that edited the old README
must move its new text too).

    git show OLD:README.md > /tmp/old.md && tools/docs_moved.py /tmp/old.md

Text is compared after dropping markdown links' targets, quotes, heading and
list markers and line breaks, so a paragraph that moved and gained a link
still counts. Prints each unit that is found nowhere; exit status 1 if any.
"""
import glob
import os
import re
import sys


def normalize(text):
    text = re.sub(r"\]\([^)]*\)", "]", text)          # [text](target) -> [text]
    text = re.sub(r"[\[\]\"`]", "", text)
    text = re.sub(r"(?m)^\s*(#+|[-*]|\d+\.)\s+", " ", text)
    return " ".join(text.split())


def units(text):
    """Paragraphs, list items, table rows and code blocks of a markdown text."""
    out, block, fence = [], [], False

    def flush():
        if block:
            out.append("\n".join(block))
            block.clear()
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            if fence:
                block.append(line)
                flush()
            else:
                flush()
                block.append(line)
            fence = not fence
            continue
        if fence:
            block.append(line)
        elif not line.strip():
            flush()
        elif re.match(r"\s*(\||[-*] |\d+\. |#)", line):
            flush()
            block.append(line)
            if line.lstrip().startswith(("|", "#")):
                flush()
        else:
            block.append(line)
    flush()
    return [u for u in out if normalize(u)]


def main(old_path, root):
    pages = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    corpus = normalize("\n".join(open(p, encoding="utf-8").read() for p in pages))
    missing = [u for u in units(open(old_path, encoding="utf-8").read())
               if normalize(u) not in corpus]
    for u in missing:
        print("not found:", u[:200].replace("\n", " "))
    print(f"{len(missing)} of the old text's units found nowhere", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
