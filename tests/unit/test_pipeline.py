"""One enqueue path: a Python enqueue, an async one, a workflow's and POST /v1/jobs (task
or topic) all run the App's middleware chain around the store call, so each gets the same
stored record, the same middleware and the same history entry."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime

import pytest

import deferq
from deferq import chain
from deferq.job import Job
from deferq.server import ServerConfig, create_app
from deferq.server.topics.delivery import TASK_NAME, TIMEOUT_MARGIN
from tests.support.server_helpers import TestClient

AT = 4102444800.0  # 2100-01-01: due in the future, so nothing runs meanwhile
EXPIRES = "2100-06-01T00:00:00Z"
UNCOMPARED = {"id", "created_at", "updated_at"}  # what two enqueues never share


class Seen(deferq.Middleware):
    """Which tasks went through each enqueue hook."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def before_enqueue(self, items):
        self.seen += [("before", item.job.task) for item in items]
        return items

    def after_enqueue(self, jobs):
        self.seen += [("after", job.task) for job in jobs]
        return jobs


def record(job: Job | None) -> dict[str, object]:
    assert job is not None
    return {f.name: getattr(job, f.name) for f in dataclasses.fields(job) if f.name not in UNCOMPARED}


def enqueued_per_history(client: TestClient, task: str) -> int:
    answer = client.get("/v1/stats/history", params={"minutes": 5, "task": task}).json()
    return int(answer["totals"]["enqueued"])


@pytest.fixture
def served(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/p.db", durable=False)
    seen = Seen()
    app.add_middleware(seen)
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as client:
        yield app, client, seen
    app.close()


def test_an_http_topic_job_is_the_python_enqueue_of_the_delivery_task(served):
    app, client, seen = served
    topic = {"url": "http://127.0.0.1:9/", "delay_ms": 60000, "ttr": 7, "max_attempts": 4,
             "priority": "high", "queue": "pay"}
    assert client.put("/v1/topics/pay", json=topic).status_code in (200, 201)
    options = {"at": AT, "ttr": 3, "max_attempts": 2, "priority": "low", "remark": "by hand",
               "expires": EXPIRES}
    receipt = client.post("/v1/jobs", json={"topic": "pay", "body": {"order": 1}, **options})
    assert receipt.status_code == 201, receipt.text
    python = app.enqueue(TASK_NAME, ["pay"], {"body": {"order": 1}, "ttr": 3.0}, queue="pay", at=AT,
                         timeout=3 + TIMEOUT_MARGIN, max_attempts=2, priority="low", remark="by hand",
                         expires=datetime(2100, 6, 1, tzinfo=UTC))
    assert record(app.get(receipt.json()["id"])) == record(app.get(python.id))

    # the topic's own settings, with no option in the request: the topic task's defaults
    plain = client.post("/v1/jobs", json={"topic": "pay", "body": 2}).json()
    stored = app.get(plain["id"])
    assert stored is not None
    assert (stored.queue, stored.priority_name, stored.max_attempts, stored.timeout, stored.kwargs) == (
        "pay", "high", 4, 7 + TIMEOUT_MARGIN, {"body": 2})
    assert 59 < stored.run_at - stored.created_at <= 60

    # a unique key is one key for both paths
    keyed = client.post("/v1/jobs", json={"topic": "pay", "body": 3, "key": "order:3"}).json()
    again = app.enqueue(TASK_NAME, ["pay"], {"body": 4}, key="order:3")
    assert again.id == keyed["id"]

    # every enqueue ran the middleware, and the history counts those stored anew
    assert seen.seen == [(hook, TASK_NAME) for _ in range(5) for hook in ("before", "after")]
    app.history.flush()
    assert enqueued_per_history(client, TASK_NAME) == 4


def test_an_http_task_job_is_the_python_enqueue_of_the_task(served):
    app, client, seen = served

    @app.task(queue="mail", max_attempts=5, timeout=9)
    def send(to: str, subject: str = "") -> None:
        pass

    http = client.post("/v1/jobs", json={"task": "send", "args": ["a@b"], "kwargs": {"subject": "hi"},
                                         "at": AT, "priority": "high", "remark": "x"})
    assert http.status_code == 201, http.text
    python = send.options(at=AT, priority="high", remark="x").enqueue("a@b", subject="hi")
    assert record(app.get(http.json()["id"])) == record(app.get(python.id))
    assert not app.get(python.id).meta  # nothing tagged outside a batch
    assert seen.seen == [(hook, "send") for _ in range(2) for hook in ("before", "after")]
    app.history.flush()
    assert enqueued_per_history(client, "send") == 2


def test_a_topic_body_that_no_store_can_keep_is_a_422(served):
    """The topic path checks its arguments as every enqueue does (codec.py)."""
    _, client, _ = served
    client.put("/v1/topics/t", json={"url": "http://127.0.0.1:9/"})
    answer = client.post("/v1/jobs", json={"topic": "t", "body": {"note": "a\u0000b"}})
    assert answer.status_code == 422 and "NUL" in answer.json()["error"]["message"], answer.text


def test_async_enqueues_and_workflows_run_the_same_chain(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/a.db")
    seen = Seen()
    app.add_middleware(seen)

    @app.task()
    def step(n: int = 0) -> int:
        return n

    async def produce() -> list[str]:
        with app.batch() as batch:
            member = await step.enqueue_async(1)
        handle = await chain(step.call(2), step.call()).enqueue_async(app)
        return [member.id, batch.id, *handle.ids]

    member, batch_id, *steps = asyncio.run(asyncio.wait_for(produce(), 30))
    info = app.get_batch(batch_id)
    assert info is not None and info.total == 1  # the async member joined its batch
    assert len(steps) == 2
    assert seen.seen == [("before", "step"), ("after", "step"),
                         ("before", "step"), ("before", "step"), ("after", "step"), ("after", "step")]
    assert app.history.flush() == 1  # one (minute, queue, task) cell: 3 enqueued
    app.close()
