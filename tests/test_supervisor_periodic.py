"""Periodic jobs: each tick enqueued exactly once, however many masters run."""

from __future__ import annotations

from collections import Counter

import pytest

import deferq
from deferq.errors import ConfigError
from deferq.flows.schedule import PeriodicJob
from deferq.supervisor.periodic import CATCH_UP, PeriodicScheduler
from tests.supervisor_harness import Master, all_jobs, every_store, store_url, wait_until

EVERY_SECOND = "* * * * * *"  # six fields: seconds come last


@pytest.fixture
def url(request, tmp_path):
    yield from store_url(request, tmp_path)


def test_app_periodic_registers_and_schedulers_share_each_tick(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/p.db")

    @app.periodic("*/5 * * * *", args=(7,), queue="reports")
    def report(n: int) -> int:
        return n

    (job,) = app.periodic_jobs
    assert (job.name, job.task, job.args, job.options) == ("report", "report", (7,), {"queue": "reports"})
    start = 1_800_000_000.0  # a multiple of 300: a tick
    first = PeriodicScheduler(app, app.periodic_jobs, start - 1)
    second = PeriodicScheduler(app, app.periodic_jobs, start - 1)
    assert first.seconds_to_next(start - 1) == 1
    assert first.run_due(start) == 1
    assert second.run_due(start + 0.5) == 0  # the other master lost the claim
    assert first.run_due(start + 600) + second.run_due(start + 600) == 2  # two more ticks
    jobs = app.list_jobs("queued") + app.list_jobs("scheduled")
    assert sorted(j.key for j in jobs) == [f"periodic:report:{int(start + s)}" for s in (0, 300, 600)]
    assert {(j.queue, j.args) for j in jobs} == {("reports", (7,))}
    app.close()


def test_ticks_missed_for_long_are_skipped(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/p.db")
    scheduler = PeriodicScheduler(app, [PeriodicJob("t", EVERY_SECOND, "tick")], 1000.0)
    assert scheduler.run_due(1000.0 + CATCH_UP + 10) == CATCH_UP + 1  # only the last CATCH_UP s
    app.close()


def test_bad_schedules_are_refused():
    with pytest.raises(ConfigError, match="invalid cron expression"):
        PeriodicJob("x", "61 * * * *", "t")
    app = deferq.App("memory://")
    with pytest.raises(ConfigError, match="cannot set 'delay'"):
        app.periodic("* * * * *", delay=5)(lambda: None)


@pytest.mark.slow
@every_store
def test_two_masters_enqueue_each_tick_exactly_once(tmp_path, url):
    body = f"""
check_every = "0.5s"
[pools.ticks]
queues = ["ticks"]
processes = {{ min = 0, max = 1 }}
[periodic.tick]
cron = "{EVERY_SECOND}"
task = "tick"
"""
    masters = [Master(tmp_path, url, body, name) for name in ("one", "two")]
    store = deferq.App(url)
    try:
        for m in masters:
            m.start()
        for m in masters:
            m.wait_log("started on")
        ticked = lambda: [j for j in all_jobs(store) if (j.key or "").startswith("periodic:tick:")]  # noqa: E731
        first = wait_until(ticked, 10, "a first tick")
        wait_until(lambda: len(ticked()) >= 11, 25, "ten seconds of ticks", every=0.2)
        for m in masters:
            assert m.stop() == 0
        jobs = ticked()
        per_tick = Counter(int(j.key.rsplit(":", 1)[1]) for j in jobs)
        assert set(per_tick.values()) == {1}, per_tick  # never twice
        ticks = sorted(per_tick)
        assert ticks == list(range(ticks[0], ticks[-1] + 1))  # never skipped
        assert len(ticks) >= 11 and first
        enqueued = sum(m.log().count("periodic tick: enqueued") for m in masters)
        assert enqueued == len(jobs)
    finally:
        for m in masters:
            m.kill()
        store.close()
