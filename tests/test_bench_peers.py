"""bench/peers: the peer comparison runs end to end, fails per cell, and cleans up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from bench.peers import report, run, stores

from tests.conftest import need_service
from tests.stores.redis import shared_url, shared_where

ROOT = Path(__file__).resolve().parents[1]
# db 10 of the shared Redis (DEFERQ_TEST_REDIS): the benchmark flushes its database, so not
# the suite's own, and not the benchmark's db 9 (a real run may be going on)
TEST_REDIS = shared_url(db=10)


def test_a_peer_that_cannot_load_fails_in_its_row_only():
    peer = run.load_peer("no_such_library", postgres=False)
    cells = run.run_peer(peer, run.workloads.Sizes(jobs=10, pickups=1))
    assert all(isinstance(c, run.Failure) for c in cells.values())
    line = report.row(peer.label, {m: cells.get(m) for m in run.METRICS}, None)
    assert line[1].startswith("failed: ModuleNotFoundError") and len(line) == len(report.COLUMNS)


def test_medians_skip_failed_runs():
    failed = run.Failure("TimeoutError: stalled")
    assert run.median_cell([3.0, failed, 1.0]) == 2.0
    assert run.median_cell([(1.0, 9.0), (3.0, 7.0)]) == (2.0, 8.0)
    assert run.median_cell([failed, failed]) == failed
    assert run.median_cell([None]) is None


def test_only_its_own_databases_are_dropped():
    with pytest.raises(ValueError, match="only bench_peers"):
        stores.recreate_database("postgresql://postgres@127.0.0.1:5432/test")


def leftover_workers() -> list[int]:
    """Processes still running with the test's benchmark environment."""
    marker = f"BENCH_REDIS_URL={TEST_REDIS}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(int(pid))
        except OSError:
            pass
    return found


def need_test_redis() -> None:
    try:
        redis.Redis.from_url(TEST_REDIS).ping()
    except redis.ConnectionError as exc:
        need_service(f"Redis at {shared_where()} (DEFERQ_TEST_REDIS)", str(exc))


def run_rows(tmp_path: Path, peers: list[str], timeout: float) -> list[str]:
    """A small run of `peers` (one run, 300 jobs, 10 pickups): their table rows (no "A vs
    raw" column unless raw is among them)."""
    output = tmp_path / "peers.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.peers.run", "--only", ",".join(peers), "--jobs", "300",
         "--runs", "1", "--pickups", "10", "--output", str(output)],
        cwd=ROOT, env={**os.environ, "BENCH_REDIS_URL": TEST_REDIS},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line for line in output.read_text().splitlines() if line.startswith(tuple(f"| {p}" for p in peers))]
    assert len(rows) == len(peers) and not any("failed" in row for row in rows), rows
    assert leftover_workers() == []
    return rows


@pytest.mark.slow
def test_raw_and_deferq_rows_on_redis(tmp_path):
    need_test_redis()
    rows = run_rows(tmp_path, ["raw", "deferq"], timeout=100)
    assert rows[0].split("|")[3].strip() == "1.00x"  # A vs raw, for raw itself


@pytest.mark.slow
def test_saq_and_taskiq_rows_on_redis(tmp_path):
    """The two asyncio peers (in the `dev` extra too): every workload but the batch call,
    which neither has, runs to a number."""
    need_test_redis()
    for row in run_rows(tmp_path, ["saq", "taskiq"], timeout=110):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[2] == "–" and "/" in cells[4] and "/" in cells[5], row  # no A batch; C, D measured


@pytest.mark.slow
def test_speed_figures_print_ratios_to_their_raw_references():
    """bench/speed.py (make bench-speed): a small run of the quick figures, one table."""
    need_test_redis()
    done = subprocess.run(
        [sys.executable, "-m", "bench.speed", "--runs", "1", "--scale", "0.02",
         "--only", "enqueue,batch,memory,sqlite"],
        cwd=ROOT, env={**os.environ, "BENCH_REDIS_URL": TEST_REDIS, "BENCH_SPEED_REDIS_URL": TEST_REDIS},
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "x |" in line]
    assert len(rows) == 4, done.stdout
    assert all(float(row.split("|")[4].strip().rstrip("x")) > 0 for row in rows)
