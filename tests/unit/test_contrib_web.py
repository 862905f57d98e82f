"""deferq.contrib.starlette and deferq.contrib.flask, through the example apps in
examples/fastapi_app and examples/flask_app, on SQLite and in-memory stores: a request
stores a job, a burst worker runs it, the app reports it done."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

import deferq
from deferq.worker import Worker, WorkerConfig
from tests.support.server_helpers import TestClient  # Starlette's (FastAPI's too), imported quietly

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_fresh = itertools.count()


def load_example(relative: str):
    """A fresh copy of an example module (each test gets its own App and tasks)."""
    spec = importlib.util.spec_from_file_location(f"deferq_example_{next(_fresh)}", EXAMPLES / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def store_url(store: str, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}" if store == "sqlite" else "memory://"


def run_worker(app: deferq.App) -> None:
    assert Worker(app, WorkerConfig(queues=("email",), burst=True, concurrency=2)).run() == 0


def count_closes(monkeypatch, app: deferq.App) -> list[int]:
    closes: list[int] = []
    original = app.close
    monkeypatch.setattr(app, "close", lambda: (closes.append(1), original())[1])
    return closes


# -- FastAPI / Starlette ------------------------------------------------------------------


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_fastapi_example(store, tmp_path, monkeypatch):
    monkeypatch.setenv("DEFERQ_URL", store_url(store, tmp_path))
    example = load_example("fastapi_app/main.py")
    closes = count_closes(monkeypatch, example.jobs)

    with TestClient(example.api) as client:  # runs the lifespan: the store opens here
        if store == "sqlite":
            assert (tmp_path / "jobs.db").exists(), "the store was not opened at start-up"
        reply = client.post("/signup", json={"email": "a@example.com"})
        assert reply.status_code == 202 and reply.json()["state"] == "queued"
        job_id = reply.json()["job"]
        assert example.jobs.get(job_id).args == ("a@example.com",)

        run_worker(example.jobs)
        assert client.get(f"/jobs/{job_id}").json() == {
            "id": job_id, "state": "succeeded", "result": "welcome mail sent to a@example.com",
        }
        assert client.get("/jobs/nope").status_code == 404
        assert closes == []
    assert closes == [1], "the store was not closed at shutdown"


def test_a_store_that_cannot_open_fails_start_up():
    from starlette.applications import Starlette

    from deferq.contrib.starlette import deferq_lifespan

    with pytest.raises(deferq.ConfigError, match="names no file"):
        with TestClient(Starlette(lifespan=deferq_lifespan(deferq.App("sqlite:///")))):
            pass


def test_deferq_inside_your_own_lifespan(tmp_path):
    """Both ways: deferq_store inside your lifespan, and deferq_lifespan around it."""
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from deferq.contrib.starlette import deferq_lifespan, deferq_store

    jobs = deferq.App(f"sqlite:///{tmp_path / 'jobs.db'}")
    ping = jobs.task(name="ping")(lambda: "pong")

    @asynccontextmanager
    async def mine(_app):
        async with deferq_store(jobs):
            yield {"greeting": "hello"}

    @asynccontextmanager
    async def plain(_app):
        yield {"greeting": "hi"}

    async def enqueue(request):
        job = await ping.enqueue_async()
        same = getattr(request.state, "deferq", jobs) is jobs
        return JSONResponse({"job": job.id, "greeting": request.state.greeting, "same": same})

    routes = [Route("/", enqueue, methods=["POST"])]
    for lifespan, greeting in ((mine, "hello"), (deferq_lifespan(jobs, plain), "hi")):
        with TestClient(Starlette(routes=routes, lifespan=lifespan)) as client:
            reply = client.post("/").json()
            assert reply["greeting"] == greeting and reply["same"]
            assert jobs.get(reply["job"]).state == "queued"
    assert Worker(jobs, WorkerConfig(burst=True)).run() == 0
    assert jobs.stats()["default"]["succeeded"] == 2
    jobs.close()


# -- Flask --------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_flask_example(store, tmp_path):
    example = load_example("flask_app/app.py")
    flask_app = example.create_app({"DEFERQ_URL": store_url(store, tmp_path), "TESTING": True})
    assert flask_app.extensions["deferq"] is example.deferq_ext
    client = flask_app.test_client()

    reply = client.post("/signup", json={"email": "b@example.com"})
    assert reply.status_code == 202 and reply.json["state"] == "queued"
    job_id = reply.json["job"]
    assert example.deferq_ext.get(job_id).args == ("b@example.com",)
    if store == "sqlite":
        assert (tmp_path / "jobs.db").exists()

    run_worker(example.deferq_ext)
    assert client.get(f"/jobs/{job_id}").json == {
        "id": job_id, "state": "succeeded", "result": "welcome mail sent to b@example.com",
    }
    assert client.get("/jobs/nope").status_code == 404
    example.deferq_ext.close()


def test_flask_the_last_init_app_wins(tmp_path):
    """One extension, one Flask app per test (each with its own store): the tasks
    declared on the extension follow the latest init_app."""
    example = load_example("flask_app/app.py")
    first = example.create_app({"DEFERQ_URL": f"sqlite:///{tmp_path / 'first.db'}"})
    first.test_client().post("/signup", json={"email": "c@example.com"})

    second = example.create_app({"DEFERQ_URL": f"sqlite:///{tmp_path / 'second.db'}"})
    job_id = second.test_client().post("/signup", json={"email": "d@example.com"}).json["job"]
    assert example.deferq_ext.get(job_id).args == ("d@example.com",)
    assert example.deferq_ext.stats()["email"]["queued"] == 1
    example.deferq_ext.close()

    with pytest.raises(deferq.ConfigError, match="eagerly"):
        example.create_app({"DEFERQ_URL": "memory://?eager=1"})


def test_flask_eager_extension():
    from flask import Flask

    from deferq.contrib.flask import Deferq

    ext = Deferq(url="memory://?eager=1")
    double = ext.task(name="double")(lambda n: 2 * n)
    flask_app = Flask(__name__)
    flask_app.config["DEFERQ_URL"] = "memory://?eager=1"
    ext.init_app(flask_app)
    with flask_app.app_context():
        job = double.enqueue(21)
    assert job.state == "succeeded" and job.result == 42
    ext.close()


@pytest.mark.parametrize("close_on_teardown", [False, True])
def test_flask_teardown(close_on_teardown, tmp_path, monkeypatch):
    example = load_example("flask_app/app.py")
    flask_app = example.create_app({"DEFERQ_URL": f"sqlite:///{tmp_path / 'jobs.db'}",
                                    "DEFERQ_CLOSE_ON_TEARDOWN": close_on_teardown})
    closes = count_closes(monkeypatch, example.deferq_ext)
    client = flask_app.test_client()
    first = client.post("/signup", json={"email": "f@example.com"}).json["job"]
    second = client.post("/signup", json={"email": "g@example.com"}).json["job"]
    assert len(closes) == (2 if close_on_teardown else 0)
    assert {example.deferq_ext.get(first).state, example.deferq_ext.get(second).state} == {"queued"}
    example.deferq_ext.close()
