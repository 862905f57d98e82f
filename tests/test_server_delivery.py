"""Callback delivery end to end: the API stores a topic job, a real worker process
delivers it to a real receiver on loopback, signed, retried by the topic's rules."""

from __future__ import annotations

import json

import pytest

import deferq
from deferq.server import ServerConfig, create_app
from deferq.server.netpolicy import POLICY_ENV
from deferq.server.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from tests.alert_receivers import smtp_inbox  # noqa: F401 - fixture
from tests.server_helpers import (
    Receiver,
    Stream,
    TestClient,
    delivery_worker,
    reset_peak_rss,
    rss_bytes,
    wait_until,
)

CONDITION = "{res.code}!=200 && {res.data.status}!=2 || {res.data.msg}=='failed'"


@pytest.fixture
def store(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/deferq.db"


@pytest.fixture
def api(store: str):
    app = deferq.App(store)
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as client:
        yield client
    app.close()


def job_state(api: TestClient, job_id: str) -> dict:
    return api.get(f"/v1/jobs/{job_id}").json()


def test_fails_twice_then_succeeds_at_the_backoff_times(api, store, tmp_path):
    answers = [(200, b""), (200, b'{"code":500}'), (200, b'{"code":200,"data":{"status":2}}')]
    log_file = tmp_path / "delivery.log"
    with Receiver(answers) as receiver:
        topic = api.put("/v1/topics/orders", json={
            "url": receiver.url, "retry_condition": CONDITION, "max_attempts": 5,
            "backoff": {"kind": "schedule", "seconds": [0.5, 1.0]},
            "headers": {"X-Team": "billing"},
        }).json()  # fmt: skip
        receipt = api.post("/v1/jobs", json={"topic": "orders", "body": {"order": 42}})
        assert receipt.status_code == 201
        job_id = receipt.json()["id"]
        env = {"DEFERQ_DELIVERY_LOG": str(log_file), "DEFERQ_DELIVERY_STATS_SECONDS": "0"}
        with delivery_worker(store, env):
            hits = receiver.wait_for_hits(3)
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "succeeded" and j,
                             10, "the job succeeded")  # fmt: skip
            metrics = wait_until(lambda: 'decision="succeeded",topic="orders"' in (
                text := api.get("/metrics").text) and text, 10, "published delivery counts")
    assert len(receiver.hits) == 3
    assert job["attempts"] == 3 and job["result"]["status"] == 200
    first_wait, second_wait = hits[1].at - hits[0].at, hits[2].at - hits[1].at
    assert 0.5 <= first_wait < 1.5, first_wait
    assert 1.0 <= second_wait < 2.0, second_wait
    for number, hit in enumerate(hits, start=1):
        assert json.loads(hit.body) == {"order": 42}
        assert hit.headers["x-team"] == "billing"
        assert hit.headers["x-deferq-attempt"] == str(number)
        assert hit.headers["x-deferq-job-id"] == job_id
        assert verify(topic["signing_secret"], hit.body, hit.headers[TIMESTAMP_HEADER.lower()],
                      hit.headers[SIGNATURE_HEADER.lower()])  # fmt: skip
        assert not verify("whsec_another-secret-entirely", hit.body,
                          hit.headers[TIMESTAMP_HEADER.lower()],
                          hit.headers[SIGNATURE_HEADER.lower()])  # fmt: skip
    assert 'deferq_deliveries_total{decision="retry",topic="orders"} 2.0' in metrics
    assert 'deferq_deliveries_total{decision="succeeded",topic="orders"} 1.0' in metrics
    assert 'deferq_delivery_seconds_total{decision="retry",topic="orders"}' in metrics
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [(line["decision"], line["status"]) for line in lines] == [
        ("retry", 200), ("retry", 200), ("succeeded", 200)]  # fmt: skip
    assert lines[0]["reason"] == "empty answer" and "retry condition" in lines[1]["reason"]
    assert lines[0]["url"] == receiver.url and lines[0]["duration_ms"] >= 0


