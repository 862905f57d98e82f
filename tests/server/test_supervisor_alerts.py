"""Alerts reach a real SMTP server and a real webhook receiver; bad settings: one sentence."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from deferq.errors import ConfigError
from deferq.net import policy as netpolicy
from deferq.net.policy import POLICY_ENV
from deferq.supervisor.alerts import AlertConfig, Alerter
from tests.support.alert_receivers import banner_listener, free_port, smtp_inbox, webhook_inbox  # noqa: F401 - fixtures


def make_alerter(smtp: str | None, webhook: str | None,
                 policy: Callable[[], netpolicy.Policy] = netpolicy.Policy.from_env, **extra: object) -> Alerter:
    table: dict[str, object] = dict(extra)
    if smtp:
        table["email"] = {"smtp": smtp, "from": "deferq@localhost", "to": ["ops@localhost"]}
    if webhook:
        table["webhook"] = webhook
    return Alerter(AlertConfig.from_dict(table), source="test-master", policy=policy)


def test_alert_reaches_smtp_and_webhook(smtp_inbox, webhook_inbox):  # noqa: F811
    mails, smtp = smtp_inbox
    hooks, url = webhook_inbox
    alerter = make_alerter(smtp, url)
    try:
        alerter.send("store_down", "the store is unreachable", {"url": "redis://x", "error": "boom"})
        mail = mails.wait_for(lambda m: "store is unreachable" in m["Subject"])
        assert mail["To"] == "ops@localhost"
        assert "error: boom" in mail.get_payload()
        hook = hooks.wait_for(lambda h: h["kind"] == "store_down")
        assert hook["details"] == {"url": "redis://x", "error": "boom"}
        assert hook["source"] == "test-master"
    finally:
        alerter.close()


def test_send_never_blocks_on_a_dead_receiver():
    # Nothing listens on this port: delivery fails in the background, send returns at once.
    alerter = make_alerter("127.0.0.1:9", "http://127.0.0.1:9/alerts")
    started = time.monotonic()
    for i in range(20):
        alerter.send(f"kind{i}", "subject", {})
    assert time.monotonic() - started < 0.5
    alerter.close(timeout=0.5)


def test_rate_limit_counts_what_it_held_back(webhook_inbox):  # noqa: F811
    hooks, url = webhook_inbox
    alerter = make_alerter(None, url, min_interval="1s")
    try:
        for _ in range(5):
            alerter.send("backlog:email", "queue email is backed up", {})
        alerter.send("backlog:email", "another subject of that kind passes", {})
        alerter.send("other", "queue email is backed up", {})  # so does that subject of another kind
        assert alerter.flush(10)
        assert [(h["kind"], h["subject"]) for h in hooks.items] == [
            ("backlog:email", "queue email is backed up"),
            ("backlog:email", "another subject of that kind passes"),
            ("other", "queue email is backed up"),
        ]

        def repeated():
            first = ("backlog:email", "queue email is backed up")
            return [h for h in hooks.items if (h["kind"], h["subject"]) == first]

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the limit lifts after min_interval
            alerter.send("backlog:email", "queue email is backed up", {})
            assert alerter.flush(10)
            if len(repeated()) == 2:
                break
            time.sleep(0.1)
        assert len(repeated()) == 2
        assert repeated()[1]["suppressed"] >= 4
    finally:
        alerter.close()


def test_the_limit_forgets_subjects_whose_interval_is_over():
    """Subjects carry numbers ("queue email has 1234 jobs waiting"): a master that runs
    for months must not remember every one it ever sent."""
    alerter = make_alerter(None, "http://127.0.0.1:9/alerts", min_interval="0s")
    for waiting in range(20):
        alerter.send("backlog:email", f"queue email has {waiting} jobs waiting", {})
    assert list(alerter._last_sent) == [("backlog:email", "queue email has 19 jobs waiting")]
    alerter.close(timeout=0.5)


class Said(logging.Handler):
    """The messages of one logger, however the logging of the test session is set up."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_dead_callbacks_of_three_topics_are_three_alerts(smtp_inbox, webhook_inbox):  # noqa: F811
    """Issue 11 item 9: one topic's dead callbacks must not hide another's; a repeat within
    min_interval is held back, and the log says so rather than that it was sent."""
    from deferq import App
    from deferq.job import Job, JobState, new_job_id
    from deferq.server.http.settings import AlerterSource, save_alerts
    from deferq.server.topics import delivery

    mails, smtp = smtp_inbox
    hooks, url = webhook_inbox
    app = App("memory://")
    save_alerts(app.backend, {"email": {"smtp": smtp, "from": "deferq@localhost", "to": ["ops@localhost"]},
                              "webhook": url})  # min_interval: the default, five minutes
    source = AlerterSource(lambda: app.backend)
    delivery.install(app, source)
    alerts_log, said = logging.getLogger("deferq.alerts"), Said()
    alerts_log.addHandler(said)
    try:
        started = time.monotonic()
        for topic in ("orders", "sms", "billing", "orders"):
            job = Job(new_job_id(), delivery.TASK_NAME, (topic, {"n": 1}), state=JobState.DEAD, attempts=3,
                      error="answered HTTP 500")
            for hook in app.hooks["dead"]:
                hook(job, None)
        assert time.monotonic() - started < 1.0
        assert source.get().flush(10)
    finally:
        alerts_log.removeHandler(said)
        source.close()
        app.close()
    subjects = [f"callback of topic {topic} gave up after 3 attempt(s)" for topic in ("orders", "sms", "billing")]
    assert [(h["kind"], h["subject"], h["suppressed"]) for h in hooks.items] == [
        ("delivery_dead", subject, 0) for subject in subjects
    ]
    assert [m["Subject"] for m in mails.items] == [f"[deferq] {subject}" for subject in subjects]
    # only this test's kind: an earlier test's alerter may still be logging its own
    ours = [m for m in said.messages if m.startswith("alert delivery_dead")]
    sent, suppressed = ours[:3], ours[3:]
    assert sent == [f"alert delivery_dead: {subject}" for subject in subjects]
    assert len(suppressed) == 1
    assert suppressed[0].startswith("alert delivery_dead suppressed (1 since the last one, sent ")
    assert suppressed[0].endswith(f"min_interval 300s): {subjects[0]}")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"emial": {}}, "unknown key 'emial' in alerts"),
        ({"email": {"smtp": "h:99999", "from": "a@b", "to": ["c@d"]}}, "alerts.email.smtp"),
        ({"email": {"smtp": "h:25", "from": "a@b"}}, "alerts.email needs 'to'"),
        ({"email": {"smtp": "h:25", "from": "a@b", "to": ["nobody"]}}, "alerts.email.to"),
        ({"webhook": "ftp://x/y"}, "alerts.webhook must be an http(s):// URL"),
        ({"min_interval": "5 minutes"}, "alerts.min_interval must be a duration"),
        ({"backlog": {"email": -1}}, "alerts.backlog must be a table"),
        ({"oldest_waiting": True}, "alerts.oldest_waiting must be a duration"),
    ],
)
def test_bad_alert_settings_are_one_sentence(table, message):
    with pytest.raises(ConfigError, match=None) as caught:
        AlertConfig.from_dict(table)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_alert_config_reads_durations():
    config = AlertConfig.from_dict({"min_interval": "2m", "oldest_waiting": "1h30m", "backlog": {"email": 1000}})
    assert (config.min_interval, config.oldest_waiting, config.backlog) == (
        120,
        5400,
        {"email": 1000},
    )
    assert not config.enabled


