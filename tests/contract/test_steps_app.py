"""Durable steps through the App: time travel with deferq.testing, async tasks, refusals
in a sentence, the HTTP endpoint and the job's steps in GET /v1/jobs/{id}. The stores'
side is tests/contract/test_steps.py; the reminder, payment check and re-notify of
examples/durable_steps are tests/unit/test_examples_steps.py."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

import deferq
from deferq import testing
from deferq.job import JobState
from deferq.server import ServerConfig, create_app
from deferq.steps.checkpoints import RESULT_LIMIT
from tests.support.server_helpers import TestClient

DAY = 86400.0


@pytest.fixture
def app():
    application = deferq.App("memory://")
    yield application
    application.close()


def ended(app: deferq.App, job: deferq.Job) -> deferq.Job:
    found = app.get(job.id)
    assert found is not None
    return found


def test_async_tasks_step_sleep_and_wait(app):
    calls: list[str] = []

    async def fetch(n: int) -> int:
        await asyncio.sleep(0)
        calls.append("fetch")
        return n + 1

    @app.task()
    async def flow(n: int) -> list[object]:
        job = deferq.current_job()
        assert job is not None
        got = await job.step_async("fetch", fetch, n)
        await job.sleep_async("nap", 10)
        seen = await job.wait_for_async("event", "go", "k", 60)
        return [got, seen]

    job = flow.enqueue(1)
    testing.drain(app)
    testing.travel(app, 11)
    testing.drain(app)
    app.send_event("go", "k", {"ok": True})
    testing.drain(app)
    assert calls == ["fetch"] and ended(app, job).result == [2, {"ok": True}]


def test_an_event_from_before_the_job_does_not_count(app):
    app.send_event("ready", "x", 1)

    @app.task()
    def late() -> object:
        job = deferq.current_job()
        assert job is not None
        return job.wait_for("ready", "ready", "x", 30)

    testing.travel(app, 1)
    job = late.enqueue()
    testing.drain(app)
    testing.travel(app, 31)
    testing.drain(app)
    assert ended(app, job).result is None


@pytest.mark.parametrize(("body", "sentence"), [
    (lambda job: [job.step("a", str, 1), job.step("a", str, 2)], "reached twice"),
    (lambda job: job.step("big", lambda: "x" * RESULT_LIMIT), "over the"),
    (lambda job: job.step("obj", object), "not JSON-serializable"),
])
def test_refusals_end_the_job_dead_with_a_sentence(app, body, sentence):
    @app.task()
    def refused() -> None:
        job = deferq.current_job()
        assert job is not None
        body(job)

    job = refused.enqueue()
    testing.drain(app)
    dead = ended(app, job)
    assert dead.state == JobState.DEAD and sentence in (dead.error or "")


def test_bad_arguments_are_refused_in_a_sentence(app):
    with pytest.raises(deferq.ConfigError, match="an event key must be"):
        app.send_event("paid", "")
    with pytest.raises(deferq.ConfigError, match="aware datetime"):
        deferq.context.RunningJob(deferq.Job.__new__(deferq.Job)).sleep_until("x", datetime(2030, 1, 1))
    with pytest.raises(deferq.ConfigError, match="timedelta, 0 or more"):
        deferq.context.RunningJob(deferq.Job.__new__(deferq.Job)).wait_for("x", "e", "k", timedelta(-1))


def test_send_event_over_http_wakes_the_job_and_its_page_shows_the_steps(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")

    @app.task()
    def pay(user: int) -> object:
        job = deferq.current_job()
        assert job is not None
        job.step("invoice", str, user)
        return job.wait_for("paid", "payment", f"user:{user}", 3600)

    job = pay.enqueue(42)
    testing.drain(app)
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
        page = api.get(f"/v1/jobs/{job.id}").json()
        assert [(s["name"], s["state"]) for s in page["steps"]] == [("invoice", "done"), ("paid", "waiting")]
        assert page["steps"][1]["event"] == "payment" and page["steps"][1]["key"] == "user:42"
        assert page["state"] == "scheduled" and page["waiting_for"] == {
            "step": "paid", "event": "payment", "key": "user:42", "until": page["steps"][1]["until"]}
        sent = api.post("/v1/events", json={"event": "payment", "key": "user:42", "data": {"amount": 10}})
        assert sent.status_code == 200 and sent.json() == {"event": "payment", "key": "user:42", "woken": 1}
        assert api.post("/v1/events", json={"event": "payment"}).status_code == 422
        [kept] = api.get("/v1/events").json()["events"]
        assert (kept["event"], kept["key"], kept["data"]) == ("payment", "user:42", {"amount": 10})
    testing.drain(app)
    assert ended(app, job).result == {"amount": 10}
    app.close()


def test_the_command_line_sends_events_and_shows_the_steps(tmp_path):
    from click.testing import CliRunner

    from deferq.cli.main import main

    url = f"sqlite:///{tmp_path}/deferq.db"
    app = deferq.App(url)

    @app.task()
    def signup(user: int) -> object:
        job = deferq.current_job()
        assert job is not None
        job.step("welcome", str, user)
        return job.wait_for("confirmed", "confirm", str(user), 600)

    job = signup.enqueue(5)
    testing.drain(app)
    runner = CliRunner()
    shown = runner.invoke(main, ["job", job.id, "--url", url])
    assert shown.exit_code == 0, shown.output
    assert f"job {job.id}: {signup.name}, waiting" in shown.output
    assert "1. welcome (step) done" in shown.output
    assert "2. confirmed (wait) waiting: confirm 5 until" in shown.output
    sent = runner.invoke(main, ["event", "send", "confirm", "5", "--data", '{"ok": 1}', "--url", url])
    assert sent.exit_code == 0 and "woke 1 waiting job" in sent.output
    bad = runner.invoke(main, ["event", "send", "confirm", "5", "--data", "{nope", "--url", url])
    assert bad.exit_code == 2 and "--data is not JSON" in bad.output
    listed = runner.invoke(main, ["event", "list", "--url", url])
    assert listed.exit_code == 0 and 'confirm 5  {"ok":1}' in listed.output
    testing.drain(app)
    assert ended(app, job).result == {"ok": 1}
    assert f"{signup.name}, succeeded" in runner.invoke(main, ["job", job.id, "--url", url]).output
    app.close()


def test_steps_go_with_the_result_and_a_dead_job_keeps_them_for_its_retry(app):
    fail = {"now": True}

    @app.task(max_attempts=1)
    def once() -> str:
        job = deferq.current_job()
        assert job is not None
        job.step("first", str, "kept")
        if fail["now"]:
            raise RuntimeError("boom")
        return "ok"

    job = once.enqueue()
    testing.drain(app)
    testing.travel(app, app.result_ttl + 5)
    assert ended(app, job).state == JobState.DEAD and len(app.steps(job.id)) == 1
    fail["now"] = False
    assert app.retry_dead(job.id)
    testing.drain(app)
    assert ended(app, job).result == "ok" and app.steps(job.id)[0]["attempt"] == 1
    testing.travel(app, app.result_ttl + 5)
    assert app.steps(job.id) == []


def check_step_in_transaction(app: deferq.App, connect, table: str) -> None:
    """A step's rows and its checkpoint are committed together, or neither."""
    from deferq.steps.checkpoints import JobSteps

    job = app.enqueue("order")
    [leased] = app.backend.reserve(["default"], 1, "tx-steps", 30, (0, 1, 2))
    conn = connect()
    ran: list[int] = []

    def insert(n: int) -> int:
        ran.append(n)
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {table} (n) VALUES ({n})")
        return n * 10

    def rows() -> list[int]:
        with conn.cursor() as cur:
            cur.execute(f"SELECT n FROM {table} ORDER BY n")
            found = [row[0] for row in cur.fetchall()]
        conn.commit()
        return found

    try:
        assert JobSteps(app.backend, 30, 3600, leased).step_within(conn, "pay", insert, (1,), {}) == 10
        conn.rollback()
        assert rows() == [] and app.steps(job.id) == []
        assert JobSteps(app.backend, 30, 3600, leased).step_within(conn, "pay", insert, (2,), {}) == 20
        conn.commit()
        assert rows() == [2] and [s["result"] for s in app.steps(job.id)] == [20]
        assert JobSteps(app.backend, 30, 3600, leased).step_within(conn, "pay", insert, (3,), {}) == 20
        assert ran == [1, 2]
    finally:
        conn.close()


