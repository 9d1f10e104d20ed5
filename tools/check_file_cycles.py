#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Fail when files of the library call into each other, directly or in a
loop, and when its folders do: each file of src/ builds on files below it
and is called only from above, so the layers stay readable (a cycle means
a piece is in the wrong file or folder). Works on the static library's
symbol tables (nm), so it sees exactly the calls the linker resolves: a
call through a function pointer or an inline function in a header is not
a dependency between object files. Files of one folder count as much as
files of two: a cycle inside image/ is as much a cycle as one across
folders.

The CPython extension's C files (python/stoker/*.c) get the same check from
their sources, since the build that runs the style suite (ASan) does not
build the extension: their shared names all begin with stk_py_ and are
declared in _stoker.h, so a file uses another when it names a stk_py_
function or object that the other defines.

usage: check_file_cycles.py libstoker.a [--sources python/stoker]
"""
import glob
import os
import re
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


def source_symbols(folder):
    """{file: (stk_py_ names defined, stk_py_ names used)} of the C files
    of folder, comments and string literals left out."""
    files = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.c"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
        text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
        # A definition starts at the line's start, is not static, and its
        # name is followed by "(" (a function) or is a PyTypeObject.
        defined = set(re.findall(r"(?m)^(?!static\b)[A-Za-z_][\w \t\*]*?\b(stk_py_\w+)\s*\([^;]*?\)\s*\{",
                                 text))
        defined |= set(re.findall(r"(?m)^PyTypeObject\s+(stk_py_\w+)\s*=", text))
        used = set(re.findall(r"\bstk_py_\w+\b", text)) - defined
        files[os.path.basename(path)] = (defined, used)
    return files


def graph_of(files):
    owner = {sym: f for f, (defined, _) in files.items() for sym in defined}
    return {f: {owner[s] for s in used if s in owner and owner[s] != f}
            for f, (_, used) in files.items()}


def report_files(found, graph, what):
    for component in found:
        print(f"{what} calling into each other:", ", ".join(component))
        for f in component:
            print(f"  {f} calls {', '.join(sorted(graph[f] & set(component)))}")


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
    args = sys.argv[1:]
    sources = None
    if "--sources" in args:
        i = args.index("--sources")
        sources = args[i + 1]
        del args[i:i + 2]
    graph = graph_of(symbols(args[0]))
    if len(graph) < 10:
        sys.exit(f"{args[0]}: only {len(graph)} object files: not the library?")
    found = cycles(graph)
    report_files(found, graph, "files")
    if sources is not None:
        ext = graph_of(source_symbols(sources))
        if sum(map(len, ext.values())) == 0:
            sys.exit(f"{sources}: no stk_py_ calls between files found: not the extension?")
        found_ext = cycles(ext)
        report_files(found_ext, ext, f"files of {sources}")
        print(f"{sources}: {len(ext)} files, {sum(map(len, ext.values()))} dependencies, "
              f"{len(found_ext)} cycles")
        found = found + found_ext
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
