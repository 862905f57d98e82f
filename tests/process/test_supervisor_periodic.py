"""Periodic jobs under `deferq run`: each tick enqueued exactly once, however many masters run."""

from __future__ import annotations

from collections import Counter

import pytest

import deferq
from deferq.errors import ConfigError
from deferq.schedules.definition import PeriodicJob
from deferq.supervisor.config import SupervisorConfig
from deferq.supervisor.master import check_periodic_tasks
from deferq.upkeep import Upkeep
from tests.support.supervisor_harness import Master, all_jobs, every_store, store_url, wait_until

EVERY_SECOND = "* * * * * *"  # six fields: seconds come last


@pytest.fixture
def url(request, tmp_path):
    yield from store_url(request, tmp_path)


def test_the_master_declares_its_config_schedules_and_fires_them_once(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/p.db")

    @app.periodic("*/5 * * * *", args=(7,), queue="reports")
    def report(n: int) -> int:
        return n

    (job,) = app.periodic_jobs
    assert (job.name, job.task, job.args, job.options) == ("report", "report", (7,), {"queue": "reports"})
    from_config = (PeriodicJob("tick", EVERY_SECOND, "report"),)
    first, second = Upkeep(app, "one", from_config), Upkeep(app, "two", from_config)
    first.step()
    second.step()  # the other master is no leader: it fires nothing
    assert first.leading and not second.leading
    assert {(s.name, s.source) for s in app.schedules.list()} == {("report", "code"), ("tick", "config")}
    assert first.step() <= 1
    first.leader.release()  # a clean stop
    assert wait_until(lambda: second.step() and second.leading, 5, "a handover")
    app.close()


def test_two_schedules_of_one_name_are_refused(tmp_path):
    app = deferq.App("memory://")

    @app.periodic("* * * * *", name="tick")
    def tick() -> None: ...

    config = SupervisorConfig(None, None, (), periodic=(PeriodicJob("tick", EVERY_SECOND, "tick"),))
    with pytest.raises(ConfigError, match="two periodic jobs are named 'tick'"):
        check_periodic_tasks(app, config)


def never_run() -> None:
    """A task that is only scheduled."""


def test_bad_schedules_are_refused():
    with pytest.raises(ConfigError, match="not a valid cron expression"):
        PeriodicJob("x", "61 * * * *", "t")
    app = deferq.App("memory://")
    with pytest.raises(ConfigError, match="cannot set 'delay'"):
        app.periodic("* * * * *", delay=5)(never_run)


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
        ticked = lambda: [j for j in all_jobs(store) if (j.key or "").startswith("schedule:tick:")]  # noqa: E731
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
        enqueued = sum(m.log().count("schedule tick: enqueued") for m in masters)
        assert enqueued == len(jobs)
    finally:
        for m in masters:
            m.kill()
        store.close()
