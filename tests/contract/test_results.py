"""Waiting for results: decoded to the task's return annotation, JobFailed, HTTP ?wait=.
(The store side of waiting runs on every store in tests/contract.)"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from datetime import UTC, datetime

import pytest

import deferq
from deferq.backends.base import Outcome
from tests.server.test_server_api import client_for


@dataclasses.dataclass
class Receipt:
    total: int
    at: datetime


def test_a_result_comes_back_as_the_return_annotation():
    app = deferq.App("memory://", eager=True)

    @app.task
    def charge(cents: int) -> Receipt:
        return Receipt(cents, datetime(2026, 1, 2, tzinfo=UTC))

    @app.task
    def fail() -> None:
        raise ValueError("card declined")

    assert charge.enqueue(250).wait(timeout=1) == Receipt(250, datetime(2026, 1, 2, tzinfo=UTC))

    async def produce() -> Receipt:
        return await (await charge.enqueue_async(5)).wait_async(timeout=1)

    assert asyncio.run(produce()).total == 5
    failed = fail.options(max_attempts=1).enqueue()
    with pytest.raises(deferq.JobFailed, match="ValueError: card declined"):
        failed.wait(timeout=1)


@pytest.fixture(params=["sqlite", "redis"])
def url(request, tmp_path):
    """A SQLite file, and Redis (whose waits are woken by a token the finish pushes)."""
    if request.param == "redis":
        return request.getfixturevalue("redis_url")
    return f"sqlite:///{tmp_path}/deferq.db"


def test_http_wait_answers_when_the_job_finishes(url):
    with client_for(url) as api:
        job_id = api.post("/v1/jobs", json={"task": "work", "args": [1]}).json()["id"]
        backend = deferq.App(url).backend
        leased = backend.reserve(["default"], 1, "w", 30, (0, 1, 2))[0]
        threading.Timer(0.3, lambda: backend.settle([Outcome(leased, "succeeded", result=7)])).start()
        started = time.monotonic()
        shown = api.get(f"/v1/jobs/{job_id}?wait=10").json()
        assert shown["state"] == "succeeded" and shown["result"] == 7
        assert time.monotonic() - started < 3
        assert api.get(f"/v1/jobs/{job_id}?wait=99").status_code == 422


def test_dependencies_and_batches_over_http_and_the_cli(url):
    from click.testing import CliRunner

    from deferq.cli.main import main

    app = deferq.App(url)
    parent = app.enqueue("work", [1])
    child = app.enqueue("work", [2], after=[parent])
    with app.batch(on_complete=deferq.Call("report", (), {})) as b:
        app.enqueue("work", [3])
    with client_for(url) as api:
        shown = api.get(f"/v1/jobs/{child.id}").json()
        assert shown["state"] == "blocked" and shown["after"] == [parent.id]
        assert api.get(f"/v1/jobs/{parent.id}").json()["waiting"] == [child.id]
        batch = api.get(f"/v1/batches/{b.id}").json()
        assert (batch["total"], batch["pending"], batch["state"]) == (1, 1, "running")
        assert api.get("/v1/batches/nope").status_code == 404
    header = CliRunner().invoke(main, ["stats", "--url", url]).output
    assert "block" in header and "blocked, waiting for the jobs it runs after" in header
    out = CliRunner().invoke(main, ["job", parent.id, "--url", url]).output
    assert f"waited on by: {child.id}" in out
    assert f"runs after:   {parent.id}" in CliRunner().invoke(main, ["job", child.id, "--url", url]).output
