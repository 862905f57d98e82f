"""What only a fresh interpreter shows: importing deferq hooks nothing into the import
system, and the pytest plugin guards a project's own pytest run. (The import graph's other
rules and deferq.testing are in the unit tier: tests/unit/test_layers.py,
tests/unit/test_testing_helpers.py.)"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from tests.support.supervisor_harness import TREE_PATH
from tests.unit.test_layers import module_names


def test_no_module_hooks_the_import_system():
    """deferq adds no import hook (a finder on `sys.meta_path` or `sys.path_hooks`): a module
    is found where it lives, under one name. Caught before: a finder that kept eight old
    module names (`deferq.otel`, `deferq.alerts`, ...) alive."""
    found = [f"{module}: {ast.unparse(node)}"
             for module, path in module_names().items()
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr in ("meta_path", "path_hooks")]
    assert not found, "import hooks:\n  " + "\n  ".join(found)
    code = (
        "import sys\n"
        "before = list(sys.meta_path), list(sys.path_hooks)\n"
        "import deferq\n"
        "assert (list(sys.meta_path), list(sys.path_hooks)) == before\n"
        "assert not hasattr(deferq, 'otel')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# -- the plugin's guard: a test that forgot deferq_isolate does not write to a real store

FORGETFUL_TESTS = '''
import pytest

import deferq

app = deferq.App("sqlite:///deferq.db")  # the project's App: its store is a file in the project


@app.task()
def send() -> None:
    pass


def test_forgot_to_isolate():
    with pytest.raises(deferq.ConfigError, match="outside pytest's temporary directory: isolate"):
        send.enqueue()


def test_isolated(deferq_isolate):
    deferq_isolate(app)
    send.enqueue()


def test_a_store_in_tmp_path(tmp_path):
    deferq.App(f"sqlite:///{tmp_path}/jobs.db").enqueue("send")


@pytest.mark.deferq_file_store
def test_opted_in(tmp_path):
    send.enqueue()
'''


def test_the_plugin_refuses_a_file_store_outside_tmp_path_without_the_marker(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_forgetful.py").write_text(FORGETFUL_TESTS)
    env = {**os.environ, "PYTHONPATH": TREE_PATH, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # only deferq's
    env.pop("DEFERQ_URL", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-p", "deferq.contrib.pytest_plugin", f"--basetemp={tmp_path / 'base'}",
                               "test_forgetful.py", *args],
                              cwd=project, env=env, capture_output=True, text=True, timeout=120)

    unmarked = run("-m", "not deferq_file_store")
    assert unmarked.returncode == 0 and "3 passed" in unmarked.stdout, unmarked.stdout + unmarked.stderr
    assert not (project / "deferq.db").exists(), "a test wrote to the project's store"
    marked = run("-m", "deferq_file_store")
    assert marked.returncode == 0 and "1 passed" in marked.stdout, marked.stdout + marked.stderr
    assert (project / "deferq.db").exists()