# -- the network policy --------------------------------------------------------------------


def statuses(alerter: Alerter) -> dict[str, str]:
    return {target: alerter.try_once(target, "test", "a test", {}) for target in alerter.targets()}


def test_alerts_to_loopback_or_the_metadata_address_are_refused_by_default(monkeypatch, banner_listener):  # noqa: F811
    port, accepted = banner_listener
    monkeypatch.setenv(POLICY_ENV, "")  # the default policy
    loopback = statuses(make_alerter(f"127.0.0.1:{port}", f"http://127.0.0.1:{port}/"))
    metadata = statuses(make_alerter("169.254.169.254:25", "http://169.254.169.254/latest/meta-data/"))
    said = "refused by the network policy: 127.0.0.1 is a loopback address (allow it with allow_networks in"
    assert all(status.startswith(said) for status in loopback.values()), loopback
    assert metadata == dict.fromkeys(("e-mail", "webhook"), "refused by the network policy: 169.254.169.254 "
                                     "is a cloud metadata address (never a target)")
    assert accepted == []  # nothing was connected to


def test_a_failed_alert_says_why_in_deferqs_words_never_the_other_sides(monkeypatch, banner_listener):  # noqa: F811
    """Allowed to connect, to a service that is not SMTP or HTTP: the status says so,
    without the line that service wrote (a test alert must not read ports for an admin)."""
    port, accepted = banner_listener
    monkeypatch.setenv(POLICY_ENV, '{"allow_networks": ["loopback"]}')
    said = statuses(make_alerter(f"127.0.0.1:{port}", f"http://127.0.0.1:{port}/"))
    assert said["webhook"] == "connection failed: the other side does not answer HTTP"
    assert said["e-mail"].startswith("connection failed: the other side")
    assert "banner" not in str(said) and "SSH" not in str(said)
    assert len(accepted) == 2
    closed = statuses(make_alerter(f"127.0.0.1:{free_port()}", None))
    assert closed == {"e-mail": "connection failed: Connection refused"}


def test_smtp_alerts_follow_the_network_policy(monkeypatch, smtp_inbox):  # noqa: F811
    mails, smtp = smtp_inbox
    monkeypatch.setenv(POLICY_ENV, "")
    assert statuses(make_alerter(smtp, None))["e-mail"].startswith(
        "refused by the network policy: 127.0.0.1 is a loopback address"
    )
    monkeypatch.setenv(POLICY_ENV, '{"allow_networks": ["loopback"], "deny_ports": [25]}')
    assert statuses(make_alerter(smtp, None)) == {"e-mail": "delivered"}
    assert mails.wait_for(lambda m: m["Subject"] == "[deferq] a test")
    assert statuses(make_alerter("localhost:25", None)) == {
        "e-mail": "refused by the network policy: port 25 is in deny_ports"
    }


def test_alerts_are_never_sent_into_the_store(monkeypatch, redis_url):
    """With the store on loopback, an alert target on its port is refused at every
    loopback address, even when the policy allows loopback."""
    monkeypatch.setenv(POLICY_ENV, '{"allow_networks": ["loopback"]}')
    port = urlsplit(redis_url).port or 6379
    network = netpolicy.ForStore(redis_url)
    for host in ("127.0.0.1", "[::1]", "localhost"):
        said = statuses(make_alerter(f"{host}:{port}", f"http://{host}:{port}/", network))
        assert all(f"deferq's own store (port {port})" in s for s in said.values()), said
