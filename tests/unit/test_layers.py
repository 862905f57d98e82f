"""The import graph of src/deferq keeps its floors: each room (a folder, or a module at
the top of the package) stands on a floor, imports only rooms on its floor or below,
nothing below the command line imports it (or click), and no module reaches back up to
one that imports it.

Every import counts, wherever it stands: at module level, under `if TYPE_CHECKING:`
and inside functions. A lazy or typing-only import hides a cycle from the interpreter,
not from a reader: the two modules still cannot be understood, moved or tested apart.
Imports by string (`importlib.import_module`, the backend factory's scheme table) are
not seen; they point down from the factory and cannot close a circle of these edges.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "deferq"

# The floors, lowest first: a room may import rooms of its own floor or of floors below.
# A room is named by its dotted name: a folder holds every module under it, unless a
# folder inside it is a room of its own (deferq.server.api within deferq.server).
FLOORS: list[tuple[str, set[str]]] = [
    ("values", {"deferq.errors", "deferq.backoff", "deferq.codec", "deferq.values", "deferq.job",
                "deferq.context", "deferq.net", "deferq.forks",
                # chunk tasks: the option, the exception, the item codec and what a call means per job
                "deferq.chunks"}),
    ("stores", {"deferq.backends"}),
    ("jobs", {"deferq.middleware", "deferq.limits", "deferq.options", "deferq.task", "deferq.registry",
              "deferq.results", "deferq.observe", "deferq.attempt", "deferq.testing",
              # durable steps: kept by a running job (the worker, deferq.testing), read by the App
              "deferq.steps",
              # encryption at rest: the chain seals and opens with it, the App and the server show with it
              "deferq.encryption"}),
    ("features between jobs", {"deferq.flows", "deferq.schedules"}),
    ("the App", {"deferq", "deferq.app", "deferq.loading"}),
    # upkeep: the one leader's sweeps and schedule ticks, which each kind of process starts
    ("processes", {"deferq.upkeep", "deferq.worker", "deferq.supervisor", "deferq.server.http",
                   "deferq.server.topics"}),
    ("the HTTP service", {"deferq.server", "deferq.server.process", "deferq.server.api", "deferq.server.console"}),
    ("entry points", {"deferq.cli", "deferq.contrib", "deferq.__main__"}),
]
TOP_MODULES, SERVER_TOP_MODULES, ROOM_MODULES = 15, 12, 12  # at most, besides __init__ and __main__

# The command line: the `deferq` command, `python -m deferq` and Django's `manage.py
# deferq`. Only these may import click or one another.
CLI_PACKAGE = "deferq.cli"
CLI_ENTRIES = {"deferq.__main__", "deferq.contrib.django.management.commands.deferq"}


def in_cli_layer(module: str) -> bool:
    return module in CLI_ENTRIES or module == CLI_PACKAGE or module.startswith(CLI_PACKAGE + ".")


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
    assert "deferq.server.topics.signing" in graph["deferq.server.topics.delivery"]  # `from . import signing`
    assert "deferq.app" in graph["deferq.server.topics.delivery"]  # under TYPE_CHECKING
    assert "deferq.supervisor.master" in graph["deferq.cli.run"]  # inside a function


def test_only_the_command_line_imports_click_or_the_command_line():
    _, everything = import_graph()
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in everything.items()
        if not in_cli_layer(module)
        for target in targets
        if target == "click" or target.startswith("click.") or in_cli_layer(target)
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


def room_of(module: str) -> str | None:
    """The room a module stands in: the longest room name that is it or holds it."""
    rooms = [room for _, members in FLOORS for room in members]
    holding = [r for r in rooms if module == r or (r != "deferq" and module.startswith(r + "."))]
    return max(holding, key=len, default=None)


def floor_of(room: str) -> int:
    return next(i for i, (_, members) in enumerate(FLOORS) if room in members)


def test_every_module_stands_in_a_room_and_imports_only_its_floor_or_below():
    graph, _ = import_graph()
    homeless = sorted(m for m in graph if room_of(m) is None)
    assert not homeless, f"modules in no room of FLOORS: {homeless}"

    def floor(module: str) -> int:
        return floor_of(room_of(module))  # type: ignore[arg-type]

    upward = sorted(
        f"{module} ({FLOORS[floor(module)][0]}) imports {target} ({FLOORS[floor(target)][0]})"
        for module, targets in graph.items()
        for target in targets
        if floor(target) > floor(module)
    )
    assert not upward, "imports up a floor:\n  " + "\n  ".join(upward)


def test_the_rooms_import_one_another_without_circles():
    graph, _ = import_graph()
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        home = room_of(module)
        rooms.setdefault(home, set()).update(t for t in map(room_of, targets) if t != home)  # type: ignore[arg-type]
    assert not cycles(rooms)


def test_the_top_of_the_package_and_of_the_server_stay_small():
    """The top of src/deferq is the kernel (the public face, job values, options, tasks,
    the App); every feature, tool and product has a folder. No folder's top outgrows a
    reader's glance."""

    def modules_at(folder: Path) -> list[str]:
        return sorted(p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__"))

    assert len(modules_at(PACKAGE)) <= TOP_MODULES, modules_at(PACKAGE)
    assert len(modules_at(PACKAGE / "server")) <= SERVER_TOP_MODULES, modules_at(PACKAGE / "server")
    crowded = {str(d.relative_to(PACKAGE)): len(modules_at(d)) for d in PACKAGE.rglob("*")
               if d.is_dir() and len(modules_at(d)) > ROOM_MODULES}
    assert not crowded, f"folders with more than {ROOM_MODULES} modules at their top: {crowded}"


# Containers a module fills at import or later and keeps for the process.
MUTABLE = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "deque",
                 "WeakValueDictionary", "WeakKeyDictionary", "WeakSet"}


