"""Callback counts reach the store within seconds of an attempt, even when no other follows."""

from __future__ import annotations

import orjson

import deferq
from deferq.server.topics.stats import NAMESPACE, DeliveryStats, summed
from tests.support.supervisor_harness import wait_until


def test_the_last_attempt_of_a_burst_is_published_by_the_timer(tmp_path, monkeypatch):
    monkeypatch.setenv("DEFERQ_DELIVERY_STATS_SECONDS", "0.5")
    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")
    stats = DeliveryStats()
    try:
        stats.add("orders", "succeeded", 0.01)
        assert stats.due()  # the first attempt after a quiet spell: at once
        stats.publish(app.backend)
        assert summed(app.backend) == {("orders", "succeeded"): (1, 0.01)}
        for _ in range(3):  # a burst within the period: not due, the timer writes it once
            stats.add("orders", "retry", 0.02)
            assert not stats.due()
        assert summed(app.backend)[("orders", "succeeded")] == (1, 0.01)
        wait_until(lambda: summed(app.backend).get(("orders", "retry"), (0,))[0] == 3, 5,
                   "the burst published by the timer")
        record = orjson.loads(app.backend.kv_get(NAMESPACE, stats.key))
        assert record["orders"]["retry"][0] == 3 and not stats.dirty
    finally:
        app.close()
