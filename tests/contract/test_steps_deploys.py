"""Durable code changing under stored jobs, on every store: `job.patched` keeps jobs that
ran past a new step on their old path, `app.steps_check()` names the jobs new code would
break without running a step, `app.retry_from` re-runs a finished job from a step."""

from __future__ import annotations

import pytest

import deferq
from deferq import testing
from deferq.job import JobState
from deferq.server import ServerConfig, create_app
from deferq.steps.retry import RetryRefused
from tests.support.server_helpers import TestClient

SLEEPERS = 1000


def stored(app: deferq.App, job: deferq.Job) -> deferq.Job:
    found = app.get(job.id)
    assert found is not None
    return found


def test_a_step_inserted_behind_patched_runs_for_new_jobs_only(app: deferq.App) -> None:
    """1,000 jobs wait under version 1; version 2 inserts a step before the wait behind
    `patched`: every old job succeeds without it, every new job runs it."""
    version, fraud_checked = [1], []

    def charge(order: int) -> int:
        return order

    def check_fraud(order: int) -> str:
        fraud_checked.append(order)
        return "ok"

    @app.task(name="order")
    def order(n: int) -> str:
        job = deferq.current_job()
        assert job is not None
        job.step("charge", charge, n)
        verdict = "old"
        if version[0] == 2 and job.patched("fraud-check"):
            verdict = job.step("fraud", check_fraud, n)
        paid = job.wait_for("paid", "paid", "all", 3600)
        return f"{verdict} {paid}"

    old = [order.call(n) for n in range(SLEEPERS)]
    old_jobs = app.enqueue_many(old)
    testing.drain(app, limit=SLEEPERS)
    assert app.stats()["default"]["scheduled"] == SLEEPERS
    version[0] = 2
    new_jobs = app.enqueue_many([order.call(SLEEPERS + n) for n in range(3)])
    testing.drain(app)
    report = app.steps_check()
    assert report.checked == SLEEPERS + 3 and report.findings == []
    assert app.send_event("paid", "all", "yes") == SLEEPERS + 3
    testing.drain(app, limit=2 * SLEEPERS)
    assert [stored(app, job).result for job in old_jobs] == ["old yes"] * SLEEPERS
    assert [stored(app, job).result for job in new_jobs] == ["ok yes"] * 3
    assert fraud_checked == [SLEEPERS + n for n in range(3)]
    assert [row["name"] for row in app.steps(new_jobs[0].id)] == ["charge", "fraud", "paid"]


def test_steps_check_names_each_job_a_rename_breaks_and_runs_no_step(app: deferq.App) -> None:
    names, ran = {"second": "second"}, []

    def work(n: int) -> int:
        ran.append(n)
        return n

    @app.task(name="renamed")
    def renamed(n: int) -> int:
        job = deferq.current_job()
        assert job is not None
        job.step("first", work, n)
        job.step(names["second"], work, n + 1)
        job.sleep("nap", 3600)
        return job.step("third", work, n + 2)

    @app.task(name="other")
    def other() -> None:
        job = deferq.current_job()
        assert job is not None
        job.step("only", work, 0)
        job.sleep("nap", 3600)

    jobs = [renamed.enqueue(n) for n in range(5)]
    other.enqueue()
    testing.drain(app)
    ran.clear()
    assert app.steps_check().findings == []
    names["second"] = "second v2"
    report = app.steps_check()
    assert ran == []  # no step's function ran in either check
    assert report.checked == 6
    assert sorted(f.job_id for f in report.failing) == sorted(job.id for job in jobs)
    assert {(f.problem, f.step) for f in report.findings} == {("renamed", "second")}
    assert "'second v2'" in report.findings[0].detail


def test_steps_check_tells_a_reorder_a_kind_change_and_a_removal(app: deferq.App) -> None:
    shape = ["a", "b", "nap"]

    @app.task(name="shaped")
    def shaped() -> None:
        job = deferq.current_job()
        assert job is not None
        for name in shape:
            if name.startswith("nap"):
                job.sleep(name, 3600)
            elif name == "b-sleep":
                job.sleep("b", 1)
            else:
                job.step(name, str, name)

    shaped.enqueue()
    testing.drain(app)
    for changed, problem in ((["b", "a", "nap"], "reordered"), (["a", "b-sleep", "nap"], "kind changed"),
                             (["a", "nap"], "reordered"), (["a", "b"], "removed")):
        shape[:] = changed
        [finding] = app.steps_check().findings
        assert finding.problem == problem, changed


