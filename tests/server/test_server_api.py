"""The REST API: jobs, topics, dead letters, auth on every route, and every fault answered
as JSON with the right status (400, 401, 403, 404, 409, 413, 422, 429, 503), never 500."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlsplit

import httpx
import pytest

import deferq
from deferq.backends.base import Outcome
from deferq.server import ServerConfig, create_app
from deferq.server.api.routes import route_scopes
from deferq.server.http import auth as auth_module
from tests.support.alert_receivers import free_port
from tests.support.server_helpers import TestClient, running_server

# Its tests share a module fixture: one xdist worker runs them all and builds it once.
pytestmark = pytest.mark.xdist_group("server_api")


def client_for(url: str, **config: object) -> TestClient:
    app = deferq.App(url)
    settings = {"auth": False, "error_log": "off", **config}
    return TestClient(create_app(ServerConfig(**settings), app))  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/deferq.db"


@pytest.fixture
def api(store):
    with client_for(store) as client:
        yield client


@pytest.fixture
def topic(api) -> dict:
    return api.put("/v1/topics/orders", json={"url": "http://127.0.0.1:9/hook"}).json()


JSON_TYPE = {"content-type": "application/json"}  # a server without auth takes no other body


def error_of(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.json()["error"]["message"]


# -- jobs ------------------------------------------------------------------------------


def test_a_topic_job_takes_the_topic_defaults(api):
    api.put("/v1/topics/pay", json={"url": "http://127.0.0.1:9/", "delay_ms": 60000, "ttr": 7,
                                    "max_attempts": 4, "priority": "high", "queue": "pay"})
    receipt = api.post("/v1/jobs", json={"topic": "pay", "body": {"id": 1}})
    assert receipt.status_code == 201
    assert receipt.json()["state"] == "scheduled"
    job = api.get(f"/v1/jobs/{receipt.json()['id']}").json()
    assert (job["topic"], job["body"], job["queue"], job["priority"]) == ("pay", {"id": 1}, "pay", "high")
    assert (job["max_attempts"], job["ttr"]) == (4, 7)
    assert 59 < job["run_at"] - job["created_at"] <= 60


def test_request_fields_override_the_topic(api, topic):
    at = 4102444800  # 2100-01-01
    job_id = api.post("/v1/jobs", json={"topic": "orders", "body": 1, "at": at, "ttr": 3,
                                        "max_attempts": 2, "priority": "low"}).json()["id"]
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert (job["run_at"], job["ttr"], job["max_attempts"], job["priority"]) == (at, 3, 2, "low")
    iso = api.post("/v1/jobs", json={"topic": "orders", "at": "2100-01-01T00:00:00Z"}).json()
    assert iso["run_at"] == at


def test_a_key_that_succeeded_within_unique_for_ms_answers_with_200(api, store):
    first = api.post("/v1/jobs", json={"task": "send", "key": "daily:7", "unique_for_ms": 3_600_000}).json()
    backend = deferq.App(store).backend
    backend.settle([Outcome(backend.reserve(["default"], 1, "w", 5, (0, 1, 2))[0], "succeeded")])
    again = api.post("/v1/jobs", json={"task": "send", "key": "daily:7", "unique_for_ms": 3_600_000})
    assert again.status_code == 200 and again.json()["id"] == first["id"]
    refused = api.post("/v1/jobs", json={"task": "send", "unique_for_ms": 1000})
    assert refused.status_code == 422 and "unique_for needs a key" in error_of(refused)


def test_jobs_are_found_by_tag(api):
    tagged = api.post("/v1/jobs", json={"task": "sync", "tags": ["tenant:7", "import"]}).json()
    api.post("/v1/jobs", json={"task": "sync", "tags": ["tenant:70"], "key": "k70"})
    found = api.get("/v1/jobs", params={"tag": "tenant:7"}).json()["jobs"]
    assert [job["id"] for job in found] == [tagged["id"]] and found[0]["tags"] == ["tenant:7", "import"]
    assert api.get("/v1/jobs", params={"tag": "tenant:7", "key": "k70"}).json()["jobs"] == []
    assert api.get("/v1/jobs", params={"tag": "tenant:70", "state": "queued", "q": "k70"}).json()["jobs"]


def test_task_jobs_keys_listing_and_cancel(api):
    first = api.post("/v1/jobs", json={"task": "send", "args": [1], "kwargs": {"a": "b"},
                                       "key": "reset:1", "queue": "email", "delay_ms": 5000})
    again = api.post("/v1/jobs", json={"task": "send", "args": [2], "key": "reset:1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    found = api.get("/v1/jobs", params={"key": "reset:1"}).json()["jobs"]
    assert [(j["task"], j["args"], j["kwargs"], j["queue"]) for j in found] == [
        ("send", [1], {"a": "b"}, "email")]
    assert api.get("/v1/jobs", params={"key": "nothing"}).json() == {"jobs": []}
    scheduled = api.get("/v1/jobs", params={"state": "scheduled"}).json()["jobs"]
    assert [j["id"] for j in scheduled] == [first.json()["id"]]
    assert api.delete(f"/v1/jobs/{first.json()['id']}").json()["state"] == "cancelled"
    again = api.delete(f"/v1/jobs/{first.json()['id']}")
    assert again.status_code == 409 and "cancelled" in error_of(again)
    assert api.get("/v1/jobs/NOPE").status_code == 404
    assert api.delete("/v1/jobs/NOPE").status_code == 404


def test_job_filters_combine(api):
    """key, state and queue narrow one another; with neither key nor state, every state."""
    first = api.post("/v1/jobs", json={"task": "send", "key": "k1", "queue": "email", "delay_ms": 5000}).json()
    second = api.post("/v1/jobs", json={"task": "send", "queue": "sms"}).json()

    def ids(**params: object) -> list[str]:
        return [j["id"] for j in api.get("/v1/jobs", params=params).json()["jobs"]]

    assert ids(key="k1", state="scheduled") == ids(key="k1", queue="email") == [first["id"]]
    assert ids(key="k1", state="queued") == ids(key="k1", queue="sms") == []
    assert sorted(ids()) == sorted([first["id"], second["id"]]) and len(ids(limit=1)) == 1
    assert ids(queue="sms") == ids(state="queued") == [second["id"]]


def test_a_job_may_expire(api):
    later = api.post("/v1/jobs", json={"task": "send", "expires": 60}).json()
    shown = api.get(f"/v1/jobs/{later['id']}").json()
    assert shown["expires_at"] == pytest.approx(shown["created_at"] + 60)
    at = api.post("/v1/jobs", json={"task": "send", "expires": "2031-01-01T00:00:00Z"}).json()
    assert api.get(f"/v1/jobs/{at['id']}").json()["expires_at"] == 1924992000.0
    bad = api.post("/v1/jobs", json={"task": "send", "expires": "tomorrow"})
    assert bad.status_code == 422 and "expires" in error_of(bad)


def test_on_conflict_replace_and_debounce(api):
    first = api.post("/v1/jobs", json={"task": "reindex", "args": [1], "key": "r:1", "delay_ms": 60000})
    replaced = api.post("/v1/jobs", json={"task": "reindex", "args": [2], "key": "r:1", "on_conflict": "replace"})
    assert (first.status_code, replaced.status_code) == (201, 200)
    assert replaced.json()["id"] == first.json()["id"] and replaced.json()["state"] == "queued"
    assert api.get(f"/v1/jobs/{first.json()['id']}").json()["args"] == [2]
    debounced = api.post("/v1/jobs", json={"task": "reindex", "args": [3], "key": "r:1", "on_conflict": "debounce",
                                            "delay_ms": 60000, "max_wait_ms": 1000})
    shown = api.get(f"/v1/jobs/{debounced.json()['id']}").json()
    assert shown["args"] == [3] and shown["run_at"] == pytest.approx(shown["created_at"] + 1)
    bad = api.post("/v1/jobs", json={"task": "reindex", "on_conflict": "replace"})
    assert bad.status_code == 422 and "needs a key" in error_of(bad)


def test_cancel_asks_a_running_job_to_stop(api, store):
    job = api.post("/v1/jobs", json={"task": "send", "args": [1]}).json()
    app = deferq.App(store)
    app.backend.reserve(["default"], 1, "w1", 60, (0, 1, 2))
    app.close()
    asked = api.delete(f"/v1/jobs/{job['id']}")
    assert asked.status_code == 202
    assert asked.json() == {"id": job["id"], "state": "active", "cancel_requested": True}


def test_batch_enqueue_and_queue_counts(api, topic):
    jobs = [{"topic": "orders", "body": i} for i in range(5)] + [{"task": "t", "queue": "q"}]
    answer = api.post("/v1/jobs/batch", json={"jobs": jobs})
    assert answer.status_code == 201 and len(answer.json()["jobs"]) == 6
    queues = api.get("/v1/queues").json()["queues"]
    assert queues["callbacks"]["queued"] == 5 and queues["q"]["queued"] == 1
    bad = api.post("/v1/jobs/batch", json={"jobs": [{"topic": "orders"}, {"task": 5}]})
    assert bad.status_code == 422 and error_of(bad).startswith("jobs[1]")


def test_dead_letters_list_retry_and_purge(api, store):
    app = deferq.App(store)
    stored = [app.enqueue("boom", queue="q") for _ in range(3)]
    leased = app.backend.reserve(["q"], 3, "w", 30, [0, 1, 2])
    app.backend.settle([Outcome(job, "dead", error="no luck") for job in leased])
    dead = api.get("/v1/dead").json()["jobs"]
    assert {j["id"] for j in dead} == {j.id for j in stored} and dead[0]["error"] == "no luck"
    assert api.post(f"/v1/dead/{stored[0].id}/retry").json() == {"id": stored[0].id, "state": "queued"}
    assert api.post(f"/v1/dead/{stored[0].id}/retry").status_code == 409
    assert api.post("/v1/dead/NOPE/retry").status_code == 404
    assert api.post("/v1/dead/retry", params={"queue": "q"}).json() == {"retried": 2}
    leased = app.backend.reserve(["q"], 3, "w", 30, [0, 1, 2])
    app.backend.settle([Outcome(job, "dead", error="again") for job in leased])
    assert api.delete("/v1/dead").json() == {"purged": 3}
    assert api.get("/v1/dead").json() == {"jobs": []}
    app.close()


def test_limits_are_set_paused_listed_and_cleared_over_the_api(api, store):
    assert api.get("/v1/limits").json() == {"limits": {}}
    assert api.put("/v1/limits/send_sms", json={"rate": "50/s"}).json() == {
        "rate": "50/s", "concurrency": None, "paused_for": None}
    paused = api.put("/v1/limits/customer:7", json={"concurrency": 2, "pause_s": 30}).json()
    assert paused["concurrency"] == 2 and 28 < paused["paused_for"] <= 30
    assert deferq.App(store).limits.get("send_sms")["rate"] == "50/s"  # kept in the store
    assert set(api.get("/v1/limits").json()["limits"]) == {"send_sms", "customer:7"}
    refused = api.put("/v1/limits/send_sms", json={"rate": "lots"})
    assert refused.status_code == 422 and 'rate must be runs per period, like "50/s"' in error_of(refused)
    assert api.put("/v1/limits/x", json={"concurrency": 0}).status_code == 422
    assert api.post("/v1/limits/customer:7/resume").json() == {  # the pause ends, the limit stays
        "rate": None, "concurrency": 2, "paused_for": None}
    assert api.post("/v1/limits/customer:7/resume").status_code == 404  # not paused
    assert "limit 'nothing' is not paused" in error_of(api.post("/v1/limits/nothing/resume"))
    assert api.delete("/v1/limits/send_sms").json() == {"deleted": "send_sms"}
    assert api.delete("/v1/limits/send_sms").status_code == 404


def test_pause_and_resume_a_queue_over_the_api(api, store):
    assert api.post("/v1/queues/q/pause").json() == {"queue": "q", "paused": True, "changed": True}
    assert api.post("/v1/queues/q/pause").json()["changed"] is False
    api.post("/v1/jobs", json={"task": "t", "queue": "q"})
    queues = api.get("/v1/queues").json()["queues"]
    assert queues["q"]["paused"] is True and queues["q"]["queued"] == 1
    app = deferq.App(store)
    assert app.backend.reserve(["q"], 5, "w", 30, [0, 1, 2]) == []
    assert api.post("/v1/queues/q/resume").json() == {"queue": "q", "paused": False, "changed": True}
    assert api.get("/v1/queues").json()["queues"]["q"]["paused"] is False
    assert len(app.backend.reserve(["q"], 5, "w", 30, [0, 1, 2])) == 1
    app.close()
    bad = api.post("/v1/queues/two%20words/pause")
    assert bad.status_code == 422 and "queue name" in error_of(bad)


def test_remark_last_worker_and_updated_at_over_the_api(api, store, topic):
    sent = api.post("/v1/jobs", json={"topic": "orders", "body": {}, "remark": "a callback"}).json()
    assert api.get(f"/v1/jobs/{sent['id']}").json()["remark"] == "a callback"
    receipt = api.post("/v1/jobs", json={"task": "t", "remark": "from the shop"}).json()
    job = api.get(f"/v1/jobs/{receipt['id']}").json()
    assert job["remark"] == "from the shop" and job["updated_at"] == job["created_at"]
    assert job["worker"] is None and job["last_worker"] is None
    app = deferq.App(store)
    [leased] = app.backend.reserve(["default"], 1, "w-1", 30, [0, 1, 2])
    app.backend.settle([Outcome(leased, "succeeded")])
    app.close()
    job = api.get(f"/v1/jobs/{receipt['id']}").json()
    assert job["last_worker"] == "w-1" and job["worker"] is None and job["updated_at"] >= job["finished_at"]
    put = api.put(f"/v1/jobs/{receipt['id']}/remark", json={"remark": "refunded"})
    assert put.json() == {"id": receipt["id"], "remark": "refunded"}
    assert api.get(f"/v1/jobs/{receipt['id']}").json()["remark"] == "refunded"
    assert api.put(f"/v1/jobs/{receipt['id']}/remark", json={"remark": None}).json()["remark"] is None
    assert api.put("/v1/jobs/NOPE/remark", json={"remark": "x"}).status_code == 404
    assert api.put(f"/v1/jobs/{receipt['id']}/remark", json={"remark": "x" * 1001}).status_code == 422


def test_delete_dead_letters_by_id(api, store):
    app = deferq.App(store)
    stored = [app.enqueue("boom", queue="q") for _ in range(3)]
    leased = app.backend.reserve(["q"], 2, "w", 30, [0, 1, 2])
    app.backend.settle([Outcome(job, "dead", error="no luck") for job in leased])
    ids = [job.id for job in stored]
    answer = api.post("/v1/dead/delete-batch", json={"ids": [*ids, "NOPE"]}).json()
    assert answer == {"deleted": 2, "not_deleted": [ids[2], "NOPE"]}  # the third one still waits
    assert app.get(ids[0]) is None and app.get(ids[2]) is not None
    assert api.post("/v1/dead/delete-batch", json={"ids": []}).status_code == 422
    app.close()


# -- topics ----------------------------------------------------------------------------


def test_topics_crud_keeps_the_signing_secret(api):
    created = api.put("/v1/topics/t1", json={"url": "https://example.invalid/cb"})
    assert created.status_code == 201
    secret = created.json()["signing_secret"]
    assert created.json()["max_attempts"] == 10
    assert created.json()["backoff"] == {"kind": "linear", "first": 1, "step": 2, "unit": 60}
    replaced = api.put("/v1/topics/t1", json={"url": "https://example.invalid/v2", "method": "PUT"})
    assert replaced.status_code == 200 and replaced.json()["signing_secret"] == secret
    assert api.get("/v1/topics/t1").json()["url"] == "https://example.invalid/v2"
    assert [t["name"] for t in api.get("/v1/topics").json()["topics"]] == ["t1"]
    assert api.delete("/v1/topics/t1").json() == {"deleted": "t1"}
    assert api.get("/v1/topics/t1").status_code == 404
    assert api.delete("/v1/topics/t1").status_code == 404


@pytest.mark.parametrize(("body", "says"), [
    ({}, "needs a url"),
    ({"url": "ftp://x/"}, "http:// or https://"),
    ({"url": "http://x/", "retry_condition": "{res.code} !! 200"}, "retry_condition: unexpected "
                                                                    "'!' at position 11"),
    ({"url": "http://x/", "retry_condition": "{res.code} == "}, "position 14"),
    ({"url": "http://x/", "max_attempts": 0}, "max_attempts"),
    ({"url": "http://x/", "backoff": {"kind": "cubic"}}, "backoff.kind"),
    ({"url": "http://x/", "backoff": {"kind": "fixed", "seconds": -1}}, "seconds"),
    ({"url": "http://x/", "backoff": {"kind": "schedule", "seconds": []}}, "backoff.seconds"),
    ({"url": "http://x/", "method": "GET"}, "method"),
    ({"url": "http://x/", "headers": {"a": 1}}, "headers"),
    ({"url": "http://x/", "signing_secret": "short"}, "16 characters"),
    ({"url": "http://x/", "colour": "red"}, "unknown field 'colour'"),
    ([1, 2], "must be a JSON object, got an array"),
])
def test_a_bad_topic_is_a_422_naming_the_problem(api, body, says):
    answer = api.put("/v1/topics/t1", json=body)
    assert answer.status_code == 422
    assert says in error_of(answer)


@pytest.mark.parametrize(("headers", "says"), [
    ({"X-Evil": "a\r\nX-Injected: 1"}, "the value of X-Evil holds a line break ('\\r')"),
    ({"X-Team": "billing\n"}, "the value of X-Team holds a line break ('\\n')"),
    ({"X-Team": "caf\u00e9"}, "the value of X-Team holds a non-ASCII character ('\u00e9')"),
    ({"X-Team": "a\x01b"}, "the value of X-Team holds a control character"),
    ({"X-T\u00e9am": "billing"}, "'X-T\u00e9am' is not a header name"),
    ({"X Team": "billing"}, "'X Team' is not a header name"),
    ({"X-Team:": "billing"}, "'X-Team:' is not a header name"),
    ({"": "billing"}, "'' is not a header name"),
    ({"Content-Length": "5"}, "Content-Length is set by deferq"),
    ({"transfer-encoding": "chunked"}, "transfer-encoding is set by deferq"),
])
def test_topic_headers_that_no_delivery_could_send_are_a_422(api, headers, says):
    answer = api.put("/v1/topics/t1", json={"url": "http://x/", "headers": headers})
    assert answer.status_code == 422, answer.text
    assert says in error_of(answer) and error_of(answer).startswith("headers: ")
    assert api.get("/v1/topics/t1").status_code == 404


def test_printable_ascii_topic_headers_are_kept(api):
    headers = {"X-Team": "billing", "Authorization": "Bearer a.b-c_d~e+f/g=", "X-Empty": "",
               "X-Tab": "a\tb", "x-odd!#$%&'*+.^_`|~": "{\"json\": [1, 2]}"}
    answer = api.put("/v1/topics/t1", json={"url": "http://x/", "headers": headers})
    assert answer.status_code == 201, answer.text
    assert api.get("/v1/topics/t1").json()["headers"] == headers


def test_max_answer_bytes_is_a_topic_setting(api):
    assert api.put("/v1/topics/t1", json={"url": "http://x/"}).json()["max_answer_bytes"] == 1048576
    kept = api.put("/v1/topics/t1", json={"url": "http://x/", "max_answer_bytes": 2048})
    assert kept.status_code == 200 and api.get("/v1/topics/t1").json()["max_answer_bytes"] == 2048
    for bad in (0, -1, 64 * 2**20 + 1, 1.5, "1MB", True):
        answer = api.put("/v1/topics/t1", json={"url": "http://x/", "max_answer_bytes": bad})
        assert answer.status_code == 422 and "max_answer_bytes" in error_of(answer), bad


@pytest.mark.parametrize(("url", "says"), [
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata address"),
    ("http://[fd00:ec2::254]/", "fd00:ec2::254 is a cloud metadata address"),
    ("http://169.254.10.1:8080/", "169.254.10.1 is a link-local address"),
    ("http://[fe80::1]/", "fe80::1 is a link-local address"),
    ("http://0.0.0.0:8080/", "0.0.0.0 is an unspecified address"),
    ("http://[::]/", ":: is an unspecified address"),
    ("http://224.0.0.1/", "224.0.0.1 is a multicast address"),
    ("http://10.0.0.7/hook", "10.0.0.7 is a private address"),
    ("http://[::ffff:169.254.169.254]/", "reaches 169.254.169.254, which is a cloud metadata"),
    ("http://x:99999/", "port that is not a number"),
])
def test_a_topic_url_the_callback_policy_refuses_is_a_422(api, url, says):
    answer = api.put("/v1/topics/t1", json={"url": url})
    assert answer.status_code == 422, answer.text
    assert says in error_of(answer)
    assert api.get("/v1/topics/t1").status_code == 404


def test_loopback_is_refused_unless_the_policy_allows_it(api, monkeypatch):
    from deferq.net.policy import POLICY_ENV

    assert api.put("/v1/topics/t1", json={"url": "http://127.0.0.1:9/"}).status_code == 201  # tests allow it
    monkeypatch.setenv(POLICY_ENV, "")  # the default policy
    answer = api.put("/v1/topics/t1", json={"url": "http://127.0.0.1:9/"})
    assert answer.status_code == 422
    assert error_of(answer) == ("url 'http://127.0.0.1:9/' is refused by the network policy: 127.0.0.1 "
                                "is a loopback address (allow it with allow_networks in "
                                "DEFERQ_CALLBACK_POLICY)")
    assert api.put("/v1/topics/t1", json={"url": "http://127.1:9/"}).status_code == 422
    assert api.put("/v1/topics/t1", json={"url": "https://example.org/"}).status_code == 200
    monkeypatch.setenv(POLICY_ENV, '{"allow_networks": ["loopback"], "allow_ports": [443, 9]}')
    assert api.put("/v1/topics/t1", json={"url": "http://127.0.0.1:9/"}).status_code == 200
    refused = api.put("/v1/topics/t1", json={"url": "http://example.org/"})
    assert refused.status_code == 422 and "port 80 is not in allow_ports" in error_of(refused)


def test_a_topic_may_not_name_the_store_itself(redis_url):
    """The store is Redis on 127.0.0.1 (DEFERQ_TEST_REDIS); the tests' policy allows
    loopback, but never the store's port at any loopback address: they all reach it."""
    port = urlsplit(redis_url).port or 6379
    with client_for(redis_url) as api:
        for host, says in [("127.0.0.1", "127.0.0.1 is"), ("[::1]", "::1 is"), ("127.0.0.2", "127.0.0.2 is"),
                           ("localhost", "localhost resolves to 127.0.0.1, which is"),
                           ("[::ffff:127.0.0.1]", "reaches 127.0.0.1, which is")]:
            url = f"http://{host}:{port}/"
            answer = api.put("/v1/topics/t1", json={"url": url})
            assert answer.status_code == 422, (url, answer.text)
            assert f"{says} deferq's own store (port {port})" in error_of(answer), url
        assert api.put("/v1/topics/t1", json={"url": f"http://127.0.0.2:{port + 1}/"}).status_code == 201


