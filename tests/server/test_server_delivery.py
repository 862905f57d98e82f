"""Callback delivery end to end: the API stores a topic job, a real worker process
delivers it to a real receiver on loopback, signed, retried by the topic's rules."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import json
import re
import zlib

import httpx
import pytest

import deferq
from deferq.errors import ConfigError
from deferq.net.guarded import GuardedTransport
from deferq.net.policy import POLICY_ENV, Policy, Refused, store_endpoints
from deferq.server import ServerConfig, create_app
from deferq.server.topics.condition import Condition
from deferq.server.topics.delivery import Unreadable, judge, read_answer
from deferq.server.topics.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from tests.support.alert_receivers import smtp_inbox  # noqa: F401 - fixture
from tests.support.server_helpers import (
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
        }).json()
        receipt = api.post("/v1/jobs", json={"topic": "orders", "body": {"order": 42}})
        assert receipt.status_code == 201
        job_id = receipt.json()["id"]
        env = {"DEFERQ_DELIVERY_LOG": str(log_file), "DEFERQ_DELIVERY_STATS_SECONDS": "0"}
        with delivery_worker(store, env):
            hits = receiver.wait_for_hits(3)
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "succeeded" and j,
                             10, "the job succeeded")
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
                      hit.headers[SIGNATURE_HEADER.lower()])
        assert not verify("whsec_another-secret-entirely", hit.body,
                          hit.headers[TIMESTAMP_HEADER.lower()],
                          hit.headers[SIGNATURE_HEADER.lower()])
    assert 'deferq_deliveries_total{decision="retry",topic="orders"} 2.0' in metrics
    assert 'deferq_deliveries_total{decision="succeeded",topic="orders"} 1.0' in metrics
    assert 'deferq_delivery_seconds_total{decision="retry",topic="orders"}' in metrics
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [(line["decision"], line["status"]) for line in lines] == [
        ("retry", 200), ("retry", 200), ("succeeded", 200)]
    assert lines[0]["reason"] == "empty answer" and "retry condition" in lines[1]["reason"]
    assert lines[0]["url"] == receiver.url and lines[0]["duration_ms"] >= 0


def test_never_succeeds_ends_dead_with_an_alert(api, store, smtp_inbox):  # noqa: F811
    inbox, smtp = smtp_inbox
    saved = api.put("/v1/settings/alerts", json={
        "email": {"smtp": smtp, "from": "deferq@localhost", "to": ["ops@localhost"]},
        "min_interval": 0,
    })
    assert saved.status_code == 200, saved.text
    with Receiver([(500, b'{"error":"down"}')]) as receiver:
        api.put("/v1/topics/sms", json={"url": receiver.url, "max_attempts": 3,
                                        "backoff": {"kind": "fixed", "seconds": 0.2}})
        job_id = api.post("/v1/jobs", json={"topic": "sms", "body": "hi"}).json()["id"]
        with delivery_worker(store):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "dead" and j,
                             15, "the job is dead")
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
                                         "backoff": {"kind": "fixed", "seconds": 0.1}})
        job_id = api.post("/v1/jobs", json={"topic": "slow", "body": 1}).json()["id"]
        with delivery_worker(store):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "succeeded" and j,
                             15, "the job succeeded")
        release.set()
    assert job["attempts"] == 2


def test_a_deleted_topic_sends_its_jobs_dead_at_once(api, store):
    with Receiver([(200, b"ok")]) as receiver:
        api.put("/v1/topics/gone", json={"url": receiver.url})
        job_id = api.post("/v1/jobs", json={"topic": "gone", "body": 1, "delay_ms": 300}).json()["id"]
        assert api.delete("/v1/topics/gone").status_code == 200
        with delivery_worker(store):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "dead" and j,
                             15, "the job is dead")
    assert not receiver.hits and "does not exist" in job["error"] and job["attempts"] == 1


def test_signatures_refuse_tampering_other_secrets_and_replays():
    from deferq.server.topics.signing import sign

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
                                                 "backoff": {"kind": "fixed", "seconds": 0.2}})
        assert saved.status_code == 201, saved.text
        job_id = api.post("/v1/jobs", json={"topic": "deep", "body": 1}).json()["id"]
        with delivery_worker(store, {"DEFERQ_DELIVERY_LOG": str(log_file)}):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] in ("succeeded", "dead")
                             and j, 15, "the job finished")
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
            Receiver([(200, chunked)]) as second, Receiver([(200, judged)]) as third:
        topics = {"warm-up": small, "declared": first, "chunked": second}
        for name, receiver in topics.items():
            assert api.put(f"/v1/topics/{name}", json={"url": receiver.url}).status_code == 201
        assert api.put("/v1/topics/judged", json={
            "url": third.url, "retry_condition": "{res.code} != 200", "max_attempts": 1,
        }).status_code == 201
        with delivery_worker(store) as worker:
            warm_up = api.post("/v1/jobs", json={"topic": "warm-up", "body": 1}).json()["id"]
            wait_until(lambda: job_state(api, warm_up)["state"] == "succeeded", 15, "the warm-up")
            before = rss_bytes(worker.pid)
            reset_peak_rss(worker.pid)
            ids = {name: api.post("/v1/jobs", json={"topic": name, "body": 1}).json()["id"]
                   for name in ("declared", "chunked", "judged")}

            def finished() -> dict | None:
                found = {name: job_state(api, job_id) for name, job_id in ids.items()}
                return found if all(j["state"] in ("succeeded", "dead") for j in found.values()) else None

            jobs = wait_until(finished, 30, "three large answers judged")
            peak = rss_bytes(worker.pid, peak=True)
    growth = peak - before
    print(f"worker RSS before {before / 2**20:.1f} MiB, peak after {peak / 2**20:.1f} MiB, "
          f"growth {growth / 2**20:.1f} MiB; receivers sent {declared.sent / 2**20:.1f}, "
          f"{chunked.sent / 2**20:.1f}, {judged.sent / 2**20:.1f} MiB")
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
            "url": f"http://localhost:{port}/hook", "max_attempts": 1})
        assert saved.status_code == 201, saved.text  # a name is checked when it is resolved
        job_id = api.post("/v1/jobs", json={"topic": "named", "body": 1}).json()["id"]
        policy = '{"allow_networks": ["127.0.0.0/8"], "deny_networks": ["127.0.0.0/8", "::1"]}'
        with delivery_worker(store, {POLICY_ENV: policy}):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "dead" and j,
                             15, "the job is dead")
    assert not receiver.hits and job["attempts"] == 1
    assert ("refused by the network policy: localhost resolves to 127.0.0.1, which is in "
            "deny_networks (127.0.0.0/8)") in job["error"]


def test_a_worker_with_the_default_policy_refuses_loopback(api, store):
    """The server allowed the topic (its policy allows loopback); the worker's does not."""
    with Receiver([(200, b"ok")]) as receiver:
        api.put("/v1/topics/local", json={"url": receiver.url, "max_attempts": 1})
        job_id = api.post("/v1/jobs", json={"topic": "local", "body": 1}).json()["id"]
        with delivery_worker(store, {POLICY_ENV: ""}):
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "dead" and j,
                             15, "the job is dead")
    assert not receiver.hits
    assert "refused by the network policy: 127.0.0.1 is a loopback address" in job["error"]


