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

The CPython extension's C files (python/stoker/_ext/*.c) get the same check from
their sources, since the build that runs the style suite (ASan) does not
build the extension: their shared names all begin with stk_py_ and are
declared in _stoker.h, so a file uses another when it names a stk_py_
function or object that the other defines.

The Python package (python/stoker) is read for its imports (ast, every
import statement, those inside functions too): no module imports from a
package above its own (its parent's __init__.py or a module beside it), so
a part of the package can be read and imported without the layers on top;
and no modules, nor subpackages, import each other in a loop. A parent
package's __init__.py, which Python runs before any module under it, is
not counted as a dependency of the module imported.

usage: check_file_cycles.py libstoker.a [--sources python/stoker/_ext]
                            [--package python/stoker]
"""
import ast
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


def package_modules(root):
    """{module name: path} of the .py files under root, the package named
    after root's folder (python/stoker: stoker, stoker.hooks.pool, ...), and
    of the C extensions built there (their PyInit_NAME, at the .c file that
    defines it)."""
    name = os.path.basename(os.path.normpath(root))
    modules = {}
    for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True) +
                       glob.glob(os.path.join(root, "**", "*.c"), recursive=True)):
        folder = [name] + os.path.relpath(os.path.dirname(path), root).split(os.sep)
        folder = [part for part in folder if part != "."]
        if path.endswith(".py"):
            leaf = os.path.basename(path)[:-3]
            modules[".".join(folder + ([leaf] if leaf != "__init__" else []))] = path
        else:
            with open(path, encoding="utf-8") as f:
                for init in re.findall(r"\bPyInit_(\w+)\s*\(", f.read()):
                    modules[".".join(folder + [init])] = path
    return modules


def package_of(module, modules):
    """The package a module lives in: itself for a package's __init__.py."""
    return module if modules[module].endswith("__init__.py") else module.rpartition(".")[0]


def imported(module, node, modules):
    """The modules of the package that one import statement names."""
    root = module.split(".")[0]
    if isinstance(node, ast.Import):
        named = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = package_of(module, modules).split(".")
            base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
        # "from P import x": the module P.x where there is one, else P's names
        named = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    found = set()
    for name in named:
        if name != root and not name.startswith(root + "."):
            continue
        while name not in modules:  # a name in a module
            name = name.rpartition(".")[0]
        found.add(name)
    return found


def package_imports(root):
    """({module: modules it imports}, [upward imports as text], modules)."""
    modules = package_modules(root)
    graph, upward = {}, []
    for module, path in modules.items():
        graph[module] = set()
        if not path.endswith(".py"):
            continue  # the extension imports no Python module of the package
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        mine = package_of(module, modules)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in imported(module, node, modules) - {module}:
                graph[module].add(target)
                theirs = package_of(target, modules)
                if mine.startswith(theirs + "."):
                    upward.append(f"{path}:{node.lineno}: {module} imports {target}, "
                                  f"from {theirs}, a package above its own")
    return graph, upward, modules


def check_package(root):
    """Print what is wrong with the package's imports; the number of faults."""
    graph, upward, modules = package_imports(root)
    if len(modules) < 5:
        sys.exit(f"{root}: only {len(modules)} modules: not the Python package?")
    for line in upward:
        print("upward import:", line)
    found = cycles(graph)
    for component in found:
        print("modules importing each other:", ", ".join(component))
        for m in component:
            print(f"  {m} imports {', '.join(sorted(graph[m] & set(component)))}")
    # Subpackages: the first level under the package (stoker.hooks, ...).
    name = os.path.basename(os.path.normpath(root))
    top = {m: ".".join(m.split(".")[:2]) for m in modules if package_of(m, modules) != name}
    subs = {p: set() for p in top.values()}
    for m, deps in graph.items():
        if m in top:
            subs[top[m]] |= {top[d] for d in deps if d in top} - {top[m]}
    found_subs = cycles(subs)
    for component in found_subs:
        print("subpackages importing each other:", ", ".join(component))
        for m in sorted(top):
            for d in sorted(graph[m]):
                if top[m] in component and d in top and top[d] in component and top[d] != top[m]:
                    print(f"  {m} imports {d}")
    print(f"{root}: {len(modules)} modules, {sum(map(len, graph.values()))} imports, "
          f"{len(upward)} upward, {len(found)} cycles; {len(subs)} subpackages, "
          f"{len(found_subs)} cycles")
    return len(upward) + len(found) + len(found_subs)


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
    sources = package = None
    if "--sources" in args:
        i = args.index("--sources")
        sources = args[i + 1]
        del args[i:i + 2]
    if "--package" in args:
        i = args.index("--package")
        package = args[i + 1]
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
    faults = check_package(package) if package is not None else 0
    sys.exit(1 if found or found_folders or faults else 0)


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    main()