@pytest.mark.parametrize(("body", "says"), [
    ({"body": 1}, "exactly one of topic"),
    ({"topic": "orders", "task": "t"}, "exactly one of topic"),
    ({"topic": "orders", "args": [1]}, "args is for task jobs"),
    ({"task": "t", "body": 1}, "body is for topic jobs"),
    ({"task": "t", "args": {"a": 1}}, "args must be an array"),
    ({"task": "deferq.deliver"}, "not deferq.*"),
    ({"topic": "orders", "delay_ms": -1}, "delay_ms"),
    ({"topic": "orders", "delay_ms": 1, "at": 5}, "both delay_ms and at"),
    ({"topic": "orders", "at": "tomorrow"}, "ISO 8601"),
    ({"topic": "orders", "at": "2030-01-01T00:00:00"}, "time zone"),
    ({"topic": "orders", "ttr": 0}, "ttr"),
    ({"topic": "orders", "priority": "urgent"}, "priority"),
    ({"topic": "orders", "max_attempts": 1.5}, "whole number"),
    ({"task": "t", "queue": "has space"}, "queue name"),
    ({"topic": "orders", "extra": 1}, "unknown field 'extra'"),
    ("text", "must be a JSON object, got a string"),
])
def test_a_bad_job_is_a_422_naming_the_problem(api, topic, body, says):
    answer = api.post("/v1/jobs", json=body)
    assert answer.status_code == 422, answer.text
    assert says in error_of(answer)


