# SPDX-License-Identifier: MIT
"""The README and docs/ stay true: every Python and shell example runs, every
relative link and anchor resolves, every page is reached from the README, and
docs/python-api.md is what tools/python_api_doc.py makes of the docstrings.

Examples. Each ```python and ```sh block of README.md and docs/*.md is run,
the blocks of one page in order in one fresh directory (so a page's later
blocks see what its earlier ones made), with `stoker` (this build's CLI) on
PATH and this build's module importable, and must exit 0 within
EXAMPLE_TIMEOUT_S. That directory holds small data the examples name:

  photos/   an ImageFolder tree: 48 of the sample photos in 4 class folders
  data/     those photos packed into 2 shards, data/train-000000.tar and
            data/train-000001.tar (stoker pack --max-samples 24)

and before a block runs, each key of SUBSTITUTIONS in it is replaced by its
value (the README's "/data/train-{000000..001023}.tar" becomes these two
shards), so the pages can show the paths a reader has.

A block that cannot run here (it needs a GPU, a Dask cluster, a cloud
bucket, minutes, or is a fragment of the reader's own code) is preceded by
the line

  <!-- docs-test: parse-only (WHY) -->

and is only parsed (ast.parse for Python, bash -n for shell). WHY must be
given. Blocks in other languages (C, output listings) are not checked.
"""
import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_TIMEOUT_S = 180
SUBSTITUTIONS = {"/data/train-{000000..001023}.tar": "data/train-{000000..000001}.tar"}
RUN_LANGS = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<what>[\w-]+)\s*(?:\((?P<why>[^)]*)\))?\s*-->")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def pages(root):
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def blocks(path):
    """(line, lang, code, parse_only, problem) of each fenced block of a page."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent, lang = i, m["indent"], m["lang"]
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        marker = MARKER.search(lines[start - 1]) if start else None
        problem = None
        if marker and (marker["what"] != "parse-only" or not (marker["why"] or "").strip()):
            problem = (f"{path.name}:{start}: a docs-test marker is "
                       "'<!-- docs-test: parse-only (WHY) -->' with a reason")
        out.append((start + 1, lang, "\n".join(body) + "\n", bool(marker), problem))
    return out


def slugs(path):
    """The anchors GitHub gives a page's headings."""
    seen, out, fence = {}, set(), False
    for line in path.read_text(encoding="utf-8").split("\n"):
        if FENCE.match(line):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def link_problems(path):
    """Relative links of a page whose file or anchor does not exist."""
    problems, fence = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if FENCE.match(line):
            fence = not fence
        if fence:
            continue
        for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = m["target"]
            if re.match(r"[a-z]+:", target):      # http:, https:, mailto: are not checked here
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                problems.append(f"{path.name}:{number}: {target}: no such file")
            elif anchor and (dest.suffix != ".md" or anchor not in slugs(dest)):
                problems.append(f"{path.name}:{number}: {target}: no heading #{anchor} there")
    return problems


def parse_problem(lang, code):
    if lang == "python":
        try:
            ast.parse(code)
        except SyntaxError as e:
            return f"does not parse: {e}"
        return None
    r = subprocess.run(["bash", "-n"], input=code, capture_output=True, text=True, timeout=30)
    return r.returncode and f"does not parse: {r.stderr.strip()}"


def run_problem(lang, code, cwd, env):
    for key, value in SUBSTITUTIONS.items():
        code = code.replace(key, value)
    argv = [sys.executable, "-c", code] if lang == "python" else ["bash", "-e", "-c", code]
    try:
        r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=EXAMPLE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"did not finish within {EXAMPLE_TIMEOUT_S} s"
    return r.returncode and f"exit status {r.returncode}:\n{(r.stdout + r.stderr)[-2000:]}"


def example_problems(path, workspace_factory, env):
    """Every problem of a page's examples: markers, parsing, running."""
    problems, cwd = [], None
    for line, lang, code, parse_only, problem in blocks(path):
        if problem:
            problems.append(problem)
        if lang not in RUN_LANGS:
            continue
        kind = RUN_LANGS[lang]
        bad = parse_problem(kind, code)
        if not bad and not parse_only:
            cwd = cwd or workspace_factory()
            bad = run_problem(kind, code, cwd, env)
        if bad:
            problems.append(f"{path.name}:{line}: {lang} example {bad}")
    return problems


