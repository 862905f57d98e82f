"""bench/peers: the peer comparison runs end to end, fails per cell, and cleans up."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.peers import report, run, stores

from bench import machine
from tests.support.stores.redis import RedisServer, _need_redis_server

# Its tests share a module fixture: one xdist worker runs them all and builds it once.
pytestmark = pytest.mark.xdist_group("bench_peers")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of the module's own: the benchmarks flush their database, so never
    one of a server the suite was given."""
    _need_redis_server()
    server = RedisServer(tmp_path_factory.mktemp("bench-redis"), None, "--appendonly", "no").start()
    try:
        yield f"redis://127.0.0.1:{server.port}/0"
    finally:
        server.stop()


def test_a_peer_that_cannot_load_fails_in_its_row_only():
    peer = run.load_peer("no_such_library", "redis")
    cells = run.run_peer(peer, run.workloads.Sizes(jobs=10, pickups=1))
    assert all(isinstance(c, run.Failure) for c in cells.values())
    line = report.row(peer.label, {m: cells.get(m) for m in run.METRICS}, {}, None, None)
    assert line[1].startswith("failed: ModuleNotFoundError") and len(line) == len(report.COLUMNS)


def figure(cell: str) -> str:
    """A table cell without the load beside it: '1,234 [0.62]' -> '1,234'."""
    return cell.strip().split(" [")[0]


def test_a_peer_ratio_measured_above_load_1_is_marked():
    cells = {"a": 9_000.0, "b": 8_000.0}
    loads: dict[str, float | None] = {"a": 3.0, "b": 0.5}
    line = report.row("deferq", {m: cells.get(m) for m in run.METRICS}, loads, 10_000.0, 0.4)
    assert line[1:3] == ["9,000 [3.00]", "0.90x* [3.00]"] and line[4] == "8,000 [0.50]", line
    quiet = report.row("deferq", {m: cells.get(m) for m in run.METRICS}, {"a": 0.7}, 10_000.0, 0.4)
    assert quiet[2] == "0.90x [0.70]", quiet
    drain = {"deferq": 30_000.0, "raw": 300_000.0, "ratio": 0.1, "startup_deferq": 1.0, "startup_raw": 0.2,
             "load": 3.0}
    assert "| ratio, deferq / raw (target >= 0.15x) | 0.10x* | | 3.00 |" in report.drain_table(drain, 1000)
    assert machine.footnote([0.4, 3.0]) == ["* measured at load 3.00 > 1: not a quiet-machine figure"]
    assert machine.footnote([1.5, 3.0]) == ["* measured at load 1.50-3.00 > 1: not a quiet-machine figure"]
    assert machine.footnote([0.4, 1.0]) == []


def test_a_speed_ratio_measured_above_load_1_is_marked(monkeypatch):
    monkeypatch.setenv("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")  # what bench.speed sets if unset
    speed = importlib.import_module("bench.speed")
    text = speed.render({"enqueue": {"deferq": 9_000.0, "raw": 10_000.0, "ratio": 0.9, "load": 3.0},
                         "batch": {"deferq": 90_000.0, "raw": 100_000.0, "ratio": 0.9, "load": 0.5}}, 1)
    assert machine.describe() in text.splitlines()[0]
    enqueue, batch = (line for line in text.splitlines() if line.startswith("| Redis"))
    assert enqueue.endswith("| 0.90x* | >= 0.9 | met | 3.00 |"), enqueue
    assert batch.endswith("| 0.90x | >= 0.8 | met | 0.50 |"), batch
    assert text.endswith("\n* measured at load 3.00 > 1: not a quiet-machine figure")
    calm = speed.render({"batch": {"deferq": 90_000.0, "raw": 100_000.0, "ratio": 0.9, "load": 0.5}}, 1)
    assert "*" not in calm


def test_medians_skip_failed_runs():
    failed = run.Failure("TimeoutError: stalled")
    assert run.median_cell([3.0, failed, 1.0]) == 2.0
    assert run.median_cell([(1.0, 9.0), (3.0, 7.0)]) == (2.0, 8.0)
    assert run.median_cell([failed, failed]) == failed
    assert run.median_cell([None]) is None