def test_a_job_for_a_topic_that_does_not_exist_is_a_404(api, topic):
    """The request is well formed (the document allows it); what it names is missing."""
    answer = api.post("/v1/jobs", json={"topic": "missing"})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    assert error_of(answer) == "topic 'missing' does not exist: create it with PUT /v1/topics/{name}"
    batch = api.post("/v1/jobs/batch", json={"jobs": [{"topic": "orders"}, {"topic": "missing"}]})
    assert batch.status_code == 404 and error_of(batch).startswith("jobs[1]: topic 'missing' does not exist")
    assert api.get("/v1/queues").json()["queues"] == {}  # neither job of the batch was stored


# -- without auth: what a web page could send -------------------------------------------


def test_without_auth_a_cross_site_body_is_a_415_and_changes_nothing(api):
    """What a page sends without asking first: text/plain, a form, a body of no type."""
    job = b'{"task": "t", "queue": "q"}'
    for headers in ({"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"},
                    {"content-type": "multipart/form-data; boundary=x"}, {}):
        for path in ("/v1/jobs", "/v1/queues/q/pause"):
            answer = api.post(path, content=job, headers=headers)
            assert answer.status_code == 415, (path, headers, answer.text)
            assert error_of(answer).startswith("this server runs without auth (--no-auth) and takes request "
                                               "bodies only as Content-Type: application/json, not ")
    assert api.get("/v1/queues").json()["queues"] == {}  # no job, no pause
    typed = {"content-type": "application/json; charset=utf-8"}
    assert api.post("/v1/jobs", content=job, headers=typed).status_code == 201
    assert api.post("/v1/queues/q/pause").json()["paused"] is True  # no body: the Origin decides


