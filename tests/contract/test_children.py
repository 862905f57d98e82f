"""Child jobs on every store: a parent gathers its children on a worker of concurrency 1 (it
holds no slot while they run) and resumes once, with their results in order; a dead child
raises ChildFailed in the parent; cancelling the parent cancels its unfinished children; a
run that finds the children's ids kept but not all stored stores only the missing ones."""

from __future__ import annotations

import threading

import pytest

import deferq
from deferq.job import JobState, dumps, new_job_ids
from deferq.steps import children as child_jobs
from deferq.steps.checkpoints import STEPS
from deferq.testing import drain, run_here
from deferq.worker import Worker, WorkerConfig

CHILDREN = 50


def finished(app: deferq.App, job_id: str, timeout: float = 60.0) -> deferq.Job:
    """The job once it has finished (bounded: the store wakes the wait)."""
    job = app.backend.wait_finished(job_id, timeout)
    assert job is not None and job.state.finished, f"job {job_id} is {job and job.state} after {timeout} s"
    return job


def parent_of(app: deferq.App, sizes: list[int], queue: str = "kids") -> deferq.Task[[], list[int]]:
    """A task that gathers `sizes[0]` children (each returns its number) on `queue`."""
    @app.task(queue=queue)
    def child(n: int) -> int:
        return n

    @app.task()
    def fan_out() -> list[int]:
        job = deferq.current_job()
        assert job is not None
        return job.gather("fan-out", [child.call(n) for n in range(sizes[0])])

    return fan_out


def run_one(app: deferq.App, queue: str) -> None:
    [job] = app.backend.reserve([queue], 1, "w", app.lease, (0, 1, 2))
    run_here(app, job)