def test_a_step_in_a_postgres_transaction(postgres_url):
    import psycopg

    from tests.support.stores.postgres import BASE_URL

    app = deferq.App(postgres_url)
    with psycopg.connect(BASE_URL, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS deferq_steps_orders")
        admin.execute("CREATE TABLE deferq_steps_orders (n int)")
    try:
        check_step_in_transaction(app, lambda: psycopg.connect(BASE_URL), "deferq_steps_orders")
    finally:
        with psycopg.connect(BASE_URL, autocommit=True) as admin:
            admin.execute("DROP TABLE deferq_steps_orders")
        app.close()


def test_a_step_in_a_mysql_transaction(mysql_url, mysql_session_url):
    from urllib.parse import urlsplit

    import pymysql

    parts = urlsplit(mysql_session_url)

    def connect() -> pymysql.Connection:
        return pymysql.connect(host=parts.hostname, port=parts.port, user=parts.username,
                               database=parts.path.lstrip("/"))

    app = deferq.App(mysql_url)
    admin = connect()
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS deferq_steps_orders (n int) ENGINE = InnoDB")
        cur.execute("DELETE FROM deferq_steps_orders")
    admin.commit()
    try:
        check_step_in_transaction(app, connect, "deferq_steps_orders")
    finally:
        with admin.cursor() as cur:
            cur.execute("DROP TABLE deferq_steps_orders")
        admin.close()
        app.close()


def test_a_step_in_a_transaction_needs_postgres_or_mysql(tmp_path):
    from deferq.steps.checkpoints import JobSteps

    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")
    app.enqueue("order")
    [leased] = app.backend.reserve(["default"], 1, "tx-steps", 30, (0, 1, 2))
    with pytest.raises(deferq.ConfigError, match="needs PostgreSQL or MySQL"):
        JobSteps(app.backend, 30, 3600, leased).step_within(object(), "pay", int, (1,), {})
    app.close()


def flaky(fails: int, calls: list[str]):
    """A step function that raises `fails` times, then returns how many calls it took."""
    def charge(order: int) -> int:
        calls.append(f"charge {order}")
        if len(calls) <= fails:
            raise TimeoutError("the gateway did not answer")
        return len(calls)
    return charge


def test_a_step_retries_on_its_own_without_redoing_earlier_steps(app):
    calls: list[str] = []
    charge = flaky(2, calls)
    invoices: list[int] = []

    @app.task(max_attempts=1)
    def pay(order: int) -> int:
        job = deferq.current_job()
        assert job is not None
        job.step("invoice", invoices.append, order)
        retry = deferq.StepRetry(max_attempts=3, backoff=deferq.backoff.fixed(30), retry_on=(TimeoutError,))
        return job.step_with_retry("charge", retry, charge, order)

    job = pay.enqueue(5)
    testing.drain(app)
    [invoice, charging] = app.steps(job.id)
    assert (charging["name"], charging["state"], charging["failures"]) == ("charge", "retrying", 1)
    assert "TimeoutError: the gateway did not answer" in charging["error"]
    assert ended(app, job).state == JobState.SCHEDULED and ended(app, job).attempts == 0  # not an attempt
    testing.travel(app, 29)
    testing.drain(app)
    assert len(calls) == 1
    for _ in range(2):
        testing.travel(app, 31)
        testing.drain(app)
    assert ended(app, job).result == 3 and invoices == [5] and len(calls) == 3
    assert [(s["name"], s["state"], s["failures"]) for s in app.steps(job.id)] == [
        ("invoice", "done", None), ("charge", "done", 2)]


def test_a_step_out_of_tries_fails_the_run_and_other_errors_are_not_retried(app):
    calls: list[str] = []

    @app.task(max_attempts=1)
    def pay(order: int, error: str) -> None:
        job = deferq.current_job()
        assert job is not None

        def charge() -> None:
            calls.append(error)
            raise {"timeout": TimeoutError, "value": ValueError}[error](f"{error} {order}")

        job.step_with_retry("charge", deferq.StepRetry(2, deferq.backoff.fixed(0), (TimeoutError,)), charge)

    timing_out, refused = pay.enqueue(1, "timeout"), pay.enqueue(2, "value")
    testing.drain(app)
    assert calls.count("timeout") == 2 and calls.count("value") == 1
    assert "TimeoutError: timeout 1" in ended(app, timing_out).error
    assert ended(app, timing_out).state == ended(app, refused).state == JobState.DEAD
    assert app.steps(timing_out.id) == []  # out of tries: the count is dropped for the task's next run


def test_an_async_step_retries_on_its_own(app):
    calls: list[str] = []
    charge = flaky(1, calls)

    async def charge_async(order: int) -> int:
        return charge(order)

    @app.task()
    async def pay(order: int) -> int:
        job = deferq.current_job()
        assert job is not None
        return await job.step_with_retry_async("charge", deferq.StepRetry(backoff=deferq.backoff.fixed(1)),
                                               charge_async, order)

    job = pay.enqueue(6)
    testing.drain(app)
    testing.travel(app, 2)
    testing.drain(app)
    assert ended(app, job).result == 2


@pytest.mark.parametrize(("options", "sentence"), [
    ({"max_attempts": 0}, "max_attempts must be a whole number"),
    ({"backoff": 5}, "backoff must be a deferq.backoff policy"),
    ({"retry_on": (str,)}, "retry_on must be exception classes"),
])
def test_step_retry_options_are_checked_in_a_sentence(options, sentence):
    with pytest.raises(deferq.ConfigError, match=sentence):
        deferq.StepRetry(**options)