def test_without_auth_another_origin_is_a_403_and_a_foreign_host_a_421(store):
    with client_for(store, allowed_hosts=["deferq.lan"]) as api:
        for origin in ("http://evil.example", "null", "http://localhost:9999", "https://localhost"):
            answer = api.post("/v1/queues/q/pause", headers={"origin": origin, **JSON_TYPE})
            assert answer.status_code == 403, origin
            assert error_of(answer) == ("this server runs without auth (--no-auth) and refuses requests from "
                                        f"other web pages: Origin {origin!r} is not http://localhost")
        assert api.get("/v1/queues", headers={"origin": "http://evil.example"}).status_code == 403
        for host in ("evil.example", "evil.example:8088", "127.0.0.1.nip.io", "10.0.0.5", ""):
            answer = api.get("/v1/queues", headers={"host": host})
            assert answer.status_code == 421, host
            assert error_of(answer) == (
                "this server runs without auth (--no-auth) and answers only requests for localhost, 127.0.0.1 "
                f"or [::1] (or a name given with --allowed-host), not for {host!r}")
        for host in ("localhost:8088", "127.0.0.1:8088", "127.0.0.2", "[::1]:8088", "deferq.lan:8088"):
            assert api.get("/v1/queues", headers={"host": host}).status_code == 200, host
        own = api.post("/v1/queues/q/pause", headers={"origin": "http://localhost", **JSON_TYPE})
        assert own.status_code == 200 and own.json()["paused"] is True  # the console's own pages


