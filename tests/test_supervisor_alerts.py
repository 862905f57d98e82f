"""Alerts reach a real SMTP server and a real webhook receiver; bad settings: one sentence."""

from __future__ import annotations

import time

import pytest

from deferq.alerts import AlertConfig, Alerter
from deferq.errors import ConfigError
from tests.alert_receivers import smtp_inbox, webhook_inbox  # noqa: F401 - fixtures


def make_alerter(smtp: str | None, webhook: str | None, **extra: object) -> Alerter:
    table: dict[str, object] = dict(extra)
    if smtp:
        table["email"] = {"smtp": smtp, "from": "deferq@localhost", "to": ["ops@localhost"]}
    if webhook:
        table["webhook"] = webhook
    return Alerter(AlertConfig.from_dict(table), source="test-master")


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
        for i in range(5):
            alerter.send("backlog:email", f"backlog {i}", {})
        alerter.send("other", "another kind passes", {})
        assert alerter.flush(10)
        assert [h["subject"] for h in hooks.items] == ["backlog 0", "another kind passes"]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the limit lifts after min_interval
            alerter.send("backlog:email", "later", {})
            assert alerter.flush(10)
            if any(h["subject"] == "later" for h in hooks.items):
                break
            time.sleep(0.1)
        later = hooks.wait_for(lambda h: h["subject"] == "later")
        assert later["suppressed"] >= 4
    finally:
        alerter.close()


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