def test_only_its_own_databases_are_dropped():
    with pytest.raises(ValueError, match="only bench_peers"):
        stores.recreate_database("postgresql://postgres@127.0.0.1:5432/test")


def leftover_workers(bench_url: str) -> list[int]:
    """Processes still running with the test's benchmark environment."""
    marker = f"BENCH_REDIS_URL={bench_url}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(int(pid))
        except OSError:
            pass
    return found


def run_rows(tmp_path: Path, bench_url: str, peers: list[str], timeout: float, *store: str) -> list[str]:
    """A small run of `peers` (one run, 300 jobs, 10 pickups, 100 jobs due at once) on `store` (Redis unless
    `--sqlite` or `--postgres`): their table rows (no "A vs raw" column unless raw is
    among them)."""
    output = tmp_path / "peers.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.peers.run", *store, "--only", ",".join(peers), "--jobs", "300",
         "--runs", "1", "--pickups", "10", "--delayed", "100", "--drain-jobs", "300",
         "--output", str(output)],
        cwd=ROOT, env={**os.environ, "BENCH_REDIS_URL": bench_url},
        capture_output=True, text=True, timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in output.read_text().splitlines() if line.startswith(tuple(f"| {p}" for p in peers))]
    assert len(rows) == len(peers) and not any("failed" in row for row in rows), rows
    assert leftover_workers(bench_url) == []
    return rows


@pytest.mark.slow
def test_raw_and_deferq_rows_on_redis(tmp_path, bench_redis):
    rows = run_rows(tmp_path, bench_redis, ["raw", "deferq"], timeout=150)
    assert figure(rows[0].split("|")[3]).rstrip("*") == "1.00x"  # A vs raw, for raw itself
    assert all(re.search(r" \[\d+\.\d\d\]$", cell.strip()) for cell in rows[1].strip("| ").split("|")[1:]), rows
    cpu = [float(figure(row.split("|")[-2]).replace(",", "")) for row in rows]  # B's CPU, measured for both
    # measured for both: 300 jobs may spend under one 10 ms tick of /proc's CPU count (deferq's worker
    # spends ~50 µs a job: ~15 ms, one tick or none), so 0 is a reading too
    assert cpu[0] >= 0 and cpu[1] >= 0, rows
    # the drains ran too: 300 jobs may drain within the start-up's noise, which the table says
    table = (tmp_path / "peers.md").read_text()
    assert "| 2 `deferq worker --burst`, the command line's defaults |" in table or "too few jobs" in table


@pytest.mark.slow
def test_deferq_row_on_sqlite_and_its_files_removed(tmp_path, bench_redis):
    (row,) = run_rows(tmp_path, bench_redis, ["deferq"], 100, "--sqlite")
    assert row.startswith("| deferq (SQLite) |") and "/" in row.split("|")[5], row  # C measured
    assert not stores.SQLITE_DIR.exists() or not any(stores.SQLITE_DIR.glob("deferq.db*"))


@pytest.mark.slow
def test_saq_and_taskiq_rows_on_redis(tmp_path, bench_redis):
    """The two asyncio peers (in the `dev` extra too): every workload but the batch call,
    which neither has, runs to a number."""
    for row in run_rows(tmp_path, bench_redis, ["saq", "taskiq"], timeout=110):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[2] == "–" and "/" in cells[4] and "/" in cells[5], row  # no A batch; C, D measured


@pytest.mark.slow
def test_speed_figures_print_ratios_to_their_raw_references(bench_redis):
    """bench/speed.py (make bench-speed): a small run of the quick figures, one table."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.speed", "--runs", "1", "--scale", "0.02",
         "--only", "enqueue,batch,memory,sqlite"],
        cwd=ROOT, env={**os.environ, "BENCH_REDIS_URL": bench_redis, "BENCH_SPEED_REDIS_URL": bench_redis},
        capture_output=True, text=True, timeout=100,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("bench/speed.py, ") and machine.describe() in done.stdout, done.stdout
    rows = [line for line in done.stdout.splitlines() if re.match(r"\| .* \| \d+\.\d\dx\*? \|", line)]
    assert len(rows) == 4, done.stdout
    assert all(float(row.split("|")[4].strip().rstrip("*x")) > 0 for row in rows)
    assert all(re.search(r"\| \d+\.\d\d \|$", row) for row in rows), rows  # the load beside each
