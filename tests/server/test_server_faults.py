"""The store going away under a running API: answers turn into 503 JSON at once (never a
hang or a 500), and the API recovers by itself when the store is back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

import deferq
from deferq.server import ServerConfig, create_app
from tests.support.server_helpers import TestClient
from tests.support.stores.redis import RedisServer, _need_redis_server


def test_redis_down_is_a_503_and_the_api_recovers(tmp_path: Path) -> None:
    _need_redis_server()
    server = RedisServer(tmp_path / "redis").start()
    app = deferq.App(f"redis://127.0.0.1:{server.port}/0")
    try:
        with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
            assert api.post("/v1/jobs", json={"task": "t"}).status_code == 201
            server.stop()
            started = time.monotonic()
            for method, path, body in [("POST", "/v1/jobs", {"task": "t"}), ("GET", "/v1/queues", None),
                                       ("GET", "/readyz", None),
                                       ("PUT", "/v1/topics/t", {"url": "http://127.0.0.1:9/"})]:
                answer = api.request(method, path, json=body)
                assert answer.status_code == 503, (path, answer.text)
                assert "store cannot be reached" in answer.json()["error"]["message"]
                assert answer.headers["retry-after"] == "1"
            assert time.monotonic() - started < 10, "a dead store must be reported fast"
            assert api.get("/healthz").status_code == 200
            assert "deferq_store_up 0.0" in api.get("/metrics").text
            server.start()
            assert api.post("/v1/jobs", json={"task": "t"}).status_code == 201
            assert api.get("/readyz").status_code == 200
    finally:
        app.close()
        server.stop()


@pytest.mark.parametrize("how", ["killed", "wrong password", "no such database"])
def test_a_store_the_api_cannot_use_is_a_503_never_a_500(tmp_path: Path, how: str) -> None:
    _need_redis_server()
    server = RedisServer(tmp_path / "redis").start()
    where = f"127.0.0.1:{server.port}"
    url = {"killed": f"redis://{where}/0", "wrong password": f"redis://:wrong@{where}/0",
           "no such database": f"redis://{where}/99"}[how]
    if how == "wrong password":
        redis.Redis(port=server.port).config_set("requirepass", "right")
    app = deferq.App(url)
    try:
        with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
            if how == "killed":
                assert api.post("/v1/jobs", json={"task": "t"}).status_code == 201
                server.kill()
            for method, path, body in [("POST", "/v1/jobs", {"task": "t"}), ("GET", "/readyz", None),
                                       ("POST", "/v1/jobs/batch", {"jobs": [{"task": "t"}]})]:
                answer = api.request(method, path, json=body)
                assert answer.status_code == 503, (how, path, answer.text)
                message = answer.json()["error"]["message"]
                assert {"killed": "cannot be reached", "wrong password": "authentication failed",
                        "no such database": "database 99 does not exist"}[how] in message
    finally:
        app.close()
        server.stop()


def test_past_max_inflight_a_request_is_answered_busy_at_once(tmp_path: Path) -> None:
    import socket

    import httpx

    from tests.support.server_helpers import running_server, wait_until

    with running_server(f"sqlite:///{tmp_path}/deferq.db", "--no-auth", "--max-inflight", "1") as base:
        port = int(base.rsplit(":", 1)[1])
        slow = socket.create_connection(("127.0.0.1", port))
        try:  # a request whose body never finishes holds the one slot
            slow.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"task\": ")
            client = httpx.Client(base_url=base, trust_env=False, timeout=5)
            busy = wait_until(lambda: (r := client.get("/v1/queues")).status_code == 503 and r, 10,
                              "a busy answer")
            assert busy.json()["error"]["code"] == "busy" and busy.headers["retry-after"] == "1"
            assert client.get("/healthz").status_code == 200  # health is never refused
        finally:
            slow.close()
        wait_until(lambda: client.get("/v1/queues").status_code == 200, 10, "the slot freed")
