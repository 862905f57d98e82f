"""bench/rate_limit.py runs: worker processes sharing one rate keep it, and wait for their
turns near idle. (Rates in workers of one process, on every store: tests/contract/test_rate_limits.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_the_rate_bench_keeps_its_limit_with_idle_workers():
    """`python -m bench.rate_limit`, short: 4 worker processes share "4/s". Counted by
    start time, a window may catch one run more (a run starts a few ms after its turn,
    more on a loaded machine); the workers, waiting for turns, stay near idle."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "bench.rate_limit", "--rate", "4/s", "--seconds", "5"],
                          capture_output=True, text=True, timeout=120, cwd=root)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    busiest = re.search(r"busiest sliding window of 1 s: (\d+) runs", done.stdout)
    assert busiest and int(busiest[1]) <= 4 + 1, done.stdout
    shares = [float(x) for x in re.findall(r"\(([0-9.]+)% of a core each\)", done.stdout)]
    assert shares and shares[0] < 30, done.stdout  # start-up included: ~0.3 s of CPU each
