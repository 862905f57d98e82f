"""The docs cannot drift from the code.

- Every ```python block of README.md and docs/*.md runs here, as a reader would run it:
  the blocks of one page in order, in one namespace, in a fresh directory (so an App()
  with no URL makes its sqlite:///deferq.db there). A block whose first line names a
  file (`# tasks.py`) is written as that file and imported; one named `# test_*.py` is
  run by pytest. A block that is a fragment (a signature listing, code that needs your
  database or your project) says so on the line before it: `<!-- fragment: why -->`.
- The generated command line reference (docs/hooks/reference.py) lists every command
  of `deferq --help`, and the HTTP reference every operation of the OpenAPI document.
- Every file or module the pages, docstrings and comments point at (`steps/checkpoints.py`,
  `observe/history.History`, `deferq.net.policy.ForStore`) is there: one that moves takes
  its pointers along.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import click
import pytest

import deferq
from deferq.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SRC = Path(deferq.__file__).resolve().parent.parent  # the tree under test's src/

FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(\w*)")  # a fence, also one indented in a list
FRAGMENT = re.compile(r"^<!--\s*fragment\b.*-->\s*$")
FILE_NAME = re.compile(r"^#\s*([\w/]+\.py)\b")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    code: str

    @property
    def file(self) -> str | None:
        found = FILE_NAME.match(self.code)
        return found[1] if found else None


def python_blocks(text: str, page: str) -> tuple[list[Block], int]:
    """The page's runnable python blocks, and how many it marks as fragments."""
    blocks, fragments, lines = [], 0, text.split("\n")
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence[1]))
        if fence[2] == "python":
            before = next((line for line in reversed(lines[:i]) if line.strip()), "")
            if FRAGMENT.match(before.strip()):
                fragments += 1
            else:
                blocks.append(Block(page, i + 1, textwrap.dedent("\n".join(lines[i + 1:end]) + "\n")))
        i = end + 1
    return blocks, fragments


# The runner, in a process of its own per page: each page gets fresh modules and stores.
RUNNER = """
import importlib, json, sys
namespace = {"__name__": "__main__"}
for block in json.load(open(sys.argv[1])):
    if block["file"]:
        if not block["file"].rsplit("/", 1)[-1].startswith("test_"):
            importlib.import_module(block["file"][:-3].replace("/", "."))
    else:
        exec(compile(block["code"], block["where"], "exec"), namespace)
"""


def page_ids() -> list[Path]:
    return [page for page in PAGES if python_blocks(page.read_text(), page.name)[0]]


def run(args: list[str], cwd: Path, **more_env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), str(SRC)]), **more_env}
    env.pop("DEFERQ_URL", None)
    env.pop("DEFERQ_APP", None)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("page", page_ids(), ids=lambda p: p.name)
