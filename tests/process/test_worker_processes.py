"""`deferq worker --processes N` (real processes): the first process forks the others
once the App is loaded; every process runs jobs; a child killed is replaced, one that
ends by itself is not; SIGTERM to the first stops them all with exit code 0; children
whose first process was killed stop by themselves; an overrun restarts its own process
only. And a worker caps its malloc arenas. docs/worker.md, "Several processes"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import deferq
from deferq.worker import memory
from tests.process.test_worker_overrun import PlainWorker
from tests.support.supervisor_harness import ROOT, TREE_PATH, wait_until

pytestmark = pytest.mark.timeout(120)


def children_of(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is `pid`, read from /proc."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextmanager
def started(tmp_path: Path, url: str, *options: str, app: deferq.App | None = None,
            ) -> Iterator[tuple[deferq.App, PlainWorker]]:
    """`deferq worker *options` and an App on its store (`app`: one with jobs already
    enqueued); both ended however the test ends."""
    app = app or deferq.App(url)
    worker = PlainWorker(tmp_path, url, *options)
    try:
        yield app, worker
    finally:
        worker.kill()
        app.close()


def ran_in(app: deferq.App, jobs: list[deferq.Job]) -> set[int] | None:
    """The pids of the workers that ran `jobs`, once every one succeeded."""
    now = [app.get(job.id) for job in jobs]
    if any(job.state != "succeeded" for job in now):
        return None
    return {int((job.last_worker or "").split(":")[-2]) for job in now}


@pytest.mark.parametrize("store", ["sqlite", "redis", "postgres"])
def test_processes_share_the_jobs_and_a_killed_child_is_replaced(store, request, tmp_path):
    url = request.getfixturevalue(f"{store}_url")
    with started(tmp_path, url, "--processes", "3", "-c", "2", "--grace", "5") as (app, worker):
        first = worker.process.pid
        forked = wait_until(lambda: len(children_of(first)) == 2 and children_of(first), 30, "2 children")
        jobs = [app.enqueue("record", [i, 0.2]) for i in range(30)]
        pids = wait_until(lambda: ran_in(app, jobs), 60, "the jobs to run")
        assert len(pids) >= 2 and pids <= forked | {first}, (pids, forked, first)

        victim = min(forked)
        os.kill(victim, signal.SIGKILL)
        (new,) = wait_until(lambda: len(children_of(first) - forked) == 1 and children_of(first) - forked,
                            30, "a replacement child")
        assert f"worker process {victim} ended with exit code -9: starting another in 1 s" in worker.log()
        wait_until(lambda: f":{new}:" in worker.log(), 60, "the replacement to start working")
        later = [app.enqueue("record", [100 + i, 0.2]) for i in range(10)]
        wait_until(lambda: ran_in(app, later), 60, "the jobs after the replacement")

        children = children_of(first)
        assert worker.stop() == 0, worker.log()
        assert not any(alive(pid) for pid in children), "a child outlived the first process"
        assert worker.log().count("stopped after") == 3, worker.log()


def test_burst_processes_exit_0_once_nothing_is_due(tmp_path):
    """--burst: every process exits once nothing is due, and no child is replaced."""
    url = f"sqlite:///{tmp_path}/burst.db"
    app = deferq.App(url)
    jobs = [app.enqueue("record", [i, 0.1]) for i in range(20)]
    with started(tmp_path, url, "--processes", "2", "-c", "2", "--burst", app=app) as (app, worker):
        assert worker.process.wait(timeout=60) == 0, worker.log()
        assert ran_in(app, jobs), worker.log()
        assert "starting another" not in worker.log(), worker.log()
        assert worker.log().count("stopped after") == 2, worker.log()


def test_children_stop_when_the_first_process_is_killed(tmp_path):
    url = f"sqlite:///{tmp_path}/orphans.db"
    with started(tmp_path, url, "--processes", "3", "--grace", "2") as (_, worker):
        first = worker.process.pid
        children = wait_until(lambda: len(children_of(first)) == 2 and children_of(first), 30, "2 children")
        os.kill(first, signal.SIGKILL)
        worker.process.wait(timeout=10)
        wait_until(lambda: not any(alive(pid) for pid in children), 30, "the orphans to stop")


@pytest.mark.parametrize("option", [["--once"], ["--metrics-port", "9999"]])
def test_processes_refuse_what_one_process_alone_can_do(option, tmp_path):
    env = {**os.environ, "PYTHONPATH": TREE_PATH}
    done = subprocess.run(
        [sys.executable, "-m", "deferq", "worker", "--app", "tests.support.fixtures:app",
         "--url", f"sqlite:///{tmp_path}/refused.db", "--processes", "2", *option],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--processes takes neither --once" in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("run", range(2))  # which process takes the job is chance
def test_an_overrun_restarts_its_process_in_place_and_the_family_stays_whole(run, tmp_path):
    """Whichever process took the overrun job restarts in place (same PID): a child
    stays a child (it forks nothing), the first process adopts its children (it forks
    no new ones); jobs still run and SIGTERM stops them all with exit code 0."""
    url = f"sqlite:///{tmp_path}/overrun.db"
    with started(tmp_path, url, "--processes", "2", "-c", "2", "--grace", "2") as (app, worker):
        first = worker.process.pid
        (child,) = wait_until(lambda: len(children_of(first)) == 1 and children_of(first), 30, "1 child")
        app.enqueue("hang", [1], max_attempts=1)
        wait_until(lambda: "restarted in place" in worker.log(), 30, "a restart in place")
        later = [app.enqueue("record", [i, 0.1]) for i in range(10)]
        wait_until(lambda: ran_in(app, later), 60, "the jobs after the restart")
        assert children_of(first) == {child}, (children_of(first), child, worker.log())
        assert worker.stop() == 0, worker.log()
        assert not alive(child)


@pytest.mark.skipif(memory._TRIM is None, reason="not glibc's malloc")
def test_a_worker_caps_its_malloc_arenas_unless_malloc_arena_max_is_set() -> None:
    """In a fresh interpreter (the cap lasts for the process): set when the variable is
    absent, left to the variable when it is there."""
    code = "from deferq.worker.memory import limit_arenas; print(limit_arenas())"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    capped = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    left = subprocess.run([sys.executable, "-c", code], env={**env, "MALLOC_ARENA_MAX": "4"},
                          capture_output=True, text=True, timeout=30)
    assert (capped.stdout.strip(), left.stdout.strip()) == ("True", "False"), (capped.stderr, left.stderr)