# -- reading answers: the cap, compression, and what decides --------------------------------


async def _read(limit: int, content: bytes, headers: dict[str, str] | None = None) -> bytes:
    """read_answer on an answer streamed in 64 KiB pieces (with a Content-Length unless
    `headers` say chunked)."""
    headers = headers or {}
    if "transfer-encoding" not in headers:
        headers["content-length"] = str(len(content))

    async def pieces():
        for start in range(0, len(content), 65536):
            yield content[start : start + 65536]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=pieces(), headers=headers)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        async with client.stream("POST", "http://receiver.test/") as response:
            return await read_answer(response, limit)


def read(limit: int, content: bytes, headers: dict[str, str] | None = None) -> bytes:
    return asyncio.run(_read(limit, content, headers))


def test_answers_are_read_up_to_the_cap():
    assert read(5, b"12345") == b"12345"
    with pytest.raises(Unreadable, match="answer larger than 4 bytes"):
        read(4, b"12345")
    with pytest.raises(Unreadable, match="answer larger than 4 bytes"):  # no Content-Length
        read(4, b"12345", {"transfer-encoding": "chunked"})


def test_compressed_answers_count_decompressed_and_never_inflate_past_the_cap():
    bomb = gzip.compress(b"\0" * (200 * 2**20))  # 200 MiB of zeros in about 200 kB
    with pytest.raises(Unreadable, match="answer larger than 1048576 bytes"):
        read(2**20, bomb, {"content-encoding": "gzip"})
    assert read(100, gzip.compress(b'{"code": 200}'), {"content-encoding": "gzip"}) == b'{"code": 200}'
    assert read(100, zlib.compress(b'{"code": 1}'), {"content-encoding": "deflate"}) == b'{"code": 1}'
    with pytest.raises(Unreadable, match="Content-Encoding 'br'"):
        read(100, b"\x0b\x02\x80ok\x03", {"content-encoding": "br"})
    with pytest.raises(Unreadable, match="cannot be decompressed"):
        read(100, b"not gzip at all", {"content-encoding": "gzip"})