def test_the_python_blocks_of_a_page_run(page: Path, tmp_path: Path) -> None:
    blocks, _ = python_blocks(page.read_text(), page.relative_to(ROOT).as_posix())
    for block in blocks:
        if block.file:
            (tmp_path / block.file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / block.file).write_text(block.code)
    plan = [{"file": b.file, "code": b.code, "where": f"{b.page}:{b.line + 1}"} for b in blocks]
    (tmp_path / "blocks.json").write_text(json.dumps(plan))
    done = run([sys.executable, "-c", RUNNER, "blocks.json"], tmp_path)
    assert done.returncode == 0, f"a block of {page.name} failed:\n{done.stderr[-3000:]}"
    for test_file in [b.file for b in blocks if b.file and Path(b.file).name.startswith("test_")]:
        # only deferq's plugin, as installed: the other plugins of this venv take seconds to load
        pytest_args = ["-q", "-p", "no:cacheprovider", "-p", "deferq.contrib.pytest_plugin", test_file]
        done = run([sys.executable, "-m", "pytest", *pytest_args], tmp_path, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
        assert done.returncode == 0, f"{test_file} of {page.name} failed:\n{done.stdout[-3000:]}"


def test_the_tour_and_testing_pages_have_blocks_that_run() -> None:
    """The convention is opt-out: a page whose blocks all became fragments would test
    nothing, so the pages a newcomer copies from must keep runnable blocks."""
    runnable = {page.name for page in page_ids()}
    assert {"README.md", "tour.md", "testing.md"} <= runnable


def test_a_fragment_marker_is_seen_and_a_file_block_is_named() -> None:
    text = "x\n\n<!-- fragment: needs your DSN -->\n\n```python\nconnect(DSN)\n```\n\n" \
           "```python\n# tasks.py\nimport deferq\n```\n```sh\nls\n```\n" \
           "- in a list:\n\n  ```python\n  print(1)\n  ```\n"
    blocks, fragments = python_blocks(text, "page.md")
    assert fragments == 1
    assert [(b.line, b.file) for b in blocks] == [(9, "tasks.py"), (18, None)]
    assert blocks[1].code == "print(1)\n"


# `pip install deferq` or `'deferq[redis]'`: from a package index, where deferq is not
INDEX_INSTALL = re.compile(r"pip install\s+(?:-\S+\s+)*['\"]?deferq(?:\[[\w,]+\])?['\"]?(?:[\s`]|$)")


def test_no_page_says_to_install_deferq_from_a_package_index() -> None:
    """deferq is on no package index: a page says to install it from your copy (a path,
    a git URL with `@`, a wheel), never `pip install 'deferq[redis]'`."""
    pages = [*PAGES, ROOT / "examples" / "README.md"]
    found = [f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
             for page in pages for number, line in enumerate(page.read_text().splitlines(), 1)
             if INDEX_INSTALL.search(line) and " @ " not in line]
    assert found == []
    assert INDEX_INSTALL.search("`pip install 'deferq[redis]'`") and INDEX_INSTALL.search("pip install deferq")
    assert not INDEX_INSTALL.search("pip install '/path/to/deferq[redis]'")


# --- the generated reference pages ------------------------------------------------------

def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "docs" / "hooks" / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def every_command(group: click.Group, path: str = "deferq") -> set[str]:
    """The commands `deferq --help` and each group's --help list, found by the help text."""
    ctx = click.Context(group, info_name=path)
    names = {path}
    for name in group.list_commands(ctx):
        sub = group.get_command(ctx, name)
        assert sub is not None
        names |= every_command(sub, f"{path} {name}") if isinstance(sub, click.Group) else {f"{path} {name}"}
    return names


def test_the_cli_reference_lists_every_command_with_its_help() -> None:
    page = reference().cli_page()
    commands = every_command(main)
    assert {"deferq worker", "deferq dead retry", "deferq token create", "deferq run"} <= commands
    for path in commands:
        assert f"## `{path}`" in page, f"{path} is missing from the CLI reference"
        assert f"Usage: {path} [OPTIONS]" in page
    # each option of a command, as its --help names it
    assert "--concurrency" in page and "--older-than" in page and "--scope" in page


def test_the_http_reference_lists_every_operation_with_its_scope() -> None:
    from deferq.server.app import full_document

    page = reference().http_page()
    for path, operations in full_document()["paths"].items():
        for method in operations:
            assert f"### `{method.upper()} {path}`" in page
    assert "- **Scope:** `producer`" in page and "- **Scope:** none (no token)" in page


def test_the_python_reference_documents_every_public_name() -> None:
    page = reference().python_page()
    for name in deferq.__all__:
        assert f"::: deferq.{name}" in page
    assert "::: deferq.testing" in page


# --- the docs extra: what `make docs` may import on a fresh clone ----------------------

# Runs the reference hook's pages with only what `pip install -e '.[docs]'` installs
# importable: a top-level module of any other installed distribution is refused.
ONLY_THE_DOCS_EXTRA = """
import importlib.util, json, sys
from importlib.metadata import packages_distributions
allowed = set(json.loads(sys.argv[1]))
owners = packages_distributions()

class Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        dists = {d.lower().replace("_", "-") for d in owners.get(top, ())}
        if dists and not dists & allowed:
            raise ModuleNotFoundError(f"No module named {top!r} (not in the docs extra)", name=top)
        return None

sys.meta_path.insert(0, Refuse())
spec = importlib.util.spec_from_file_location("docs_reference", sys.argv[2])
reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference)
for page in (reference.cli_page, reference.python_page, reference.http_page):
    assert page()
"""


def extra_closure(extras: set[str]) -> set[str]:
    """The distributions `pip install -e '.[extras]'` installs: deferq's own requirements
    read from this tree's pyproject.toml, theirs from what is installed here."""
    import tomllib
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def requirements(name: str, wanted: frozenset[str]) -> list[Requirement]:
        if name == "deferq":
            lines = project["dependencies"] + [r for e in wanted for r in project["optional-dependencies"][e]]
            reqs = [Requirement(line) for line in lines]
            return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]
        try:
            reqs = [Requirement(line) for line in requires(name) or []]
        except PackageNotFoundError:
            return []
        return [r for r in reqs
                if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in wanted or {""})]

    found: set[str] = set()
    todo, seen = [("deferq", frozenset(extras))], set()
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) not in seen:
            seen.add((name, wanted))
            found.add(name)
            todo += [(canonicalize_name(r.name), frozenset(r.extras)) for r in requirements(name, wanted)]
    return found