def test_retry_from_reruns_the_named_step_and_those_after_it(app: deferq.App) -> None:
    calls: list[str] = []
    broken = [True]

    def act(name: str) -> str:
        calls.append(name)
        if name == "c" and broken[0]:
            raise RuntimeError("bug in c")
        return name

    @app.task(name="abc", max_attempts=1)
    def abc() -> str:
        job = deferq.current_job()
        assert job is not None
        return "".join(job.step(name, act, name) for name in ("a", "b", "c"))

    job = abc.enqueue()
    testing.drain(app)
    assert stored(app, job).state == JobState.DEAD and calls == ["a", "b", "c"]
    broken[0] = False  # the bug was in c, and b's result fed it: from b on again
    assert app.retry_from(job.id, "b").state in (JobState.QUEUED, JobState.SCHEDULED)
    testing.drain(app)
    assert stored(app, job).result == "abc" and calls == ["a", "b", "c", "b", "c"]
    calls.clear()  # a succeeded job, from its first step: every step again
    app.retry_from(job.id, "a")
    testing.drain(app)
    assert stored(app, job).state == JobState.SUCCEEDED and calls == ["a", "b", "c"]
    assert [row["name"] for row in app.steps(job.id)] == ["a", "b", "c"]


def test_retry_from_a_cancelled_job_and_the_refusals(app: deferq.App) -> None:
    calls: list[str] = []

    @app.task(name="napper")
    def napper() -> str:
        job = deferq.current_job()
        assert job is not None
        job.step("before", calls.append, "before")
        job.sleep("nap", 3600)
        job.step("after", calls.append, "after")
        return "woke"

    job = napper.enqueue()
    testing.drain(app)
    with pytest.raises(RetryRefused, match="scheduled: only a dead, cancelled or succeeded") as refused:
        app.retry_from(job.id, "nap")
    assert refused.value.reason == "unfinished"
    assert app.cancel(job.id) and stored(app, job).state == JobState.CANCELLED
    with pytest.raises(RetryRefused, match="no step named 'naap'; its steps, sleeps and waits: 'before', 'nap'"):
        app.retry_from(job.id, "naap")
    with pytest.raises(RetryRefused, match="there is no job"):
        app.retry_from("06H0NOSUCHJOB0000000000000", "nap")
    with pytest.raises(deferq.ConfigError, match="a step name must be"):
        app.retry_from(job.id, "")
    assert stored(app, job).state == JobState.CANCELLED  # refused: nothing changed
    app.retry_from(job.id, "nap")  # the sleep starts again, from now
    testing.drain(app)
    assert stored(app, job).state == JobState.SCHEDULED and calls == ["before"]
    assert [(row["name"], row["state"]) for row in app.steps(job.id)] == [("before", "done"), ("nap", "sleeping")]


def test_retry_from_over_http(app: deferq.App) -> None:
    @app.task(name="once", max_attempts=1)
    def once() -> None:
        job = deferq.current_job()
        assert job is not None
        job.step("only", str, 1)
        raise RuntimeError("after the step")

    job = once.enqueue()
    testing.drain(app)
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
        assert api.post(f"/v1/jobs/{job.id}/retry-from", json={"step": "only"}).json() == {
            "id": job.id, "state": "queued"}
        refused = api.post(f"/v1/jobs/{job.id}/retry-from", json={"step": "only"})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "unfinished"
        testing.drain(app)
        unknown = api.post(f"/v1/jobs/{job.id}/retry-from", json={"step": "nope"})
        assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "unknown_step"
        missing = api.post("/v1/jobs/06H0NOSUCHJOB0000000000000/retry-from", json={"step": "only"})
        assert missing.status_code == 404
        assert api.post(f"/v1/jobs/{job.id}/retry-from", json={"step": ""}).status_code == 422
