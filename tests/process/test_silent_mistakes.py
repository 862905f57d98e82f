"""A newcomer's mistakes each get their sentence where they are made: a lambda as a task,
a wait on a queue no worker serves, a worker started away from the project; and a
command whose reader leaves (`deferq jobs | head -1`) ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import deferq
from deferq.worker import Worker, WorkerConfig


def test_a_lambda_task_is_refused_at_decoration():
    app = deferq.App("memory://")
    with pytest.raises(deferq.ConfigError, match="a task needs a named module-level function the worker can"):
        app.task()(lambda x: x)
    with pytest.raises(deferq.ConfigError, match="named module-level function"):
        app.task(queue="q")(lambda: None)
    assert app.tasks == {}
    named = app.task(name="double")(lambda x: x * 2)  # a name the worker finds it by: fine
    assert named.name == "double"


def heartbeat_of(app: deferq.App, worker: Worker, timeout: float = 10.0) -> None:
    """Returns once the worker's heartbeat is in the store (its first comes at start)."""
    deadline = time.monotonic() + timeout
    while app.backend.kv_get("workers", worker.config.name) is None:
        assert time.monotonic() < deadline, "the worker never published its heartbeat"
        time.sleep(0.01)


@pytest.mark.parametrize("store_url", ["sqlite", "redis", "postgres"], indirect=True)
def test_a_wait_that_times_out_says_no_worker_serves_the_queue(app):
    @app.task(queue="reports")
    def report() -> None:
        return None

    with pytest.raises(TimeoutError) as timed_out:
        report.enqueue().wait(timeout=0.2)
    assert "no worker serves its queue 'reports' (no worker is online)" in str(timed_out.value)
    assert "deferq worker -q reports" in str(timed_out.value)

    worker = Worker(app, WorkerConfig(queues=("emails",), concurrency=1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        heartbeat_of(app, worker)
        with pytest.raises(TimeoutError, match="the workers online serve emails"):
            report.enqueue().wait(timeout=0.2)
        # a queue that a live worker serves: a plain timeout, no hint
        with pytest.raises(TimeoutError) as plain:
            report.options(queue="emails", delay=60).enqueue().wait(timeout=0.2)
        assert str(plain.value).endswith("is still scheduled after 0.2s")
    finally:
        worker.stop()
        thread.join(10)


def deferq_command(*args: str, cwd: Path, stdout: int | None = subprocess.PIPE,
                   **env: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "deferq"), *args]
    environment = {k: v for k, v in os.environ.items() if k not in ("DEFERQ_URL", "DEFERQ_APP", "PYTHONPATH")}
    return subprocess.run(command, cwd=cwd, env={**environment, **env}, stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=60)


@pytest.mark.parametrize("command", [("jobs",), ("dead", "list"), ("jobs", "--json")])
def test_a_reader_that_leaves_ends_the_command_quietly(command, tmp_path):
    """`deferq jobs | head -1`: the pipe's reader is gone before deferq writes."""
    url = f"sqlite:///{tmp_path / 'deferq.db'}"
    app = deferq.App(url)
    app.enqueue_many([deferq.Call("t", (i,), {}) for i in range(5)])
    app.close()
    read, write = os.pipe()
    os.close(read)  # the reader left: every write gets EPIPE
    try:
        done = deferq_command(*command, "--url", url, cwd=tmp_path, stdout=write)
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode in (0, 141)


def test_a_worker_started_away_from_its_project_is_told_where_python_looked(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "shop.py").write_text("import deferq\napp = deferq.App('memory://')\n\n\n"
                                     "@app.task\ndef ship(order: int) -> None:\n    return None\n")
    done = deferq_command("worker", "--app", "shop:app", "--burst", cwd=elsewhere)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert "No module named 'shop'" in last
    assert f"working directory ({elsewhere})" in last and "PYTHONPATH (not set)" in last
    assert "start deferq in your project's directory, or set PYTHONPATH" in last
    # as the sentence says: PYTHONPATH pointing at the project finds it
    found = deferq_command("worker", "--app", "shop:app", "--burst", cwd=elsewhere, PYTHONPATH=str(project))
    assert found.returncode == 0, found.stderr


def test_a_missing_module_inside_the_app_is_not_blamed_on_the_directory(tmp_path):
    (tmp_path / "shop.py").write_text("import no_such_dependency\n")
    done = deferq_command("worker", "--app", "shop:app", "--burst", cwd=tmp_path)
    assert done.returncode == 2
    assert "No module named 'no_such_dependency'" in done.stderr and "PYTHONPATH" not in done.stderr
