"""Schedules on every store: the leader lease, each tick claimed once, missed-run policies."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from deferq.schedules import firing
from deferq.schedules.firing import GRACE, Firer, due_ticks, tick_key
from deferq.schedules.store import RUNS
from deferq.upkeep.leader import Leader, current_leader
from tests.contract.test_contract import wait_until


@pytest.fixture
def ping(app):
    @app.task(queue="ticks")
    def ping(n: int = 0) -> int:
        return n

    return ping


def keys(app, name):
    jobs = app.list_jobs("queued") + app.list_jobs("scheduled")
    return Counter(j.key for j in jobs if (j.key or "").startswith(f"schedule:{name}:"))


def test_one_leader_at_a_time_and_a_handover_after_its_lease(app):
    first, second = Leader(app.backend, "first", lease=0.5), Leader(app.backend, "second", lease=0.5)
    assert first.hold() is True
    assert second.hold() is False
    assert first.hold() is True  # renewed
    assert current_leader(app.backend) == "first"
    assert wait_until(second.hold, timeout=5)  # the first stopped renewing: taken over
    assert first.hold() is False
    second.release()
    assert current_leader(app.backend) is None
    assert first.hold() is True


def test_two_firers_enqueue_each_tick_once(app, ping):
    app.schedules.add("pulse", ping.call(1), every=1)
    info = app.schedules["pulse"]
    one, two = Firer(app, "one"), Firer(app, "two")
    now = info.since + 5.5
    due = len(due_ticks(info.schedule, info.since, now))  # 5 or 6 whole seconds
    assert one.fire_due(info, now) == due
    assert two.fire_due(info, now) == 0  # the ticks were claimed: a second leader fires none
    assert one.fire_due(info, now + 2) + two.fire_due(info, now + 2) == 2
    counted = keys(app, "pulse")
    assert len(counted) == due + 2 and set(counted.values()) == {1}
    assert app.schedules["pulse"].last_job is not None


def test_a_tick_claimed_by_a_leader_that_died_is_enqueued_once(app, ping):
    app.schedules.add("pulse", ping.call(), every=1)
    info = app.schedules["pulse"]
    tick = due_ticks(info.schedule, info.since, info.since + 1)[0]
    app.backend.kv_put(RUNS, "pulse", orjson.dumps({"tick": tick, "done": False}))  # claimed, no job
    Firer(app, "next").fire_due(info, tick + 0.1)
    assert keys(app, "pulse") == Counter({tick_key("pulse", tick): 1})
    assert orjson.loads(app.backend.kv_get(RUNS, "pulse"))["done"] is True


@pytest.mark.parametrize("missed", ["skip", "latest", "all"])
def test_missed_runs_follow_the_policy(app, ping, missed, monkeypatch):
    monkeypatch.setattr(firing, "MISSED_LIMIT", 20)
    app.schedules.add("slow", ping.call(), every=10, missed=missed)
    info = app.schedules["slow"]
    now = info.since + 1000  # down for a while: 100 ticks due
    ticks = due_ticks(info.schedule, info.since, now)
    on_time = [t for t in ticks if now - t <= GRACE]
    fired = Firer(app, "back").fire_due(info, now)
    expected = {"skip": len(on_time), "latest": len(on_time) + 1, "all": len(on_time) + 20}[missed]
    assert fired == expected == len(keys(app, "slow"))
    assert Firer(app, "back").fire_due(app.schedules["slow"], now) == 0  # nothing twice


def test_a_paused_schedule_misses_nothing_when_resumed(app, ping):
    app.schedules.add("pulse", ping.call(), every=1, missed="all")
    assert app.schedules.pause("pulse") is True
    assert app.schedules.pause("pulse") is False
    assert app.schedules["pulse"].paused and app.schedules["pulse"].upcoming(0) == []
    assert app.schedules.resume("pulse") is True
    info = app.schedules["pulse"]
    assert Firer(app, "one").fire_due(info, info.since + 0.5) <= 1  # counting starts again at resume


def test_an_unreadable_record_is_left_out_and_the_others_fire(app, ping):
    app.schedules.add("pulse", ping.call(), every=1)
    app.backend.kv_put("schedules", "broken", b'{"schedule": {"name": "broken"}}')
    assert [s.name for s in app.schedules.list()] == ["pulse"]
    assert Firer(app, "one").step() > 0


def test_a_run_record_that_moved_on_is_never_moved_back(app, ping):
    app.schedules.add("pulse", ping.call(), every=1)
    info = app.schedules["pulse"]
    tick = due_ticks(info.schedule, info.since, info.since + 1)[0]
    stale = orjson.dumps({"tick": tick, "done": False})
    app.backend.kv_put(RUNS, "pulse", orjson.dumps({"tick": tick + 1, "done": True}))  # another process, ahead
    assert Firer(app, "late").fire_due(info, tick + 0.5) == 0  # nothing due after tick + 1
    assert Firer(app, "late")._finish(info.schedule, stale, orjson.loads(stale)) is None
    assert orjson.loads(app.backend.kv_get(RUNS, "pulse"))["tick"] == tick + 1


def test_bad_stored_records_are_skipped_and_every_other_schedule_fires(app, ping, caplog):
    """Records written by hand or by an older version, sorting before and after the good
    ones: each is logged and shown as broken; the others list and fire."""
    app.schedules.add("b-pulse", ping.call(), every=1)
    app.schedules.add("z-pulse", ping.call(), every=1)
    good = orjson.loads(app.backend.kv_get("schedules", "b-pulse"))
    never = {**good, "schedule": {**good["schedule"], "name": "a-never", "every": None, "cron": "0 0 31 2 *"}}
    long_name = "l" * 180  # accepted once: its tick key cannot fit a job's key (200)
    bad = {"a-never": orjson.dumps(never), "c-garbage": b"not json", "d-tz": orjson.dumps(
        {**never, "schedule": {**never["schedule"], "name": "d-tz", "cron": "* * * * *", "tz": "x" * 10_000}}),
        long_name: orjson.dumps({**good, "schedule": {**good["schedule"], "name": long_name}})}
    for name, record in bad.items():
        app.backend.kv_put("schedules", name, record)
    found, broken = app.schedules.scan()
    assert [s.name for s in found] == ["b-pulse", "z-pulse"]
    assert sorted(b.name for b in broken) == sorted(bad) and all(b.problem for b in broken)
    assert "never fires" in next(b.problem for b in broken if b.name == "a-never")
    firer = Firer(app, "one")
    since = max(s.since for s in found)
    wait_until(lambda: app.backend.now() > since + 2.1, timeout=5)
    firer.step()
    assert keys(app, "b-pulse") and keys(app, "z-pulse")
    assert any("a-never" in r.getMessage() for r in caplog.records)


def test_a_leader_frozen_between_claim_and_enqueue_enqueues_nothing(app, ping, monkeypatch):
    """The frozen leader's claim is taken over by the next leader, whose job runs and ends
    (its unique key free again); the frozen one then wakes and must not enqueue the tick."""
    app.schedules.add("pulse", ping.call(), every=1)
    info = app.schedules["pulse"]
    tick = due_ticks(info.schedule, info.since, info.since + 1)[0]
    woke: list[float] = []

    def meanwhile(point: str) -> None:  # `frozen` stops here, past its lease
        if woke or point != "schedule.enqueue":
            return  # the next leader passes here too
        woke.append(tick)
        Firer(app, "next").fire_due(info, tick + 0.5)  # takes the claim over and enqueues
        (job,) = [j for j in app.list_jobs("queued") if j.key == tick_key("pulse", tick)]
        app.cancel(job.id)  # it ended: its unique key is free again

    monkeypatch.setattr(firing, "pause_at", meanwhile)
    Firer(app, "frozen").fire_due(info, tick + 0.5)
    assert woke == [tick]
    jobs = [j for j in app.list_jobs("cancelled") + app.list_jobs("queued") if j.key == tick_key("pulse", tick)]
    assert len(jobs) == 1, jobs
    assert orjson.loads(app.backend.kv_get(RUNS, "pulse"))["done"] is True


def test_a_round_enqueues_many_due_ticks_in_batches_each_once(app, ping):
    count = firing.BATCH * 2 + 7
    for n in range(count):
        app.schedules.add(f"many-{n:03d}", ping.call(n), every=1)
    since = max(s.since for s in app.schedules.list())
    firer = Firer(app, "one")
    wait_until(lambda: app.backend.now() > since + 1.05, timeout=5)
    firer.step()
    jobs = [j for j in app.list_jobs("queued", limit=10_000) if (j.key or "").startswith("schedule:many-")]
    per_schedule = Counter(j.key.rsplit(":", 1)[0] for j in jobs)
    assert len(per_schedule) == count and len(jobs) == len(set(j.key for j in jobs))
    runs = app.backend.kv_list(RUNS)
    assert all(orjson.loads(runs[f"many-{n:03d}"])["done"] for n in range(count))
    Firer(app, "two").fire_due(app.schedules["many-000"], app.backend.now())  # later ticks, none twice
    keyed = Counter(j.key for j in app.list_jobs("queued", limit=10_000) if (j.key or "").startswith("schedule:"))
    assert set(keyed.values()) == {1}