def test_with_auth_the_token_guards_and_hosts_are_not_checked(store):
    with client_for(store, auth=True) as api:
        answer = api.get("/v1/queues", headers={"host": "evil.example"})
        assert answer.status_code == 401


# -- faults ----------------------------------------------------------------------------


def test_malformed_json_is_a_400_naming_the_problem(api):
    answer = api.post("/v1/jobs", content=b'{"topic": "orders",}', headers=JSON_TYPE)
    assert answer.status_code == 400 and "not valid JSON" in error_of(answer)
    assert "line 1 column" in error_of(answer)
    empty = api.post("/v1/jobs", content=b"", headers=JSON_TYPE)
    assert empty.status_code == 400 and "empty" in error_of(empty)
    assert api.put("/v1/topics/x", content=b"\xff\xfe", headers=JSON_TYPE).status_code == 400


def test_a_body_over_the_limit_is_a_413(store):
    with client_for(store, max_body=1000) as api:
        big = {"task": "t", "args": ["x" * 2000]}
        answer = api.post("/v1/jobs", json=big)
        assert answer.status_code == 413 and "1000 bytes" in error_of(answer)

        def chunks():  # no Content-Length: the limit holds while reading
            yield b'{"task": "t", "args": ["'
            for _ in range(20):
                yield b"x" * 100
            yield b'"]}'

        streamed = api.post("/v1/jobs", content=chunks(), headers=JSON_TYPE)
        assert streamed.status_code == 413
        assert api.post("/v1/jobs", json={"task": "t"}).status_code == 201