def test_no_module_keeps_apps_stores_or_waiters():
    """No process-global registry: no module-level container of Apps, of their owners, of
    waiters (a job knows the App that returned it; a call, its task's) or of the stores a
    process uses (who calls out for a store holds its net.policy.ForStore). Caught before:
    job.WAITERS, results._owners, results._last and net.policy._stores."""
    found = []
    for module, path in module_names().items():
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
                continue
            value = node.value
            called = value.func if isinstance(value, ast.Call) else None
            name = getattr(called, "id", None) or getattr(called, "attr", "")
            if not (isinstance(value, MUTABLE) or name in MUTABLE_CALLS):
                continue
            if isinstance(node, ast.AnnAssign):
                said = f"{ast.unparse(node.target)}: {ast.unparse(node.annotation)}"
            else:
                said = ", ".join(ast.unparse(target) for target in node.targets)
            if re.search(r"(?i)\bapps?\b|runtime|wait|owner|origin|stores\b|store_?urls?\b|endpoints", said):
                found.append(f"{module}: {said}")
    assert not found, "module-level state that ties jobs to Apps or keeps stores:\n  " + "\n  ".join(found)


def test_the_consumer_knows_no_feature():
    """The worker and deferq.testing run a job through the middleware chain alone: durable
    steps (steps/) and workflow inputs (flows/) are plug-ins the App installs, so neither
    the worker nor eager mode imports them (each would otherwise keep its own copy of
    their wiring)."""
    graph, _ = import_graph()
    consumers = [m for m in graph if m == "deferq.testing" or m.startswith("deferq.worker")]
    found = sorted(f"{module} imports {target}" for module in consumers for target in graph[module]
                   if room_of(target) in ("deferq.steps", "deferq.flows"))
    assert not found, "the consumer reaches a feature beside the chain:\n  " + "\n  ".join(found)


def test_the_option_schema_and_the_producer_know_no_feature():
    """options.py (the one option schema), task.py (the producer) and registry.py share
    the jobs floor with limits/ but import nothing from it: key templates, rates and
    slots are values (values.py), a task's declared limits are registry.Limited, and a
    fair queue reaches the producer as task.FairKeys (limits/fair.py declares it)."""
    graph, _ = import_graph()
    kernel = ("deferq.options", "deferq.task", "deferq.registry")
    found = sorted(f"{module} imports {target}" for module in kernel for target in graph[module]
                   if room_of(target) == "deferq.limits")
    assert not found, "the kernel reaches into limits/:\n  " + "\n  ".join(found)


def test_no_module_but_the_apps_reads_an_app_private():
    """The floors below the App reach it through its public API and its `runtime`
    (task.Runtime: the store, the settings, the enqueue pipeline), never through a private
    member: no module but app.py reads, on anything but `self`, a name the App keeps
    private, nor the ones it kept before the runtime (`_backend`, `_enqueue_items`)."""
    app_tree = ast.parse((PACKAGE / "app.py").read_text())
    [app_class] = [n for n in app_tree.body if isinstance(n, ast.ClassDef) and n.name == "App"]
    private = {"_backend", "_enqueue_items", "_enqueue_items_async"}
    for node in ast.walk(app_class):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("_") \
                and not node.name.startswith("__"):
            private.add(node.name)
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and isinstance(node.value, ast.Name) and node.value.id == "self":
            private.add(node.attr)
    found = sorted(
        f"{module}:{node.lineno} reads .{node.attr}"
        for module, path in module_names().items() if module != "deferq.app"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in private
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    )
    assert not found, "App privates read outside app.py:\n  " + "\n  ".join(found)