@pytest.fixture(scope="module")
def example_env(clean_env_factory, stoker_bin):
    env = clean_env_factory()
    env["PATH"] = os.path.dirname(os.path.abspath(stoker_bin)) + os.pathsep + env["PATH"]
    return env


@pytest.fixture(scope="module")
def workspace_factory(tmp_path_factory, dataset, stoker_bin):
    """A function making a fresh directory with photos/ and data/ (see the top)."""
    seed = tmp_path_factory.mktemp("docs-seed")
    for i, s in enumerate(dataset[:48]):
        folder = seed / "photos" / f"class{s.label % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:04d}.jpg").write_bytes(s.jpg)
    subprocess.run([stoker_bin, "pack", "-q", "-o", str(seed / "data" / "train-%06d.tar"),
                    "--max-samples", "24", str(seed / "photos")], check=True, timeout=60,
                   capture_output=True)
    assert sorted(p.name for p in (seed / "data").iterdir()) == ["train-000000.tar",
                                                                 "train-000001.tar"]

    def make():
        where = tmp_path_factory.mktemp("docs-example")
        shutil.copytree(seed, where, dirs_exist_ok=True)
        return where
    return make


@pytest.mark.parametrize("page", pages(REPO), ids=lambda p: p.name)
def test_examples_run(page, workspace_factory, example_env):
    assert example_problems(page, workspace_factory, example_env) == []


@pytest.mark.parametrize("page", pages(REPO), ids=lambda p: p.name)
def test_links_resolve(page):
    assert link_problems(page) == []


def test_every_page_is_reached_from_the_readme():
    linked = {(REPO / m["target"].partition("#")[0]).resolve()
              for m in LINK.finditer((REPO / "README.md").read_text(encoding="utf-8"))}
    docs = [p for p in (REPO / "docs").iterdir() if p.suffix in (".md", ".1")]
    assert [p.name for p in docs if p.resolve() not in linked] == []


def test_checker_finds_a_broken_example_link_and_marker(tmp_path, workspace_factory, example_env):
    """The checks above fail on what they are for: planted in a copy of the
    docs, an example that fails, one that does not parse, a link to a missing
    page, an anchor that is no heading, and a marker without its reason."""
    root = tmp_path / "copy"
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy(REPO / "README.md", root / "README.md")
    planted = root / "docs" / "planted.md"
    planted.write_text("\n".join([
        "# Planted", "",
        "See [the start](getting-started.md), [nowhere](missing.md) and "
        "[no such part](shuffle.md#no-such-heading).", "",
        "```python", "import stoker", "stoker.Loader('data/no-such-shard.tar')", "```", "",
        "<!-- docs-test: parse-only (needs a GPU) -->", "```python", "def broken(:", "```", "",
        "<!-- docs-test: parse-only -->", "```sh", "true", "```", "",
        "```sh", "stoker ls /data/train-{000000..001023}.tar | grep -q .", "```", ""]))
    links = link_problems(planted)
    assert links == ["planted.md:3: missing.md: no such file",
                     "planted.md:3: shuffle.md#no-such-heading: no heading #no-such-heading there"]
    examples = example_problems(planted, workspace_factory, example_env)
    assert len(examples) == 3, examples
    assert examples[0].startswith("planted.md:5: python example exit status 1")
    assert "no-such-shard.tar" in examples[0]
    assert examples[1].startswith("planted.md:11: python example does not parse")
    assert "marker is" in examples[2]
    # The last block ran with the substitution: the README's path reached real shards.
    # And the copy's real pages are still clean, so the failures are the planted ones.
    assert link_problems(root / "docs" / "getting-started.md") == []


def test_python_api_page_is_current():
    """docs/python-api.md is tools/python_api_doc.py's output: change the
    docstring, then regenerate it (the tool's docstring says how)."""
    spec = importlib.util.spec_from_file_location("python_api_doc",
                                                  REPO / "tools" / "python_api_doc.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    committed = (REPO / "docs" / "python-api.md").read_text(encoding="utf-8")
    assert committed == tool.markdown(), "regenerate docs/python-api.md with tools/python_api_doc.py"
