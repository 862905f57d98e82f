"""`make soak` in miniature: bench/soak.py with a few thousand jobs and kills every
0.5-1 s, so the script keeps working (the real soak, 100,000 jobs, is not part of
`make test`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_a_short_soak_loses_nothing_and_stays_within_the_bound():
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--jobs", "10000", "--kill-min", "0.5", "--kill-max", "1",
         "--lease", "2", "--concurrency", "4", "--seed", "7", "--timeout", "120", "--json"],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["lost"] == 0 and result["never_ran"] == 0 and not result["timed_out"], result
    assert result["kills"] >= 1, result
    assert result["most_held"] <= result["bound_per_kill"] == 8, result
    assert result["most_reruns_after_one_kill"] <= 8 and result["reruns"] <= result["bound"], result