def test_a_parent_gathers_its_children_on_one_slot_and_resumes_once(app: deferq.App) -> None:
    runs: list[int] = []

    @app.task()
    def square(x: int) -> int:
        return x * x

    @app.task()
    def fan_out(n: int) -> list[int]:
        job = deferq.current_job()
        assert job is not None
        runs.append(n)
        return job.gather("fan-out", [square.call(i) for i in range(n)])

    parent = fan_out.enqueue(CHILDREN)
    worker = Worker(app, WorkerConfig(queues=("default",), concurrency=1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        done = finished(app, parent.id)
    finally:
        worker.stop()
        thread.join(timeout=10)
    assert done.state == JobState.SUCCEEDED, done.error
    assert done.result == [i * i for i in range(CHILDREN)]
    assert len(runs) == 2  # its first run, and the one wake-up after the last child
    tree = app.children(parent.id)
    assert [(row["step"], row["index"], row["state"], row["result"]) for row in tree] == [
        ("fan-out", i, "succeeded", i * i) for i in range(CHILDREN)]
    assert len({row["id"] for row in tree}) == CHILDREN
    [row] = app.steps(parent.id)
    assert (row["kind"], row["state"], row["total"], row["ended"], row["failed"]) == (
        "children", "done", CHILDREN, CHILDREN, 0)


def test_a_dead_child_raises_child_failed_in_the_parent(app: deferq.App) -> None:
    seen: list[str] = []

    @app.task()
    def check(x: int) -> int:
        if x == 3:
            raise ValueError(f"item {x} is bad")
        return x

    @app.task()
    def fan_out() -> list[int]:
        job = deferq.current_job()
        assert job is not None
        try:
            return job.gather("checks", [check.options(max_attempts=1).call(i) for i in range(5)])
        except deferq.ChildFailed as exc:
            seen.append(f"{exc.step} {exc.index} {exc.state} {(exc.error or '').strip().splitlines()[-1]}")
            raise

    parent = fan_out.enqueue()
    drain(app)
    done = finished(app, parent.id, 5)
    assert done.state == JobState.DEAD and done.attempts == 1  # dead at once: no retry changes its children
    assert "child 3 of 'checks'" in (done.error or "") and "item 3 is bad" in (done.error or "")
    assert seen == ["checks 3 dead ValueError: item 3 is bad"]
    assert [row["state"] for row in app.steps(parent.id)] == ["failed"]


def test_cancelling_the_parent_cancels_its_unfinished_children(app: deferq.App) -> None:
    parent = parent_of(app, [4]).enqueue()
    drain(app, ["default"])  # the parent stores its children and leaves; no worker takes "kids"
    run_one(app, "kids")  # one child ends
    tree = app.children(parent.id)
    assert [row["state"] for row in tree] == ["succeeded", "queued", "queued", "queued"]
    assert app.cancel(parent.id)
    assert app.get(parent.id).state == JobState.CANCELLED  # type: ignore[union-attr]
    assert [row["state"] for row in app.children(parent.id)] == ["succeeded", *["cancelled"] * 3]


def test_a_run_that_finds_the_ids_kept_stores_only_the_children_not_stored(app: deferq.App) -> None:
    """As after a worker killed while it stored them: the ids kept, one child stored, no
    `stored` mark. The next run stores the three others, each once, under the kept ids."""
    calls: list[int] = []

    @app.task()
    def echo(x: int) -> int:
        calls.append(x)
        return x

    @app.task()
    def fan_out() -> list[int]:
        job = deferq.current_job()
        assert job is not None
        return job.gather("fan-out", [echo.call(i) for i in range(4)])

    parent = fan_out.enqueue()
    ids = new_job_ids(4)
    record = {"kind": "children", "index": 0, "at": app.backend.now(), "attempt": 1, "ids": ids}
    app.backend.kv_put(STEPS + parent.id, "fan-out", dumps(record))
    app.enqueue_many([echo.call(0)])  # a stranger: not one of the children
    killed = child_jobs.DurableJob(app.backend, app.lease, app.result_ttl, parent, app.runtime)
    app.runtime.enqueue_items(killed.planned("fan-out", ids, [echo.call(i) for i in range(4)])[:1])
    drain(app)
    done = finished(app, parent.id, 5)
    assert done.state == JobState.SUCCEEDED and done.result == [0, 1, 2, 3]
    assert sorted(calls) == [0, 0, 1, 2, 3]  # the stranger, and each child once
    tree = app.children(parent.id)  # under the kept ids (Redis shards mark them as they store them)
    assert [(row["state"], row["result"]) for row in tree] == [("succeeded", i) for i in range(4)]
    assert all(app.get(row["id"]) is not None for row in tree)


def test_an_end_no_settle_wrote_is_found_by_the_parent_at_its_recheck(app: deferq.App) -> None:
    """A child cancelled on its own (no run, so no settle hook) ends the parent's wait at
    its recheck once no end was counted since the one before: the parent looks at its
    children itself, and raises ChildFailed."""

    parent = parent_of(app, [2]).enqueue()
    drain(app, ["default"])
    first, second = (row["id"] for row in app.children(parent.id))
    run_one(app, "kids")
    assert app.backend.cancel(second)  # the store alone: no settle, no hook
    for _ in range(2):  # its rechecks, come now: the first notes the count, the second finds it stalled
        assert app.backend.run_now(parent.id)
        drain(app, ["default"])
    done = finished(app, parent.id, 5)
    assert done.state == JobState.DEAD and f"(job {second}) ended cancelled" in (done.error or "")


@pytest.mark.parametrize(("kind", "sentence"), [
    ("key", "cannot have a unique key"), ("number", "is a task.call"), ("object", "cannot travel as JSON"),
])
def test_a_gather_refuses_calls_it_cannot_store_in_a_sentence(app: deferq.App, kind: str, sentence: str) -> None:
    @app.task()
    def echo(x: object) -> object:
        return x

    @app.task(max_attempts=1)
    def refused() -> None:
        job = deferq.current_job()
        assert job is not None
        calls = {"key": [echo.options(key="k").call(1)], "number": [1], "object": [echo.call(object())]}[kind]
        job.gather("fan-out", calls)  # type: ignore[arg-type]

    job = refused.enqueue()
    drain(app)
    ended = finished(app, job.id, 5)
    assert ended.state == JobState.DEAD and sentence in (ended.error or ""), ended.error
    assert app.steps(job.id) == []  # nothing kept, nothing stored
    assert app.stats().get("default", {}).get("queued", 0) == 0


@pytest.mark.parametrize("count", [0, 1])
def test_run_child_and_the_async_twins(app: deferq.App, count: int) -> None:
    @app.task()
    def echo(x: int) -> int:
        return x + 1

    @app.task()
    async def flow() -> list[object]:
        job = deferq.current_job()
        assert job is not None
        one = await job.run_child_async("one", echo.call(1))
        many = await job.gather_async("many", [echo.call(i) for i in range(count)])
        return [one, many, job.run_child("sync", echo.call(5))]

    parent = flow.enqueue()
    drain(app)
    done = finished(app, parent.id, 5)
    assert done.result == [2, [i + 1 for i in range(count)], 6], done.error


def test_the_job_api_links_a_parent_and_its_children(tmp_path) -> None:
    from deferq.server import ServerConfig, create_app
    from tests.support.server_helpers import TestClient

    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")
    parent = parent_of(app, [3]).enqueue()
    drain(app, ["default"])
    ids = [row["id"] for row in app.children(parent.id)]
    try:
        with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
            page = api.get(f"/v1/jobs/{parent.id}").json()
            assert [link["id"] for link in page["children"]] == ids
            assert [(s["kind"], s["state"], s["total"], s["ended"]) for s in page["steps"]] == [
                ("children", "waiting", 3, 0)]
            child_page = api.get(f"/v1/jobs/{ids[1]}").json()
            assert [link["id"] for link in child_page["parents"]] == [parent.id]
            assert api.delete(f"/v1/jobs/{parent.id}").status_code == 200  # cancel: its children too
            assert [api.get(f"/v1/jobs/{i}").json()["state"] for i in ids] == ["cancelled"] * 3
    finally:
        app.close()


def test_steps_check_replays_a_waiting_parent_and_retry_from_drops_its_children(app: deferq.App) -> None:
    """A parent waiting for its children replays cleanly (the gather is where it waits);
    one whose gather now takes another number of calls is named. retry_from the gather of a
    finished parent drops its children's ends with it: the parent starts new children."""
    sizes = [3]
    parent = parent_of(app, sizes).enqueue()
    drain(app, ["default"])
    report = app.steps_check()
    assert report.checked == 1 and report.failing == []
    sizes[0] = 4
    [finding] = app.steps_check().failing
    assert finding.step == "fan-out" and "started 3 child jobs and is given 4" in finding.detail
    sizes[0] = 3
    drain(app)
    assert finished(app, parent.id, 5).result == [0, 1, 2]
    first = {row["id"] for row in app.children(parent.id)}
    app.retry_from(parent.id, step="fan-out")
    drain(app)
    assert finished(app, parent.id, 5).result == [0, 1, 2]
    assert not first & {row["id"] for row in app.children(parent.id)}  # new children


def test_deferq_job_shows_a_parent_its_children_and_a_child_its_parent(tmp_path) -> None:
    from click.testing import CliRunner

    from deferq.cli.main import main

    url = f"sqlite:///{tmp_path}/deferq.db"
    app = deferq.App(url)
    parent = parent_of(app, [3]).enqueue()
    drain(app, ["default"])
    ids = [row["id"] for row in app.children(parent.id)]
    run_one(app, "kids")
    app.close()
    shown = CliRunner().invoke(main, ["job", parent.id, "--url", url])
    assert shown.exit_code == 0, shown.output
    assert f"child jobs:   {', '.join(ids)}" in shown.output
    assert "1. fan-out (children) waiting: 1 of 3 child jobs ended" in shown.output
    child = CliRunner().invoke(main, ["job", ids[0], "--url", url])
    assert f"child of:     {parent.id}" in child.output


def test_a_child_of_a_gather_run_again_from_scratch_counts_for_nothing(app: deferq.App) -> None:
    """A parent cancelled while one of its children runs, then retried from its gather: the
    new gather stores new children; the old child, ending after, writes and counts nothing
    in it, and the parent resumes with the new children's results."""
    parent = parent_of(app, [2]).enqueue()
    drain(app, ["default"])
    [running] = app.backend.reserve(["kids"], 1, "w", app.lease, (0, 1, 2))  # an old child, leased
    assert app.cancel(parent.id)
    app.retry_from(parent.id, step="fan-out")
    drain(app, ["default"])
    new = [row["id"] for row in app.children(parent.id)]
    assert running.id not in new and [row["state"] for row in app.children(parent.id)] == ["queued"] * 2
    run_here(app, running)  # it ends now, in the parent's new gather of the same name
    [step] = app.steps(parent.id)
    assert (step["ended"], step["total"]) == (0, 2), step
    drain(app)
    done = finished(app, parent.id, 5)
    assert done.state == JobState.SUCCEEDED and done.result == [0, 1], done.error
    assert [row["id"] for row in app.children(parent.id)] == new