@pytest.mark.parametrize(("answer", "condition", "failure"), [
    (b'{"code": 200}', None, None),
    (b"  \n", None, "empty answer"),
    (b'{"code": 500}', "{res.code} != 200", "retry condition is true: {res.code} != 200"),
    (b'{"code": 200}', "{res.code} != 200", None),
    (b"plain text", "{res} == 'plain text'", "retry condition is true: {res} == 'plain text'"),
    (Unreadable("answer larger than 9 bytes"), None, None),  # the 2xx status decides
    (Unreadable("answer larger than 9 bytes"), "false || 1 == 2", None),  # does not read it
    (Unreadable("answer larger than 9 bytes"), "true", "retry condition is true: true"),
    (Unreadable("answer larger than 9 bytes"), "{res.code} != 200", "answer larger than 9 bytes"),
])
def test_what_decides_an_attempt(answer, condition, failure):
    assert judge(answer, Condition(condition) if condition else None) == failure


# -- the network policy -----------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "address", "port", "refused"), [
    ({}, "93.184.215.14", 443, None),
    ({}, "2606:4700::1111", 80, None),
    ({}, "127.0.0.1", 80, "is a loopback address"),
    ({}, "::1", 80, "is a loopback address"),
    ({}, "10.1.2.3", 80, "is a private address"),
    ({}, "100.64.0.1", 80, "is a private address"),
    ({}, "fd12::1", 80, "is a private address"),
    ({}, "169.254.1.1", 80, "is a link-local address"),
    ({}, "fe80::1", 80, "is a link-local address"),
    ({}, "192.0.2.7", 80, "is not a public address"),
    ({}, "::ffff:127.0.0.1", 80, "reaches 127.0.0.1, which is a loopback address"),
    ({}, "64:ff9b::a9fe:a9fe", 80, "reaches 169.254.169.254, which is a cloud metadata address"),
    ({"allow_networks": ["loopback"]}, "127.0.0.1", 80, None),
    ({"allow_networks": ["private"]}, "172.20.1.1", 80, None),
    ({"allow_networks": ["10.0.0.0/8"], "deny_networks": ["10.9.0.0/16"]}, "10.9.1.1", 80,
     "is in deny_networks (10.9.0.0/16)"),
    ({"deny_networks": ["93.184.0.0/16"]}, "93.184.215.14", 80, "is in deny_networks"),
    ({"allow_networks": ["link-local"]}, "169.254.169.254", 80, "is a cloud metadata address"),
    ({"allow_networks": ["0.0.0.0/0"]}, "0.0.0.0", 80, "is an unspecified address"),
    ({"allow_networks": ["::/0"]}, "::", 80, "is an unspecified address"),
    ({"allow_networks": ["0.0.0.0/0"]}, "224.0.0.251", 80, "is a multicast address"),
    ({"allow_networks": ["::/0"]}, "ff02::1", 80, "is a multicast address"),
    ({"allow_networks": ["::/0"]}, "fd00:ec2::254", 80, "is a cloud metadata address"),
    ({"allow_public": False, "allow_networks": ["10.1.0.0/16"]}, "10.1.2.3", 80, None),
    ({"allow_public": False}, "93.184.215.14", 80, "is a public address and allow_public is false"),
])
def test_the_policy_judges_addresses(policy, address, port, refused):
    why = Policy.from_dict(policy).refusal(ipaddress.ip_address(address), port)
    assert (why is None) if refused is None else (refused in why), why


