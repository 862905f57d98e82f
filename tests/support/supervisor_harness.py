"""Running real `deferq run` masters in tests: start, watch their children and logs, stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import deferq
from deferq.job import JobState

ROOT = Path(__file__).resolve().parents[2]
# PYTHONPATH of the processes a test starts: this tree's deferq (not another checkout's
# that an editable install names) and its tests
TREE_PATH = os.pathsep.join((str(ROOT / "src"), str(ROOT)))
FIXTURES = "tests.support.fixtures_supervisor:app"


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    """Poll `check` until it returns something true; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class Master:
    """One `deferq run` process with its own config file and log file."""

    def __init__(self, tmp_path: Path, url: str, body: str, name: str = "master") -> None:
        self.url = url
        self.config = tmp_path / f"{name}.toml"
        self.config.write_text(f'url = "{url}"\napp = "{FIXTURES}"\n{body}')
        self.log_path = tmp_path / f"{name}.log"
        self.record = tmp_path / "record.txt"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Master:
        env = {**os.environ, "PYTHONPATH": TREE_PATH, "DEFERQ_TEST_RECORD": str(self.record)}
        env.pop("DEFERQ_URL", None)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "deferq", "run", "--config", str(self.config)],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 20.0) -> None:
        wait_until(lambda: text in self.log(), timeout, f"{text!r} in the master's log")

    def children(self) -> dict[int, str]:
        """pid -> process title of this master's live children."""
        out = subprocess.run(["ps", "-o", "pid=,stat=,args=", "--ppid", str(self.pid)],
                             capture_output=True, text=True).stdout
        found = {}
        for line in out.splitlines():
            pid, stat, title = line.strip().split(None, 2)
            if not stat.startswith("Z"):
                found[int(pid)] = title
        return found

    def title(self) -> str:
        return Path(f"/proc/{self.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def stop(self, timeout: float = 40.0) -> int:
        """SIGTERM and wait for the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        """Clean-up after a failed test: no process may outlive it."""
        if self.process is not None and self.process.poll() is None:
            for pid in self.children():
                os.kill(pid, signal.SIGKILL)
            self.process.kill()
            self.process.wait(10)


def job_states(app: deferq.App, queue: str | None = None) -> Counter[str]:
    counts: Counter[str] = Counter()
    for stats_queue, stats in app.queue_stats().items():
        if queue is None or stats_queue == queue:
            counts.update({state: n for state, n in stats.counts.items() if n})
    return counts


def all_jobs(app: deferq.App) -> list[deferq.Job]:
    return [job for state in JobState for job in app.list_jobs(state, limit=100_000)]


def runs(record: Path) -> list[tuple[str, str, int]]:
    """(task, job id, attempt) per run recorded by tests/support/fixtures_supervisor.py."""
    if not record.exists():
        return []
    lines = record.read_text().splitlines()
    return [(task, job_id, int(attempt)) for task, job_id, attempt in map(str.split, lines)]


def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """For a `url` fixture: a SQLite file by default; with `every_store` also the
    shared Redis (`DEFERQ_TEST_REDIS`, its own database) under a key prefix of its own (deleted afterwards),
    and the emptied PostgreSQL and MySQL stores of tests/support/stores/."""
    kind = getattr(request, "param", "sqlite")
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path}/deferq.db"
        return
    if kind != "redis":
        yield request.getfixturevalue(f"{kind}_url")
        return
    from tests.conftest import need_service
    from tests.support.stores.redis import delete_prefix, shared_answers, shared_url, shared_where, unique_prefix

    if not shared_answers():
        need_service("Redis", f"nothing answers at {shared_where()} (DEFERQ_TEST_REDIS)")
    prefix = unique_prefix()
    yield shared_url(prefix=prefix)
    delete_prefix(prefix)


#: run a test on every kind of store: ``@every_store`` with a `url` fixture
every_store = pytest.mark.parametrize("url", ["sqlite", "redis", "postgres", "mysql"], indirect=True)