def test_never_succeeds_ends_dead_with_an_alert(api, store, smtp_inbox):  # noqa: F811
    inbox, smtp = smtp_inbox
    saved = api.put("/v1/settings/alerts", json={
        "email": {"smtp": smtp, "from": "deferq@localhost", "to": ["ops@localhost"]},
        "min_interval": 0,
    })  # fmt: skip
    assert saved.status_code == 200, saved.text
    with Receiver([(500, b'{"error":"down"}')]) as receiver:
        api.put("/v1/topics/sms", json={"url": receiver.url, "max_attempts": 3,
                                        "backoff": {"kind": "fixed", "seconds": 0.2}})  # fmt: skip
        job_id = api.post("/v1/jobs", json={"topic": "sms", "body": "hi"}).json()["id"]
        with delivery_worker(store):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "dead" and j,
                             15, "the job is dead")  # fmt: skip
            message = inbox.wait_for(lambda m: "gave up" in m["Subject"], timeout=15)
    assert len(receiver.hits) == 3 and job["attempts"] == 3
    assert "HTTP 500" in job["error"]
    assert "sms" in message["Subject"] and job_id in message.get_payload()
    dead = api.get("/v1/dead").json()["jobs"]
    assert [j["id"] for j in dead] == [job_id]


def test_a_slow_receiver_times_out_at_ttr_and_is_retried(api, store):
    import threading

    release = threading.Event()
    with Receiver([(200, b"ok")]) as receiver:
        handler = receiver.server.RequestHandlerClass
        original = handler.do_POST

        arrivals = []

        def slow_first(self):  # the first answer comes after the ttr
            arrivals.append(1)
            if len(arrivals) == 1:
                release.wait(3)
            original(self)

        handler.do_POST = slow_first
        api.put("/v1/topics/slow", json={"url": receiver.url, "ttr": 0.5, "max_attempts": 3,
                                         "backoff": {"kind": "fixed", "seconds": 0.1}})  # fmt: skip
        job_id = api.post("/v1/jobs", json={"topic": "slow", "body": 1}).json()["id"]
        with delivery_worker(store):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "succeeded" and j,
                             15, "the job succeeded")  # fmt: skip
        release.set()
    assert job["attempts"] == 2


def test_a_deleted_topic_sends_its_jobs_dead_at_once(api, store):
    with Receiver([(200, b"ok")]) as receiver:
        api.put("/v1/topics/gone", json={"url": receiver.url})
        job_id = api.post("/v1/jobs", json={"topic": "gone", "body": 1, "delay_ms": 300}).json()["id"]
        assert api.delete("/v1/topics/gone").status_code == 200
        with delivery_worker(store):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "dead" and j,
                             15, "the job is dead")  # fmt: skip
    assert not receiver.hits and "does not exist" in job["error"] and job["attempts"] == 1


def test_signatures_refuse_tampering_other_secrets_and_replays():
    from deferq.server.signing import sign

    body = b'{"order": 42}'
    headers = sign("whsec_0123456789abcdef", body, now=1_000_000)
    ts, sig = headers[TIMESTAMP_HEADER], headers[SIGNATURE_HEADER]
    assert sig.startswith("v1=") and ts == "1000000"
    assert verify("whsec_0123456789abcdef", body, ts, sig, now=1_000_100)
    assert not verify("whsec_0123456789abcdef", body + b" ", ts, sig, now=1_000_100)
    assert not verify("whsec_another-secret", body, ts, sig, now=1_000_100)
    assert not verify("whsec_0123456789abcdef", body, ts, sig, now=1_000_301)  # a replay
    assert not verify("whsec_0123456789abcdef", body, "1000001", sig, now=1_000_100)
    assert not verify("whsec_0123456789abcdef", body, None, sig)
    assert not verify("whsec_0123456789abcdef", body, "soon", sig)


# -- hostile answers and addresses (issue 11) ---------------------------------------------


def test_a_500_term_condition_on_deep_answers_is_delivered_once(api, store, tmp_path):
    deep = "[" * 500 + "]" * 500
    answer = f'{{"code": 200, "a": {deep}, "b": {deep}}}'.encode()
    condition = "0||" * 499 + "{res.a}!={res.b}"  # 500 terms, false for this answer
    assert len(condition) == 1513
    log_file = tmp_path / "delivery.log"
    with Receiver([(200, answer)]) as receiver:
        saved = api.put("/v1/topics/deep", json={"url": receiver.url, "retry_condition": condition,
                                                 "max_attempts": 3,
                                                 "backoff": {"kind": "fixed", "seconds": 0.2}})  # fmt: skip
        assert saved.status_code == 201, saved.text
        job_id = api.post("/v1/jobs", json={"topic": "deep", "body": 1}).json()["id"]
        with delivery_worker(store, {"DEFERQ_DELIVERY_LOG": str(log_file)}):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] in ("succeeded", "dead")
                             and j, 15, "the job finished")  # fmt: skip
    assert job["state"] == "succeeded" and job["attempts"] == 1, job
    assert len(receiver.hits) == 1
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [(line["decision"], line["reason"]) for line in lines] == [("succeeded", None)]


