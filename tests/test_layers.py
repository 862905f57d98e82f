"""The import graph of src/deferq keeps its floors: nothing below the command line
imports it (or click), and no module reaches back up to one that imports it.

Every import counts, wherever it stands: at module level, under `if TYPE_CHECKING:`
and inside functions. A lazy or typing-only import hides a cycle from the interpreter,
not from a reader: the two modules still cannot be understood, moved or tested apart.
Imports by string (`importlib.import_module`, the backend factory's scheme table) are
not seen; they point down from the factory and cannot close a circle of these edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "deferq"

# The command line: deferq/cli.py, `python -m deferq`, and the bodies of the commands
# that deferq/cli.py registers. Only these may import click or one another.
# command-line entry points: the only modules that may import click or deferq.cli
CLI_LAYER = {"deferq.cli", "deferq.__main__", "deferq.server.cli", "deferq.supervisor.cli",
             "deferq.contrib.django.management.commands.deferq"}  # fmt: skip


def module_names() -> dict[str, Path]:
    """deferq's modules by dotted name (a package by its own name, for its __init__.py)."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["deferq", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported_names(module: str, path: Path, modules: set[str]) -> set[str]:
    """Every module `module` imports, internal ones resolved to the deferq module named."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            # `from pkg import name` imports the submodule pkg.name when there is one.
            submodules = {f"{source}.{a.name}" for a in node.names} & modules
            found.update(submodules or {source})
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(deferq module -> deferq modules it imports, deferq module -> every name it imports)."""
    paths = module_names()
    everything = {name: imported_names(name, path, set(paths)) for name, path in paths.items()}
    internal = {name: {t for t in targets if t in paths and t != name} for name, targets in everything.items()}
    return internal, everything


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each with
    one circle through it spelled out, sorted for a stable report."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def circle_through(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{component} is no cycle")


def test_the_graph_sees_every_kind_of_import():
    """The walk finds lazy and typing-only imports too, and resolves relative ones."""
    graph, _ = import_graph()
    assert "deferq.job" in graph["deferq.app"]  # module level, `from .job import`
    assert "deferq.backends.base" in graph["deferq.backends.memory"]  # `from .base import`
    assert "deferq.errors" in graph["deferq.supervisor.config"]  # `from ..errors import`
    assert "deferq.server.signing" in graph["deferq.server.delivery"]  # `from . import signing`
    assert "deferq.app" in graph["deferq.supervisor.periodic"]  # under TYPE_CHECKING
    assert "deferq.supervisor.master" in graph["deferq.supervisor.cli"]  # inside a function


def test_only_the_command_line_imports_click_or_the_command_line():
    _, everything = import_graph()
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in everything.items()
        if module not in CLI_LAYER
        for target in targets
        if target == "click" or target.startswith("click.") or target in CLI_LAYER
    )
    assert not offenders, "below the command line:\n  " + "\n  ".join(offenders)


def test_the_import_graph_has_no_cycles():
    graph, _ = import_graph()
    found = cycles(graph)
    report = [
        f"{' <-> '.join(component)}\n    e.g. {' -> '.join(circle_through(graph, component))}"
        f"\n    edges: {', '.join(f'{a} -> {b}' for a in component for b in sorted(graph[a] & set(component)))}"
        for component in found
    ]
    print("\n".join(report) or "no cycles")
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(report)