def test_the_policy_judges_ports_and_the_store_before_networks():
    store = {(ipaddress.ip_address("127.0.0.1"), 6379)}
    policy = Policy.from_dict({"allow_networks": ["loopback"], "deny_ports": [25, "8000-8002"]}, store)
    assert policy.refusal(ipaddress.ip_address("127.0.0.1"), 6379) == "is deferq's own store (port 6379)"
    assert policy.refusal(ipaddress.ip_address("::ffff:127.0.0.1"), 6379) is not None
    assert policy.refusal(ipaddress.ip_address("127.0.0.1"), 6380) is None
    assert policy.port_refusal(8001) == "port 8001 is in deny_ports"
    assert Policy.from_dict({"allow_ports": [443]}).port_refusal(80) == "port 80 is not in allow_ports"
    assert policy.url_refusal("http://example.org:25/") == "port 25 is in deny_ports"
    assert policy.url_refusal("https://example.org/") is None  # names wait for the worker
    assert policy.url_refusal("http://127.0.0.1:6379/").startswith("127.0.0.1 is deferq's own store")
    assert policy.url_refusal("http://0x7f.1:6379/").startswith("127.0.0.1 is deferq's own store")


@pytest.mark.parametrize(("raw", "says"), [
    ("[1]", "must be a JSON object"),
    ("{nope", "is not JSON"),
    ('{"allow": []}', "unknown field 'allow'"),
    ('{"allow_networks": "loopback"}', "allow_networks must be a list"),
    ('{"deny_networks": ["10.0.0.0/33"]}', "neither a network"),
    ('{"allow_networks": ["intranet"]}', "neither a network"),
    ('{"deny_ports": [0]}', "use ports 1-65535"),
    ('{"allow_ports": ["90-80"]}', "use ports 1-65535"),
    ('{"allow_public": "no"}', "allow_public must be true or false"),
])
def test_a_malformed_policy_is_a_config_error(monkeypatch, raw, says):
    monkeypatch.setenv(POLICY_ENV, raw)
    with pytest.raises(ConfigError, match=re.escape(says)):
        Policy.from_env()


def test_store_endpoints_come_from_the_store_url():
    local = ipaddress.ip_address("127.0.0.1")
    assert store_endpoints("redis://:secret@127.0.0.1:6379/1?prefix=x") == {(local, 6379)}
    assert store_endpoints("redis://127.0.0.1/0") == {(local, 6379)}
    assert store_endpoints("redis+shards://127.0.0.1:7000/0,127.0.0.1:7001/0") == {(local, 7000), (local, 7001)}
    assert store_endpoints("redis+cluster://127.0.0.1:7000,127.0.0.1:7002") == {(local, 7000), (local, 7002)}
    assert store_endpoints("postgresql://u:p@127.0.0.1/deferq") == {(local, 5432)}
    assert store_endpoints("mysql://root@127.0.0.1:3307/deferq") == {(local, 3307)}
    assert (local, 6379) in store_endpoints("redis://localhost:6379/0")
    assert store_endpoints("sqlite:///deferq.db") == store_endpoints("memory://") == frozenset()
    assert store_endpoints("unix:///run/redis.sock") == frozenset()