def test_a_full_queue_is_a_429_with_retry_after(store):
    with client_for(store, max_queue_length=3, queue_limits={"big": 100}) as api:
        for _ in range(3):
            assert api.post("/v1/jobs", json={"task": "t"}).status_code == 201
        full = api.post("/v1/jobs", json={"task": "t"})
        assert full.status_code == 429 and full.headers["retry-after"] == "1"
        assert "limit is 3" in error_of(full)
        batch = api.post("/v1/jobs/batch", json={"jobs": [{"task": "t", "queue": "other"}] * 4})
        assert batch.status_code == 429
        assert api.post("/v1/jobs", json={"task": "t", "queue": "big"}).status_code == 201


def test_an_unreachable_store_is_a_503(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the database's directory should be")
    with client_for(f"sqlite:///{blocker}/deferq.db", auth=True) as api:
        for method, path in [("POST", "/v1/jobs"), ("GET", "/v1/queues"), ("GET", "/readyz")]:
            answer = api.request(method, path, json={"task": "t"},
                                 headers={"authorization": "Bearer dq_x"})
            assert answer.status_code == 503, (path, answer.text)
            assert "store cannot be reached" in error_of(answer)
            assert answer.headers["retry-after"] == "1"
        assert api.get("/healthz").status_code == 200
        assert "deferq_store_up 0.0" in api.get("/metrics").text


def test_unknown_routes_and_methods_answer_json(api):
    assert api.get("/v2/nothing").status_code == 404
    wrong = api.patch("/v1/jobs")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


# -- auth ------------------------------------------------------------------------------

ROUTES = sorted(route_scopes().items())
SAMPLE_PATH = {"{job_id}": "06H000000000000000000000XX", "{name}": "orders", "{token_id}": "0" * 12}


def sample(path: str) -> str:
    for placeholder, value in SAMPLE_PATH.items():
        path = path.replace(placeholder, value)
    return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('auth')}/deferq.db"
    app = deferq.App(url)
    producer, _ = auth_module.create(app.backend, "producer")
    admin, _ = auth_module.create(app.backend, "admin")
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        yield client, producer, admin


