#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Fail when files of the library call into each other, directly or in a
loop, and when its folders do: each file of src/ builds on files below it
and is called only from above, so the layers stay readable (a cycle means
a piece is in the wrong file or folder). Works on the static library's
symbol tables (nm), so it sees exactly the calls the linker resolves: a
call through a function pointer or an inline function in a header is not
a dependency between object files.

usage: check_file_cycles.py libstoker.a
"""
import os
import subprocess
import sys


# The folders of src/ (the rest is src/ itself: the public entry points).
FOLDERS = ("base", "io", "list", "cache", "tar", "image", "plan", "pipeline")


def symbols(archive):
    """{object file: (symbols defined, symbols used)} from nm's output."""
    out = subprocess.run(["nm", archive], capture_output=True, text=True, check=True).stdout
    files, current = {}, None
    for line in out.splitlines():
        if line.endswith(".o:"):
            # "src_io_source.c.o", or a path to it in a thin archive
            current = os.path.basename(line[:-1]).removeprefix("src_").removesuffix(".c.o")
            files[current] = (set(), set())
            continue
        parts = line.split()
        if current is None or len(parts) < 2:
            continue
        if len(parts) == 2 and parts[0] == "U":
            files[current][1].add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRV":  # defined, visible to other files
            files[current][0].add(parts[2])
    return files


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main():
    files = symbols(sys.argv[1])
    owner = {sym: f for f, (defined, _) in files.items() for sym in defined}
    graph = {f: {owner[s] for s in used if s in owner and owner[s] != f}
             for f, (_, used) in files.items()}
    if len(graph) < 10:
        sys.exit(f"{sys.argv[1]}: only {len(graph)} object files: not the library?")
    found = cycles(graph)
    for component in found:
        print("files calling into each other:", ", ".join(component))
        for f in component:
            print(f"  {f} calls {', '.join(sorted(graph[f] & set(component)))}")
    # Object files are named after their path: src/io/source.c is io_source.
    folder = {f: f.split("_", 1)[0] if f.split("_", 1)[0] in FOLDERS else "src" for f in graph}
    folders = {d: set() for d in folder.values()}
    for f, deps in graph.items():
        folders[folder[f]] |= {folder[g] for g in deps} - {folder[f]}
    found_folders = cycles(folders)
    for component in found_folders:
        print("folders calling into each other:", ", ".join(component))
        for f in sorted(graph):
            for g in sorted(graph[f]):
                if folder[f] in component and folder[g] in component and folder[f] != folder[g]:
                    print(f"  {f} calls {g}")
    print(f"{len(graph)} files, {sum(map(len, graph.values()))} dependencies, "
          f"{len(found)} cycles; {len(folders)} folders, {len(found_folders)} cycles")
    sys.exit(1 if found or found_folders else 0)


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    main()
