"""Jobs of a chunk task over the HTTP API: enqueued by name one item each (by a service
that does not know the task), run by a worker in calls, each job naming its call
(`chunk_call`) and a call's jobs listed by it (`?chunk=`); a service that knows the task
refuses a job that is not one item, with a 422 that says so."""

from __future__ import annotations

import pytest

import deferq
from deferq.server import ServerConfig, create_app
from deferq.worker import Worker, WorkerConfig
from tests.support.server_helpers import TestClient

pytestmark = pytest.mark.timeout(60)


def client_for(app: deferq.App) -> TestClient:
    return TestClient(create_app(ServerConfig(auth=False, error_log="off"), app))  # type: ignore[arg-type]


def index(ids: list[int]) -> list[int]:
    CALLS.append(list(ids))
    return [i * 10 for i in ids]


CALLS: list[list[int]] = []


def test_items_enqueued_by_name_run_in_calls_and_keep_their_own_results(tmp_path):
    url = f"sqlite:///{tmp_path}/deferq.db"
    CALLS.clear()
    with client_for(deferq.App(url)) as api:  # the service knows no task
        ids = [api.post("/v1/jobs", json={"task": "index", "args": [i], "queue": "index"}).json()["id"]
               for i in range(5)]
        worker_app = deferq.App(url)
        worker_app.task(queue="index", chunk=deferq.Chunk(size=10, wait=0.05))(index)
        Worker(worker_app, WorkerConfig(queues=("index",), burst=True, schedules=False)).run()
        assert CALLS == [[0, 1, 2, 3, 4]]
        jobs = [api.get(f"/v1/jobs/{job_id}").json() for job_id in ids]
        assert [(job["state"], job["result"]) for job in jobs] == [("succeeded", i * 10) for i in range(5)]
        # each names the call that ran them all, and the call's jobs are listed by it
        (call,) = {job["chunk_call"] for job in jobs}
        assert call is not None and call not in ids
        listed = api.get("/v1/jobs", params={"chunk": call}).json()["jobs"]
        assert [job["id"] for job in listed] == ids[::-1]  # newest first
        assert api.get("/v1/jobs", params={"chunk": call, "state": "dead"}).json()["jobs"] == []
        assert api.get("/v1/jobs", params={"chunk": call, "q": ids[2]}).json()["jobs"][0]["id"] == ids[2]
        assert api.get("/v1/jobs", params={"chunk": "another-call", "q": ids[2]}).json()["jobs"] == []
        assert api.get("/v1/jobs", params={"chunk": "x" * 65}).status_code == 422
        plain = api.post("/v1/jobs", json={"task": "other", "args": []}).json()["id"]
        assert api.get(f"/v1/jobs/{plain}").json()["chunk_call"] is None
        described = api.get("/openapi.json").json()["paths"]["/v1/jobs"]["get"]["parameters"]
        assert "chunk" in {parameter["name"] for parameter in described}


def test_a_service_that_knows_the_chunk_task_refuses_more_than_one_item(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")
    app.task(queue="index", chunk=deferq.Chunk(size=10))(index)
    with client_for(app) as api:
        refused = api.post("/v1/jobs", json={"task": "index", "args": [1, 2]})
        assert refused.status_code == 422 and "one item" in refused.json()["error"]["message"]
        assert api.post("/v1/jobs", json={"task": "index", "args": [1]}).status_code == 201
        assert api.get("/v1/jobs", params={"state": "queued"}).json()["jobs"][0]["args"] == [1]