def test_a_name_is_resolved_once_and_the_checked_address_is_connected_to():
    """DNS rebinding: the name first answers an address the policy allows, then one it
    refuses. Each connection asks the resolver once and connects to what it checked."""
    answers = [["169.254.169.254", "127.0.0.1"], ["127.0.0.1"], ["169.254.169.254"]]
    asked = []

    async def resolver(host: str, port: int, timeout: float | None) -> list[str]:
        asked.append(host)
        return answers[len(asked) - 1]

    async def deliver(receiver: Receiver) -> list:
        port = receiver.server.server_address[1]
        policy = Policy.from_dict({"allow_networks": ["127.0.0.0/8"]})
        limits = httpx.Limits(max_keepalive_connections=0)  # a new connection each time
        transport = GuardedTransport(policy, resolver, limits=limits)
        async with httpx.AsyncClient(transport=transport) as client:
            outcomes = []
            for _ in answers:
                try:
                    response = await client.post(f"http://rebind.test:{port}/hook", content=b"{}")
                    outcomes.append(response.status_code)
                except Refused as exc:
                    outcomes.append(str(exc))
            return outcomes

    with Receiver([(200, b"ok")]) as receiver:
        outcomes = asyncio.run(deliver(receiver))
    assert outcomes == [200, 200, "rebind.test resolves to 169.254.169.254, which is a cloud "
                                  "metadata address (never a target)"]
    assert asked == ["rebind.test"] * 3 and len(receiver.hits) == 2
    assert receiver.hits[0].headers["host"] == f"rebind.test:{receiver.server.server_address[1]}"


def test_a_name_that_resolves_to_another_loopback_address_of_the_store_is_refused():
    """The store is Redis on 127.0.0.1:P; a callback host that resolves to ::1 (or
    127.0.0.2) on port P reaches that same Redis: nothing is sent."""
    stores = store_endpoints("redis://127.0.0.1:6390/0")
    policy = Policy.from_dict({"allow_networks": ["loopback"]}, stores)
    refused = []

    async def deliver(answer: list[str]) -> None:
        async def resolver(host: str, port: int, timeout: float | None) -> list[str]:
            return answer

        async with httpx.AsyncClient(transport=GuardedTransport(policy, resolver)) as client:
            with pytest.raises(Refused) as caught:
                await client.post("http://redis.test:6390/", content=b"{}")
            refused.append(str(caught.value))

    for answer in (["::1"], ["127.0.0.2", "::1"]):
        asyncio.run(deliver(answer))
    assert refused == ["redis.test resolves to ::1, which is deferq's own store (port 6390)",
                       "redis.test resolves to 127.0.0.2, which is deferq's own store (port 6390)"]
    assert policy.refusal(ipaddress.ip_address("::1"), 6391) is None  # another port: another service


def test_an_encrypted_topic_job_is_delivered_with_its_plain_body(store, tmp_path):
    """The API's App encrypts (deferq.Encryption): a topic job's body is kept encrypted,
    and the delivery worker (given the keys by DEFERQ_ENCRYPTION_KEYS) posts it plain."""
    from deferq.encryption import new_key
    from tests.support.raw_store import raw_bytes

    key = new_key()
    app = deferq.App(store, encryption=deferq.Encryption(keys={"k1": key}))
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api, \
            Receiver([(200, b'{"code":200}')]) as receiver:
        api.put("/v1/topics/people", json={"url": receiver.url})
        job_id = api.post("/v1/jobs", json={"topic": "people", "body": {"ssn": "123-45-6789"}}).json()["id"]
        assert b"123-45-6789" not in raw_bytes(app)
        with delivery_worker(store, {"DEFERQ_ENCRYPTION_KEYS": f"k1:{key}"}):
            (hit,) = receiver.wait_for_hits(1)
            job = wait_until(lambda: (j := job_state(api, job_id))["state"] == "succeeded" and j, 10,
                             "the delivery succeeded")
        assert json.loads(hit.body) == {"ssn": "123-45-6789"}
        assert job["body"] == {"ssn": "123-45-6789"} and job["encrypted"] is None  # this API has the key
        assert b"123-45-6789" not in raw_bytes(app)
    app.close()
