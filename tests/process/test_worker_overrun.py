"""A plain `deferq worker` (the command, a real process) whose sync job overruns its
timeout keeps serving: the attempt fails as documented, the process restarts itself in
place (same PID) and takes the next jobs, nothing else started. docs/worker.md,
"When a sync job overruns its timeout"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import deferq
from tests.support.supervisor_harness import ROOT, TREE_PATH, wait_until

pytestmark = pytest.mark.timeout(90)

RESTARTED = "restarted in place (pid {pid}, restart {n})"


class PlainWorker:
    """`deferq worker --app tests.support.fixtures:app ...` with its log in a file."""

    def __init__(self, tmp_path: Path, url: str, *options: str, app: str = "tests.support.fixtures:app",
                 cwd: Path = ROOT) -> None:
        self.record, self.log_path = tmp_path / "record.log", tmp_path / "worker.log"
        env = {**os.environ, "DEFERQ_URL": url, "DEFERQ_TEST_RECORD": str(self.record),
               "PYTHONPATH": TREE_PATH}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "deferq", "worker", "--app", app, "--url", url,
                 "--no-schedules", *options],
                env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def recorded(self) -> list[str]:
        return self.record.read_text().splitlines() if self.record.exists() else []

    def restarted(self, times: int) -> bool:
        assert self.process.poll() is None, f"the worker exited {self.process.returncode}:\n{self.log()}"
        return RESTARTED.format(pid=self.process.pid, n=times) in self.log()

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def settled(app: deferq.App, job: deferq.Job, state: str) -> deferq.Job | None:
    now = app.get(job.id)
    return now if now.state == state else None


@pytest.mark.parametrize("store", ["sqlite", "redis", "postgres"])
def test_a_plain_worker_keeps_serving_after_a_sync_job_overruns(store, request, tmp_path):
    """The overrun job (timeout 0.5 s, 2 attempts) fails, is retried by the same worker
    process once it restarted, overruns again and goes dead; jobs enqueued after each
    overrun succeed; the PID never changes; SIGTERM then stops it with exit code 0.
    Before workers restarted in place, the process exited 3 at the first overrun and the
    later jobs waited forever."""
    url = request.getfixturevalue(f"{store}_url")
    app = deferq.App(url)
    worker = PlainWorker(tmp_path, url, "-c", "2", "--grace", "5")
    try:
        hang = app.enqueue("hang", [1], max_attempts=2)
        wait_until(lambda: worker.restarted(1), 30, "the first restart in place")
        first = app.enqueue("record", [2])
        assert wait_until(lambda: settled(app, first, "succeeded"), 30, "a job after the overrun").attempts == 1
        dead = wait_until(lambda: settled(app, hang, "dead"), 30, "the overrun job dead after 2 attempts")
        assert dead.attempts == 2 and "timed out after 0.5s" in dead.error, dead.error
        wait_until(lambda: worker.restarted(2), 30, "the second restart in place")
        second = app.enqueue("record", [3])
        wait_until(lambda: settled(app, second, "succeeded"), 30, "a job after the second overrun")
        assert worker.recorded().count("hang 1") == 2, worker.recorded()
        assert worker.stop() == 0, worker.log()
    finally:
        worker.kill()
        app.close()


def test_the_jobs_held_beside_an_overrun_finish_or_come_back(tmp_path):
    """Beside the overrun: a job that ends within --grace finishes and succeeds; one
    still running at the end of --grace is released (its attempt not counted) and runs
    again from the start once the worker restarted; nothing is lost."""
    url = f"sqlite:///{tmp_path}/held.db"
    app = deferq.App(url)
    short = app.enqueue("record", [1, 0.5])
    long = app.enqueue("record", [2, 3.0])
    hang = app.enqueue("hang", [3], max_attempts=1)
    worker = PlainWorker(tmp_path, url, "-c", "3", "--grace", "1")
    try:
        assert wait_until(lambda: settled(app, hang, "dead"), 30, "the overrun job dead").attempts == 1
        wait_until(lambda: worker.restarted(1), 30, "the restart in place")
        done = wait_until(lambda: settled(app, long, "succeeded"), 30, "the released job to run again")
        assert done.attempts == 1, "a release does not count the attempt"
        assert settled(app, short, "succeeded") is not None
        record = worker.recorded()
        assert (record.count("start 1"), record.count("done 1")) == (1, 1), record
        assert (record.count("start 2"), record.count("done 2")) == (2, 1), record
        assert worker.stop() == 0
    finally:
        worker.kill()
        app.close()


@pytest.mark.parametrize("stop_by", ["signal", "order"])
def test_a_stop_while_the_overrun_winds_down_stops_the_worker_with_0(stop_by, tmp_path):
    """SIGTERM, or a `stop` order (the console's, through the store, heard at a
    heartbeat), after the overrun while a job beside it finishes: the stop wins, no
    restart, exit 0, and the job beside it still finishes."""
    from deferq.worker import orders

    url = f"sqlite:///{tmp_path}/stop.db"
    app = deferq.App(url)
    beside = app.enqueue("record", [1, 3.0])
    app.enqueue("hang", [2])
    worker = PlainWorker(tmp_path, url, "-c", "2", "--grace", "10")
    try:
        wait_until(lambda: "overran its timeout" in worker.log(), 30, "the overrun")
        if stop_by == "signal":
            worker.process.send_signal(signal.SIGTERM)
        else:
            (name,) = app.backend.kv_list("workers")
            orders.give(app.backend, name, "stop", "test")
        assert worker.process.wait(timeout=30) == 0, worker.log()
        assert settled(app, beside, "succeeded") is not None
        assert "restart" not in worker.log().split("overran its timeout", 1)[1]
    finally:
        worker.kill()
        app.close()


def test_once_exits_3_when_its_job_overran_and_burst_carries_on(tmp_path):
    """--once: its one job overran, the attempt failed, exit 3 (no restart). --burst:
    restarts after each overrun and exits 0 once no job is due."""
    url = f"sqlite:///{tmp_path}/modes.db"
    app = deferq.App(url)
    hang = app.enqueue("hang", [1], max_attempts=2)
    once = PlainWorker(tmp_path, url, "--once")
    try:
        assert once.process.wait(timeout=30) == 3, once.log()
    finally:
        once.kill()
    failed = app.get(hang.id)
    assert failed.attempts == 1 and failed.state in ("scheduled", "queued") and "timed out" in failed.error
    later = app.enqueue_many([deferq.Call("record", (i,), {}) for i in range(5)])
    burst = PlainWorker(tmp_path, url, "--burst", "-c", "2")
    try:
        assert burst.process.wait(timeout=60) == 0, burst.log()
    finally:
        burst.kill()
    assert app.get(hang.id).state == "dead" and app.get(hang.id).attempts == 2
    assert all(app.get(job.id).state == "succeeded" for job in later)
    assert RESTARTED.format(pid=burst.process.pid, n=1) in burst.log()
    app.close()


def test_a_restart_that_cannot_start_exits_non_zero(tmp_path):
    """The job that overruns also breaks the tasks' module (a bad deploy under a running
    worker): the restart in place cannot load the app and exits non-zero, never 0, so
    whatever supervises the process sees a failure."""
    (tmp_path / "deploy.py").write_text(
        "import os, pathlib, time\nimport deferq\n"
        "app = deferq.App(os.environ['DEFERQ_URL'])\n\n"
        "@app.task(timeout=0.3)\ndef breaks_the_deploy():\n"
        "    pathlib.Path(__file__).write_text('raise RuntimeError(\"a broken deploy\")\\n')\n"
        "    time.sleep(60)\n"
    )
    url = f"sqlite:///{tmp_path}/deploy.db"
    app = deferq.App(url)
    job = app.enqueue("breaks_the_deploy")
    worker = PlainWorker(tmp_path, url, app="deploy:app", cwd=tmp_path)
    try:
        code = worker.process.wait(timeout=30)
        assert code != 0, worker.log()
        assert "a broken deploy" in worker.log()
    finally:
        worker.kill()
    assert app.get(job.id).attempts == 1 and "timed out" in app.get(job.id).error
    app.close()


def test_a_stop_signal_sent_as_the_worker_restarts_stops_it_with_0(tmp_path):
    """SIGTERM the moment the worker says it restarts: the signal waits for the new image,
    which stops (exit 0) instead of dying of it during its start-up."""
    url = f"sqlite:///{tmp_path}/restarting.db"
    app = deferq.App(url)
    app.enqueue("hang", [1])
    worker = PlainWorker(tmp_path, url)
    try:
        wait_until(lambda: "restarting in place" in worker.log(), 30, "the restart", every=0.005)
        assert worker.stop() == 0, worker.log()
    finally:
        worker.kill()
        app.close()


def test_max_jobs_counts_across_a_restart(tmp_path):
    """--max-jobs 3: the overrun job is one, so the restarted worker runs two more and
    exits 0, leaving the third waiting."""
    url = f"sqlite:///{tmp_path}/max.db"
    app = deferq.App(url)
    hang = app.enqueue("hang", [1], max_attempts=1)
    later = app.enqueue_many([deferq.Call("record", (i,), {}) for i in range(3)])
    worker = PlainWorker(tmp_path, url, "-c", "1", "--max-jobs", "3")
    try:
        assert worker.process.wait(timeout=60) == 0, worker.log()
    finally:
        worker.kill()
    assert app.get(hang.id).state == "dead"
    assert sorted(app.get(job.id).state for job in later) == ["queued", "succeeded", "succeeded"]
    assert RESTARTED.format(pid=worker.process.pid, n=1) in worker.log()
    app.close()


def test_a_quiet_worker_stays_quiet_after_its_restart(tmp_path):
    """Ordered quiet while its job runs, then the job overruns: the restarted worker
    (same PID, a new name) is quiet from its start and takes no job."""
    from deferq.worker import orders

    (tmp_path / "slow.py").write_text(
        "import os, time\nimport deferq\n"
        "app = deferq.App(os.environ['DEFERQ_URL'], lease=1)\n\n"
        "@app.task(timeout=2)\ndef hangs():\n    time.sleep(60)\n\n"
        "@app.task()\ndef fine():\n    pass\n"
    )
    url = f"sqlite:///{tmp_path}/quiet.db"
    app = deferq.App(url)
    app.enqueue("hangs")
    worker = PlainWorker(tmp_path, url, app="slow:app", cwd=tmp_path)

    def status(**want: object) -> dict | None:
        import orjson

        for raw in app.backend.kv_list("workers").values():
            seen = orjson.loads(raw)
            if all(seen.get(k) == v for k, v in want.items()):
                return seen
        return None

    try:
        first = wait_until(lambda: status(pid=worker.process.pid), 30, "the worker's status")
        orders.give(app.backend, first["name"], "quiet", "test")
        wait_until(lambda: status(name=first["name"], quiet=True), 30, "the worker quiet")
        waiting = app.enqueue("fine")
        again = wait_until(lambda: (s := status(pid=worker.process.pid, quiet=True)) and s["name"] != first["name"]
                           and s, 30, "the restarted worker's status")
        assert again["processed"] == 0 and app.get(waiting.id).state == "queued"
        assert worker.stop() == 0
    finally:
        worker.kill()
        app.close()
