"""The typed public API: mypy --strict and pyright (strict) hold a user's enqueue calls
to the task's own signature and a job's result to the task's return type; a schedule's
`every=`, `tz=` and job options, `app.schedules` and `app.limits` are checked, and a task
under `@app.periodic` keeps its signature (tests/support/typing/user_code.py marks the lines that
must fail)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).parents[1] / "support" / "typing" / "user_code.py"
SRC = Path(__file__).parents[2] / "src"
WORKFLOWS = ["str", "float", "list[int]"]  # a chain's, a chord's and a group's wait()


def expected_errors() -> set[int]:
    return {n for n, line in enumerate(SAMPLE.read_text().splitlines(), 1) if line.endswith("# error")}


def test_mypy_checks_enqueue_against_the_task_signature():
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental", str(SAMPLE)],
        capture_output=True, text=True, timeout=300,
    )
    errors = {int(m[1]) for m in re.finditer(r"user_code\.py:(\d+): error", run.stdout)}
    assert errors == expected_errors(), run.stdout
    revealed = re.findall(r'Revealed type is "([^"]+)"', run.stdout)
    # a job is typed by its task's result: wait() and wait_async() give that type (an
    # async task's: what its coroutine returns); a workflow by its last step's
    assert revealed == ["deferq.job.Job[None]", "deferq.job.Job[int]", "float", "int", "int",
                        *WORKFLOWS, "deferq.task.Task[[n: int, label: str], int]"], run.stdout


def test_pyright_checks_the_same_mistakes_and_types(tmp_path):
    """The same file under pyright's strict mode (the checker of VS Code's Pylance)."""
    config = {"typeCheckingMode": "strict", "extraPaths": [str(SRC)], "pythonVersion": "3.11",
              "reportUnusedExpression": False}  # a bare `send.options(...)` line is the point
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    run = subprocess.run(
        [str(Path(sys.executable).parent / "pyright"), "-p", str(tmp_path), "--pythonpath", sys.executable,
         "--outputjson", str(SAMPLE)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    found = json.loads(run.stdout)["generalDiagnostics"]
    errors = {d["range"]["start"]["line"] + 1 for d in found if d["severity"] == "error"}
    assert errors == expected_errors(), run.stdout
    revealed = [re.search(r'is "(.+)"$', d["message"])[1] for d in found if d["severity"] == "information"]
    assert revealed == ["Job[None]", "Job[int]", "float", "int", "int", *WORKFLOWS,
                        "Task[(n: int, label: str), int]"], run.stdout
