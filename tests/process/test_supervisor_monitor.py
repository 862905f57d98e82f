"""The monitor's alerts reach a real SMTP server and a real webhook receiver: a backlog, the
store going down (a redis-server this test kills) and coming back."""

from __future__ import annotations

import shutil
import time

import pytest

import deferq
from deferq.task import JobOptions
from tests.conftest import need_service
from tests.support.alert_receivers import smtp_inbox, webhook_inbox  # noqa: F401 - fixtures
from tests.support.stores.redis import RedisServer, free_port
from tests.support.supervisor_harness import Master


def alerts_table(smtp: str, webhook: str) -> str:
    return f"""
check_every = "0.2s"
[pools.other]
queues = ["other"]
processes = {{ min = 0, max = 1 }}
[alerts]
email = {{ smtp = "{smtp}", from = "deferq@localhost", to = ["ops@localhost"] }}
webhook = "{webhook}"
min_interval = "1m"
backlog = {{ default = 5 }}
"""


@pytest.mark.slow
def test_backlog_and_store_down_alerts_arrive_by_mail_and_webhook(tmp_path, smtp_inbox, webhook_inbox):  # noqa: F811
    if shutil.which("redis-server") is None:
        need_service("redis-server", "it is not on PATH")
    mails, smtp = smtp_inbox
    hooks, webhook = webhook_inbox
    redis = RedisServer(tmp_path / "redis", free_port()).start()
    url = f"redis://127.0.0.1:{redis.port}/0"
    master = Master(tmp_path, url, alerts_table(smtp, webhook))
    store = deferq.App(url)
    try:
        master.start()
        master.wait_log("started on")
        store.enqueue_many([deferq.Call("nap", (0,), {}) for _ in range(10)])
        hook = hooks.wait_for(lambda h: h["kind"] == "backlog:default", timeout=20)
        assert hook["details"] == {"queue": "default", "waiting": 10, "limit": 5}
        mails.wait_for(lambda m: m["Subject"] == "[deferq] queue default has 10 jobs waiting")

        redis.kill()
        hook = hooks.wait_for(lambda h: h["kind"] == "store_down", timeout=20)
        assert hook["details"]["url"] == url
        mails.wait_for(lambda m: m["Subject"] == "[deferq] the store is unreachable")

        redis.start()  # same port, empty: the store is back
        hook = hooks.wait_for(lambda h: h["kind"] == "store_up", timeout=20)
        assert hook["details"]["down_for_seconds"] > 0
        mails.wait_for(lambda m: m["Subject"] == "[deferq] the store is reachable again")
        assert [h["kind"] for h in hooks.items].count("store_down") == 1  # said once, not per check
        assert master.stop() == 0
        assert "Traceback" not in master.log(), master.log()
    finally:
        master.kill()
        store.close()
        redis.stop()


def test_queue_alerts_are_sent_once_across_masters(tmp_path, webhook_inbox):  # noqa: F811
    """Backlog, oldest-waiting and dead-letter alerts; two monitors on one store send each once."""
    from deferq.backends.base import Outcome
    from deferq.supervisor.alerts import AlertConfig, Alerter
    from deferq.supervisor.monitor import Monitor, StoreHealth

    hooks, url = webhook_inbox
    app = deferq.App(f"sqlite:///{tmp_path}/m.db")
    config = AlertConfig.from_dict(
        {"webhook": url, "backlog": {"default": 2}, "oldest_waiting": "30s", "min_interval": 60}
    )
    alerters = [Alerter(config), Alerter(config)]
    monitors = [Monitor(app.backend, StoreHealth(lambda a=a: a, app.url), lambda a=a: a) for a in alerters]
    try:
        for monitor in monitors:
            monitor.check(app.backend.stats())  # baseline: nothing to say
        minute_ago = JobOptions(at=time.time() - 60)  # due a minute ago: waited 60 s
        app.enqueue_many([deferq.Call("nap", (0,), {}, minute_ago) for _ in range(4)])
        (leased,) = app.backend.reserve(["default"], 1, "w", 30, [0, 1, 2])
        app.backend.settle([Outcome(leased, "dead", error="boom")])
        for monitor in monitors:
            monitor.check(app.backend.stats())
        for alerter in alerters:
            assert alerter.flush(10)
        kinds = sorted(h["kind"] for h in hooks.items)
        assert kinds == ["backlog:default", "dead:default", "oldest_waiting:default"]
        dead = next(h for h in hooks.items if h["kind"] == "dead:default")
        assert dead["details"] == {"queue": "default", "new": 1, "dead_total": 1}
    finally:
        for alerter in alerters:
            alerter.close()
        app.close()


def test_the_monitor_uses_thresholds_saved_from_the_console(tmp_path, webhook_inbox):  # noqa: F811
    """/dashboard/alerts saves through PUT /v1/settings/alerts into the store; a running
    master picks the saved thresholds up at its next check, over its file's [alerts]."""
    from deferq.server import ServerConfig, create_app
    from tests.support.server_helpers import TestClient

    hooks, webhook = webhook_inbox
    url = f"sqlite:///{tmp_path}/alerts.db"
    table = f"""
check_every = "0.2s"
[pools.other]
queues = ["other"]
processes = {{ min = 0, max = 1 }}
[alerts]
webhook = "{webhook}"
backlog = {{ default = 1000 }}
"""
    store = deferq.App(url)
    master = Master(tmp_path, url, table)
    try:
        master.start()
        master.wait_log("started on")
        store.enqueue_many([deferq.Call("nap", (0,), {}) for _ in range(4)])
        with TestClient(create_app(ServerConfig(auth=False, error_log="off"), deferq.App(url))) as api:
            saved = api.put("/v1/settings/alerts", json={"backlog": {"default": 3}, "min_interval": "1m"})
            assert saved.status_code == 200, saved.text
        hook = hooks.wait_for(lambda h: h["kind"] == "backlog:default", timeout=20)
        assert hook["details"] == {"queue": "default", "waiting": 4, "limit": 3}  # the saved limit, not 1000
        assert master.stop() == 0
        assert "Traceback" not in master.log(), master.log()
    finally:
        master.kill()
        store.close()
