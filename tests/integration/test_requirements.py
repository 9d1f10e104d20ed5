# SPDX-License-Identifier: MIT
"""The wheel's metadata declares what python/stoker imports: every
third-party module imported when the package is (a module-level import not
guarded by `except ImportError`) is in [project] dependencies, and every
other one (inside a function, or guarded) is there or in an extra of
[project.optional-dependencies]; nothing is declared that nothing imports.
numpy was imported by seven modules and declared nowhere: pip would install
the wheel where numpy is missing, and `import stoker` would fail there."""
import ast
import importlib.metadata
import re
import sys
import tomllib

from conftest import REPO

PACKAGE = REPO / "python" / "stoker"


def normalized(name):
    """PEP 503's form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement):
    return normalized(re.match(r"[A-Za-z0-9._-]+", requirement)[0])


def distribution_of(module):
    """The distribution that provides a top-level module (Pillow for PIL),
    from the installed packages' metadata; the module's own name otherwise."""
    names = importlib.metadata.packages_distributions().get(module, [module])
    return normalized(names[0])


def guards_import_error(node):
    def names(handler):
        if handler.type is None:
            return {"BaseException"}
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return {t.id for t in types if isinstance(t, ast.Name)}
    return any(names(h) & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
               for h in node.handlers)


def imports(tree):
    """(top-level module, required at import time) for every absolute import."""
    found = []

    def visit(node, required):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            required = False
        if isinstance(node, ast.Try) and guards_import_error(node):
            for child in node.body:
                visit(child, False)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, required)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name.split(".")[0], required) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.module.split(".")[0], required))
        for child in ast.iter_child_nodes(node):
            visit(child, required)
    visit(tree, True)
    return found


def third_party_imports():
    """{distribution: (required, [where])} over the package's modules."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):  # the subpackages' modules too
        for module, required in imports(ast.parse(path.read_text(), str(path))):
            if module in sys.stdlib_module_names or module == "stoker":
                continue
            dist = distribution_of(module)
            was_required, where = out.get(dist, (False, []))
            out[dist] = (was_required or required, where + [f"{path.relative_to(PACKAGE)}: {module}"])
    return out


def test_declared_requirements_cover_every_import():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = {requirement_name(r) for r in project.get("dependencies", [])}
    extras = {requirement_name(r) for group in project.get("optional-dependencies", {}).values()
              for r in group}
    found = third_party_imports()
    assert {"numpy", "torch"} <= set(found), found  # the walk sees the package's imports
    missing = {d: where for d, (needed, where) in found.items() if needed and d not in required}
    assert not missing, f"imported when stoker is, not in [project] dependencies: {missing}"
    undeclared = {d: where for d, (_, where) in found.items() if d not in required | extras}
    assert not undeclared, f"imported, declared nowhere: {undeclared}"
    unused = (required | extras) - set(found)
    assert not unused, f"declared, imported nowhere in python/stoker: {sorted(unused)}"
