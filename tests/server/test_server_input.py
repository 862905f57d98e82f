"""Client input the HTTP API refuses with one sentence (a 422), on every store alike, and
never answers with a 500: NUL in any string or URL, integers beyond 64 bits, values nested
past 100 levels, tampered page cursors, a URL that does not parse; and one request the
store refuses never fails the requests stored with it (the group commit is split)."""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import replace

import httpx
import orjson
import pytest

import deferq
from deferq.server import ServerConfig, create_app
from tests.support.server_helpers import TestClient

STORES = ["sqlite_url", "postgres_url", "mysql_url", "redis_url"]


@pytest.fixture(params=STORES)
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(request.param))


@pytest.fixture
def api(url: str):
    app = deferq.App(url)
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as client:
        client.put("/v1/topics/orders", json={"url": "http://127.0.0.1:9/hook"})
        yield client
    app.close()


def post_raw(api: TestClient, body: bytes) -> httpx.Response:
    """POST /v1/jobs with a body written by hand (what json= cannot write)."""
    return api.post("/v1/jobs", headers={"content-type": "application/json"}, content=body)


def refused(answer: httpx.Response, says: str) -> None:
    assert answer.status_code == 422, answer.text
    assert says in answer.json()["error"]["message"], answer.text


NUL_BODIES = [
    ("/v1/jobs", {"task": "t", "args": ["a\u0000b"]}, "args[0] holds the NUL character"),
    ("/v1/jobs", {"task": "t", "kwargs": {"a\u0000": 1}}, "a key of kwargs holds the NUL character"),
    ("/v1/jobs", {"task": "t", "key": "k\u0000"}, "key holds the NUL character"),
    ("/v1/jobs", {"task": "t\u0000"}, "task holds the NUL character"),
    ("/v1/jobs", {"task": "t", "remark": "\u0000"}, "remark holds the NUL character"),
    ("/v1/jobs", {"topic": "orders", "body": {"text": "\u0000"}}, "body.text holds the NUL character"),
    ("/v1/jobs/batch", {"jobs": [{"task": "t"}, {"task": "t", "args": ["\u0000"]}]},
     "jobs[1].args[0] holds the NUL character"),
    ("/v1/dead/delete-batch", {"ids": ["\u0000"]}, "ids[0] holds the NUL character"),
]


def test_nul_in_a_body_is_a_422_on_every_store(api):
    for path, body, says in NUL_BODIES:
        refused(api.post(path, json=body), says)
    refused(api.put("/v1/jobs/X/remark", json={"remark": "\u0000"}), "remark holds the NUL character")
    refused(api.put("/v1/topics/t", json={"url": "http://127.0.0.1:9/", "headers": {"X-Team": "a\u0000"}}),
            "headers.X-Team holds the NUL character")
    # an escaped backslash before u0000 is six characters of text, not NUL
    assert api.post("/v1/jobs", json={"task": "t", "args": ["\\u0000"]}).status_code == 201
    assert api.get("/v1/jobs").json()["jobs"][0]["args"] == ["\\u0000"]


@pytest.mark.parametrize("where", [
    "/v1/jobs?q=ab%00cd", "/v1/jobs?queue=a%00", "/v1/jobs?task=t%00", "/v1/jobs?key=k%00", "/v1/dead?queue=a%00",
    "/v1/jobs/abc%00", "/v1/batches/b%00", "/v1/topics/t%00", "/v1/dead/retry?queue=a%00"])
def test_nul_in_a_url_is_a_422_on_every_store(api, where):
    method = "POST" if where.startswith("/v1/dead/retry") else "GET"
    refused(api.request(method, where), "the URL holds the NUL character")


def test_integers_beyond_64_bits_are_refused_not_stored_as_floats(api):
    refused(api.post("/v1/jobs", json={"task": "t", "args": [1, 2**64]}), "args[1] is an integer beyond 64 bits")
    refused(post_raw(api, b'{"task": "t", "kwargs": {"n": -9223372036854775809}}'),
            "kwargs.n is an integer beyond 64 bits (-9223372036854775809)")
    refused(api.post("/v1/jobs", json={"topic": "orders", "body": {"id": 10**30}}), "body.id is an integer beyond")
    # the edges of the range, long digits in a string, a large float: kept as sent
    sent = [2**64 - 1, -(2**63), "123456789012345678901234567890", 1e30]
    job = api.post("/v1/jobs", json={"task": "t", "args": sent}).json()
    assert api.get(f"/v1/jobs/{job['id']}").json()["args"] == sent


def test_nesting_past_100_levels_is_a_422(api):
    def nested(levels: int) -> bytes:
        return b"[" * levels + b"]" * levels

    says = "nests arrays and objects more than 100 levels deep"
    for levels in (100, 254, 1000, 5000):  # the request itself is the first level; 5000: past orjson's limit
        refused(post_raw(api, b'{"task": "t", "args": ' + nested(levels) + b"}"), says)
    refused(post_raw(api, b'{"topic": "orders", "body": ' + nested(254) + b"}"), says)
    assert post_raw(api, b'{"task": "t", "args": ' + nested(99) + b"}").status_code == 201
    assert post_raw(api, b'{"topic": "orders", "body": ' + nested(99) + b"}").status_code == 201