@pytest.mark.parametrize(("route", "scope"), ROUTES, ids=[f"{m} {p}" for (m, p), _ in ROUTES])
def test_every_route_checks_its_scope(secured, route, scope):
    client, producer, admin = secured
    method, path = route
    url = sample(path)

    def call(token: str | None) -> httpx.Response:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return client.request(method, url, json={}, headers=headers)

    if scope is None:
        assert call(None).status_code < 400
        return
    anonymous = call(None)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")
    assert call("dq_not-a-real-token").status_code == 401
    if scope == "admin":
        forbidden = call(producer)
        assert forbidden.status_code == 403 and "admin scope" in error_of(forbidden)
    allowed = call(admin if scope == "admin" else producer)
    assert allowed.status_code not in (401, 403, 500), allowed.text
    if scope == "producer":
        assert call(admin).status_code not in (401, 403, 500)


def test_tokens_are_made_listed_and_revoked_over_the_api(secured):
    client, _, admin = secured
    headers = {"authorization": f"Bearer {admin}"}
    made = client.post("/v1/tokens", json={"scope": "producer", "note": "shop"}, headers=headers)
    assert made.status_code == 201
    token, token_id = made.json()["token"], made.json()["id"]
    listed = client.get("/v1/tokens", headers=headers).json()["tokens"]
    assert any(t["id"] == token_id and "token" not in t for t in listed)
    assert client.get("/v1/queues", headers={"authorization": f"Bearer {token}"}).status_code == 200
    assert client.delete(f"/v1/tokens/{token_id}", headers=headers).status_code == 200
    client.app.state.service.tokens.clear()  # skip the few-second cache
    assert client.get("/v1/queues", headers={"authorization": f"Bearer {token}"}).status_code == 401


