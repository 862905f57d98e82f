"""The typed public API: mypy --strict holds a user's enqueue calls to the task's own
signature (tests/typing/user_code.py marks the lines that must fail)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).parent / "typing" / "user_code.py"


def test_mypy_checks_enqueue_against_the_task_signature():
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental", str(SAMPLE)],
        capture_output=True, text=True, timeout=300,
    )
    errors = {int(m[1]) for m in re.finditer(r"user_code\.py:(\d+): error", run.stdout)}
    lines = SAMPLE.read_text().splitlines()
    expected = {n for n, line in enumerate(lines, 1) if line.endswith("# error")}
    assert errors == expected, run.stdout
    revealed = re.findall(r'Revealed type is "([^"]+)"', run.stdout)
    # a job is typed by its task's result: wait() and wait_async() give that type (an
    # async task's: what its coroutine returns)
    assert revealed == ["deferq.job.Job[None]", "deferq.job.Job[int]", "float",
                        "int", "int"], run.stdout