def test_large_answers_are_read_up_to_the_cap_and_the_worker_stays_small(api, store):
    """200 MB answers, generated while sent: without a condition that reads the answer
    the status decides; with one the attempt fails. The worker's peak memory barely
    moves (it keeps at most max_answer_bytes, 1 MiB by default)."""
    size = 200 * 1024 * 1024
    declared, chunked, judged = Stream(size), Stream(size, chunked=True), Stream(size, chunked=True)
    with Receiver([(200, b'{"code": 200}')]) as small, Receiver([(200, declared)]) as first, \
            Receiver([(200, chunked)]) as second, Receiver([(200, judged)]) as third:  # fmt: skip
        topics = {"warm-up": small, "declared": first, "chunked": second}
        for name, receiver in topics.items():
            assert api.put(f"/v1/topics/{name}", json={"url": receiver.url}).status_code == 201
        assert api.put("/v1/topics/judged", json={
            "url": third.url, "retry_condition": "{res.code} != 200", "max_attempts": 1,
        }).status_code == 201  # fmt: skip
        with delivery_worker(store) as worker:
            warm_up = api.post("/v1/jobs", json={"topic": "warm-up", "body": 1}).json()["id"]
            wait_until(lambda: job_state(api, warm_up)["state"] == "succeeded", 15, "the warm-up")
            before = rss_bytes(worker.pid)
            reset_peak_rss(worker.pid)
            ids = {name: api.post("/v1/jobs", json={"topic": name, "body": 1}).json()["id"]
                   for name in ("declared", "chunked", "judged")}  # fmt: skip

            def finished() -> dict | None:
                found = {name: job_state(api, job_id) for name, job_id in ids.items()}
                return found if all(j["state"] in ("succeeded", "dead") for j in found.values()) else None

            jobs = wait_until(finished, 30, "three large answers judged")
            peak = rss_bytes(worker.pid, peak=True)
    growth = peak - before
    print(f"worker RSS before {before / 2**20:.1f} MiB, peak after {peak / 2**20:.1f} MiB, "
          f"growth {growth / 2**20:.1f} MiB; receivers sent {declared.sent / 2**20:.1f}, "
          f"{chunked.sent / 2**20:.1f}, {judged.sent / 2**20:.1f} MiB")  # fmt: skip
    assert growth < 20 * 2**20
    assert jobs["declared"]["state"] == "succeeded" and jobs["declared"]["attempts"] == 1
    assert jobs["chunked"]["state"] == "succeeded" and jobs["chunked"]["attempts"] == 1
    assert jobs["judged"]["state"] == "dead"
    assert "answer larger than 1048576 bytes" in jobs["judged"]["error"]
    for stream in (declared, chunked, judged):  # reading stopped near the cap
        assert stream.sent < 64 * 2**20


def test_a_name_that_resolves_to_a_denied_address_fails_the_attempt(api, store):
    with Receiver([(200, b"ok")]) as receiver:
        port = receiver.server.server_address[1]
        saved = api.put("/v1/topics/named", json={
            "url": f"http://localhost:{port}/hook", "max_attempts": 1})  # fmt: skip
        assert saved.status_code == 201, saved.text  # a name is checked when it is resolved
        job_id = api.post("/v1/jobs", json={"topic": "named", "body": 1}).json()["id"]
        policy = '{"allow_networks": ["127.0.0.0/8"], "deny_networks": ["127.0.0.0/8", "::1"]}'
        with delivery_worker(store, {POLICY_ENV: policy}):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "dead" and j,
                             15, "the job is dead")  # fmt: skip
    assert not receiver.hits and job["attempts"] == 1
    assert ("refused by the callback policy: localhost resolves to 127.0.0.1, which is in "
            "deny_networks (127.0.0.0/8)") in job["error"]  # fmt: skip


def test_a_worker_with_the_default_policy_refuses_loopback(api, store):
    """The server allowed the topic (its policy allows loopback); the worker's does not."""
    with Receiver([(200, b"ok")]) as receiver:
        api.put("/v1/topics/local", json={"url": receiver.url, "max_attempts": 1})
        job_id = api.post("/v1/jobs", json={"topic": "local", "body": 1}).json()["id"]
        with delivery_worker(store, {POLICY_ENV: ""}):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "dead" and j,
                             15, "the job is dead")  # fmt: skip
    assert not receiver.hits
    assert "refused by the callback policy: 127.0.0.1 is a loopback address" in job["error"]