def test_bootstrap_a_real_server_with_a_token_from_the_cli(store):
    made = subprocess.run([sys.executable, "-m", "deferq", "token", "create", "--scope", "admin",
                           "--url", store], capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("dq_") and "shown once" in made.stderr
    with running_server(store, "--workers", "2") as base:
        client = httpx.Client(base_url=base, trust_env=False, timeout=10)
        assert client.get("/v1/queues").status_code == 401
        headers = {"authorization": f"Bearer {token}"}
        topic = client.put("/v1/topics/t", json={"url": "http://127.0.0.1:9/"}, headers=headers)
        assert topic.status_code == 201
        for _ in range(4):
            assert client.post("/v1/jobs", json={"topic": "t", "body": 1}, headers=headers).status_code == 201
        metrics = client.get("/metrics").text
        assert 'deferq_jobs_enqueued_total{queue="callbacks"} 4.0' in metrics
        assert 'deferq_jobs{queue="callbacks",state="queued"} 4.0' in metrics
        assert client.get("/readyz").json() == {"status": "ready"}


def test_request_and_error_logs_are_json_lines_in_their_files(tmp_path):
    import json

    requests, errors = tmp_path / "requests.log", tmp_path / "errors.log"
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    options = ("--no-auth", "--request-log", str(requests), "--error-log", str(errors))
    with running_server(f"sqlite:///{blocker}/deferq.db", *options) as base:
        client = httpx.Client(base_url=base, trust_env=False, timeout=10)
        assert client.get("/v1/queues").status_code == 503
        assert client.post("/v1/jobs", content=b"{", headers=JSON_TYPE).status_code in (400, 503)
    logged = [json.loads(line) for line in requests.read_text().splitlines()]
    queues = next(line for line in logged if line["path"] == "/v1/queues")
    assert (queues["method"], queues["status"], queues["route"]) == ("GET", 503, "list_queues")
    assert queues["duration_ms"] >= 0 and queues["client"] == "127.0.0.1"
    failures = [json.loads(line) for line in errors.read_text().splitlines()]
    assert any("cannot open the store" in line["message"] for line in failures)


def test_token_cli_lists_and_revokes(store):
    from click.testing import CliRunner

    from deferq.cli.main import main

    runner = CliRunner()
    made = runner.invoke(main, ["token", "create", "--scope", "producer", "--note", "shop",
                                "--url", store])
    assert made.exit_code == 0, made.output
    listed = runner.invoke(main, ["token", "list", "--url", store])
    token_id, scope, note = listed.output.split()
    assert (scope, note) == ("producer", "shop")
    assert runner.invoke(main, ["token", "revoke", token_id, "--url", store]).exit_code == 0
    again = runner.invoke(main, ["token", "revoke", token_id, "--url", store])
    assert again.exit_code == 1 and "no token" in again.output
    assert runner.invoke(main, ["token", "list", "--url", store]).output == ""
    reader = runner.invoke(main, ["token", "create", "--scope", "reader", "--url", store])
    assert reader.exit_code == 0, reader.output
    assert runner.invoke(main, ["token", "list", "--url", store]).output.split()[1] == "reader"
    with client_for(store, auth=True) as api:  # the console's read-only scope: looks, changes nothing
        bearer = {"Authorization": f"Bearer {reader.stdout.strip()}"}
        assert api.get("/v1/queues", headers=bearer).status_code == 200
        assert api.post("/v1/jobs", json={"task": "t"}, headers=bearer).status_code == 403


def test_concurrent_requests_are_stored_together_each_with_its_own_receipt(store, topic):
    import asyncio

    app = deferq.App(store)
    web = create_app(ServerConfig(auth=False, error_log="off"), app)
    calls = []
    original = app.backend.enqueue_many_async

    async def counted(items, connection=None):
        calls.append(len(items))
        return await original(items, connection)

    app.backend.enqueue_many_async = counted

    async def burst():
        transport = httpx.ASGITransport(app=web)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await asyncio.gather(*(
                client.post("/v1/jobs", json={"topic": "orders", "body": i}) for i in range(200)))

    answers = asyncio.run(burst())
    assert {a.status_code for a in answers} == {201}
    ids = [a.json()["id"] for a in answers]
    assert len(set(ids)) == 200 and sum(calls) == 200
    assert len(calls) < 50, f"{len(calls)} store calls for 200 requests: not batched"
    for i, job_id in enumerate(ids):  # each receipt names the job made from its request
        assert app.backend.get(job_id).kwargs["body"] == i
    app.close()


def test_concurrent_cache_misses_share_one_lookup():
    import asyncio

    from deferq.server.http.cache import Cached

    calls = []

    async def load():
        calls.append(1)
        await asyncio.sleep(0.01)
        return "admin"

    async def main():
        cache = Cached(seconds=60)
        values = await asyncio.gather(*(cache.get("t", load) for _ in range(50)))
        assert values == ["admin"] * 50 and len(calls) == 1
        cache.forget("t")
        assert await cache.get("t", load) == "admin" and len(calls) == 2

        async def failing():
            raise RuntimeError("store down")

        results = await asyncio.gather(*(cache.get("x", failing) for _ in range(3)),
                                       return_exceptions=True)
        assert all(isinstance(r, RuntimeError) for r in results)

    asyncio.run(main())


def test_task_jobs_take_the_defaults_of_the_app_the_server_was_given(store):
    app = deferq.App(store)

    @app.task(queue="email", max_attempts=7, priority="high", timeout=12)
    def send_reset_email(user_id: int) -> None: ...

    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
        job_id = api.post("/v1/jobs", json={"task": "send_reset_email", "args": [42]}).json()["id"]
        job = api.get(f"/v1/jobs/{job_id}").json()
        assert (job["queue"], job["max_attempts"], job["priority"], job["ttr"]) == ("email", 7, "high", 12)
        unknown = api.get(f"/v1/jobs/{api.post('/v1/jobs', json={'task': 'other'}).json()['id']}")
        assert (unknown.json()["queue"], unknown.json()["ttr"]) == ("default", None)
    app.close()


@pytest.mark.parametrize(("options", "says"), [
    (["--queue-limit", "bad"], "must look like QUEUE=NUMBER"),
    (["--workers", "0"], "must be at least 1"),
])
def test_serve_refuses_bad_options_in_one_sentence(options, says):
    from click.testing import CliRunner

    from deferq.cli.main import main

    result = CliRunner().invoke(main, ["serve", *options])
    assert result.exit_code == 2 and says in result.output
    assert "Traceback" not in result.output


def test_store_parts_name_each_shard_and_the_one_that_is_down(redis_shards_url):
    down = f"127.0.0.1:{free_port()}/0"
    with client_for(redis_shards_url) as api:
        parts = api.get("/v1/store/parts").json()["parts"]
        assert len(parts) == 2 and all(p["up"] and p["version"] and p["memory_bytes"] > 0 for p in parts)
    broken = redis_shards_url.replace("redis+shards://", f"redis+shards://{down},", 1)
    with client_for(broken) as api:
        answer = api.get("/v1/store/parts")
        assert answer.status_code == 200
        first, *rest = answer.json()["parts"]
        assert first["name"] == down and first["up"] is False and first["error"]
        assert [p["up"] for p in rest] == [True, True]


def test_store_parts_of_a_sqlite_store(api):
    (part,) = api.get("/v1/store/parts").json()["parts"]
    assert part["name"] == "store" and part["up"] and part["version"].startswith("SQLite ")
    assert part["size_bytes"] > 0 and part["memory_bytes"] is None