def test_the_reference_pages_build_with_the_docs_extra_alone() -> None:
    """`make docs` on a fresh clone installs `.[docs]` only: the reference pages, made
    from the code, must import nothing that extra leaves out (starlette, redis)."""
    allowed = sorted(extra_closure({"docs"}))
    done = run([sys.executable, "-c", ONLY_THE_DOCS_EXTRA, json.dumps(allowed),
                str(ROOT / "docs" / "hooks" / "reference.py")], ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_schedules_page_prints_what_it_says(tmp_path: Path) -> None:
    """docs/schedules.md shows what its examples print (a `# ...` line under a print):
    its blocks run, and each shown line is printed, in order."""
    page = ROOT / "docs" / "schedules.md"
    blocks, _ = python_blocks(page.read_text(), "docs/schedules.md")
    shown = [line.strip()[2:] for b in blocks for before, line in zip(b.code.splitlines(), b.code.splitlines()[1:])
             if before.lstrip().startswith("print(") and line.lstrip().startswith("# ")]
    assert len(shown) >= 2
    plan = [{"file": b.file, "code": b.code, "where": f"{b.page}:{b.line + 1}"} for b in blocks]
    (tmp_path / "blocks.json").write_text(json.dumps(plan))
    done = run([sys.executable, "-c", RUNNER, "blocks.json"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = iter(done.stdout.splitlines())
    assert all(any(line == said for line in printed) for said in shown), (shown, done.stdout)


# -- pointers to files and modules ------------------------------------------------------------

# `server/topics/topic.py`, `tests/process/test_docs.py`, `policy.py` (a name unique enough to find)
FILE_POINTER = re.compile(r"(?<![\w./*-])((?:[\w*-]+/)*[\w*-]+\.py)\b")  # `tests/*/test_x_*.py` too
# `observe/history.History`: a module by its path, then a name in it
PATH_AND_NAME = re.compile(r"(?<![\w./-])((?:\w+/)+\w+)\.(?!(?:py|md|sql|lua|js|css|html|toml|json|txt)\b)"
                           r"[A-Za-z_]")
# `deferq.steps.checkpoints.JobSteps`, or without the `deferq.` when it starts at a room
# (`steps.checkpoints.JobSteps`); with one dot they may be logger or task names
PACKAGE = ROOT / "src" / "deferq"
ROOMS = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
DOTTED = re.compile(r"(?<![\w./-])((?:deferq|" + "|".join(ROOMS) + r")(?:\.\w+){2,})")
# files that a page or a docstring tells the reader to make, not deferq's
READERS_FILES = {"yourapp/tasks.py", "deferq.d.ts"}


def repository_files() -> list[str]:
    folders = ("src", "tests", "docs", "examples", "bench", "scripts")
    found = [p for folder in folders for p in (ROOT / folder).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and "node_modules" not in p.parts]
    return [p.relative_to(ROOT).as_posix() for p in [*found, *ROOT.glob("*")] if p.is_file()]


def prose_and_strings(path: Path) -> tuple[str, set[str]]:
    """What a reader reads as text (a page; a module's docstrings and comments), and the
    strings a module's code uses: a logger, task or namespace name (`deferq.http.request`)
    written in prose is one of those, not a module."""
    text = path.read_text()
    if path.suffix == ".md":
        return text, set()
    said = [token.string for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type == tokenize.COMMENT]
    strings, docstrings = set(), set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
                said.append(str(first.value.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            strings.add(node.value)
    return "\n".join(said), strings


def defines(module: Path, name: str) -> bool:
    """Whether a module (or package) binds `name` at its top, or holds a module of that name."""
    folder = module.parent if module.name == "__init__.py" else None
    if folder is not None and ((folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists()):
        return True
    bound: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {target.id for target in targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return name in bound


def dotted_exists(dotted: str) -> bool:
    """`deferq.a.b.Name`: the longest module prefix below the package exists and binds the
    next part (or that prefix is the whole name)."""
    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        base = PACKAGE.parent.joinpath(*parts[:end])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if module.exists():
            return end == len(parts) or defines(module, parts[end])
    return False


def test_every_file_and_module_named_in_the_docs_and_docstrings_exists() -> None:
    """A module that moves takes its pointers along: each `name.py` (with or without its
    folders), `folder/module.Name` and `deferq.module.Name` in docs/, README.md and the
    docstrings and comments of src/deferq names a file or module that is there."""
    files = repository_files()
    tails = {"/".join(parts[i:]) for parts in (f.split("/") for f in files) for i in range(len(parts))}
    read = {source: prose_and_strings(source) for source in [*PAGES, *sorted(PACKAGE.rglob("*.py"))]}
    in_code = {name.rsplit(".", i)[0] for _, strings in read.values() for name in strings
               for i in range(name.count(".") + 1)}
    stale = set()
    for source, (text, _) in read.items():
        where = source.relative_to(ROOT).as_posix()
        written = {block.file for block in python_blocks(text, where)[0] if block.file}
        stale |= {f"{where}: {name}" for name in FILE_POINTER.findall(text)
                  if name not in tails | written | READERS_FILES
                  and not ("*" in name and fnmatch.filter(files, "*" + name))}
        stale |= {f"{where}: {path}.py" for path in PATH_AND_NAME.findall(text) if path + ".py" not in tails}
        stale |= {f"{where}: {name}" for name in DOTTED.findall(text) if name not in in_code | READERS_FILES
                  and not dotted_exists(name if name.startswith("deferq.") else "deferq." + name)}
    assert not stale, "pointers to files or modules that are not there:\n  " + "\n  ".join(sorted(stale))