def test_an_event_whose_data_is_over_its_limit_is_a_422_and_stores_nothing(api):
    """The data of an event is kept for later waiters: over 64 KiB of JSON it is refused,
    with the sentence the Python call raises (PayloadError), not a 500."""
    refused(api.post("/v1/events", json={"event": "paid", "key": "k", "data": "x" * 70_000}),
            "over the 65536-byte limit")
    assert api.get("/v1/events").json()["events"] == []
    assert api.post("/v1/events", json={"event": "paid", "key": "k", "data": "x" * 60_000}).status_code == 200


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


TAMPERED = [b'{"a": 1}', b'{"after": [1]}', b'{"after": "x"}', b'{"after": true}', b'{"after": 1.5}',
            b'{"after": 99999999999999999999999}', b'[0, "x", "y"]', b'[-1, 0, "x"]', b"[99]", b'[2, 1e999, "x"]',
            b'"text"', b"null", b"[]", b"7.5", b'{"0": [0, "x", 1]}']


@pytest.mark.parametrize("store", [*STORES, "memory_url", "redis_shards_url"])
def test_a_tampered_cursor_is_a_422_on_every_store(request, store):
    app = deferq.App(request.getfixturevalue(store))
    try:
        with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
            for _ in range(3):
                assert api.post("/v1/jobs", json={"task": "t", "args": ["abc"]}).status_code == 201
            given = api.get("/v1/jobs", params={"limit": 1}).json()["cursor"]
            for raw in TAMPERED:
                for params in ({}, {"q": "abc"}, {"task": "t"}, {"state": "queued"}):
                    answer = api.get("/v1/jobs", params={"cursor": _cursor(raw), **params})
                    refused(answer, "cursor is not one this store gave")
            assert len(api.get("/v1/jobs", params={"cursor": given, "limit": 5}).json()["jobs"]) == 2
    finally:
        app.close()


@pytest.mark.parametrize("store", [*STORES, "memory_url"])
def test_state_blocked_lists_the_blocked_jobs(request, store):
    app = deferq.App(request.getfixturevalue(store))

    @app.task
    def step() -> None: ...

    try:
        parent = step.enqueue()
        child = step.options(after=[parent.id], queue="later").enqueue()
        with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
            for params in ({"state": "blocked"}, {"state": "blocked", "queue": "later"}, {"queue": "later"}):
                answer = api.get("/v1/jobs", params=params)
                assert answer.status_code == 200, answer.text
                assert [(j["id"], j["state"]) for j in answer.json()["jobs"]] == [(child.id, "blocked")]
            assert api.get("/v1/jobs", params={"state": "blocked", "queue": "default"}).json()["jobs"] == []
    finally:
        app.close()


def test_a_topic_url_that_does_not_parse_is_a_422(api):
    refused(api.put("/v1/topics/t", json={"url": "http://[::1/"}), "is not a URL")


def test_one_refused_request_never_fails_the_others_stored_with_it(postgres_url, tmp_path):
    """500 concurrent producers on PostgreSQL, two bad: one sends NUL (refused before the
    store: 422), one carries a payload PostgreSQL itself refuses (a store error, made here
    by rewriting that request's payload in the group commit). Every good request is
    stored; the error log grows by one line for the request the store refused."""
    app = deferq.App(postgres_url)
    error_log = tmp_path / "error.log"
    web = create_app(ServerConfig(auth=False, error_log=str(error_log)), app)
    original = app.backend.enqueue_many_async
    calls: list[int] = []

    async def poisoning(items, connection=None):
        calls.append(len(items))
        items = [replace(item, payload=b'[["\\u0000"], {}]') if item.job.kwargs.get("body") == "poison" else item
                 for item in items]
        return await original(items, connection)

    app.backend.enqueue_many_async = poisoning

    async def burst() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=web)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            assert (await client.put("/v1/topics/orders", json={"url": "http://127.0.0.1:9/"})).status_code == 201
            bodies = [{"topic": "orders", "body": i} for i in range(500)]
            bodies[100] = {"topic": "orders", "body": "a\u0000b"}
            bodies[300] = {"topic": "orders", "body": "poison"}
            return await asyncio.gather(*(client.post("/v1/jobs", json=body) for body in bodies))

    try:
        started = time.monotonic()
        answers = asyncio.run(asyncio.wait_for(burst(), 60))
        elapsed = time.monotonic() - started
        statuses = [a.status_code for a in answers]
        assert statuses[100] == 422 and "body holds the NUL character" in answers[100].text
        assert statuses[300] == 500 and "the store refused the job" in answers[300].text
        good = [a for i, a in enumerate(answers) if i not in (100, 300)]
        assert {a.status_code for a in good} == {201}, [a.text for a in good if a.status_code != 201][:3]
        stored = {app.backend.get(a.json()["id"]).kwargs["body"] for a in good}
        assert stored == set(range(500)) - {100, 300}
        logged = [orjson.loads(line) for line in error_log.read_text().splitlines()]
        assert [line["message"] for line in logged] == [
            "the store refused a request's jobs: unsupported Unicode escape sequence"]  # one line, no trace
        assert len(calls) < 150, f"{len(calls)} store calls for 500 requests ({elapsed:.1f}s)"
    finally:
        app.close()
