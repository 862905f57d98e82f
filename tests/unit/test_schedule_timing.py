"""When schedules fire: cron in a time zone across daylight saving, `every`, bad input."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deferq
from deferq.errors import ConfigError
from deferq.schedules.definition import PeriodicJob, make_schedule
from deferq.schedules.firing import GRACE, MISSED_LIMIT, due_ticks, to_fire
from deferq.schedules.timing import Timing


def walls(timing: Timing, day: str, count: int) -> list[str]:
    """The next `count` fire times after noon UTC of `day`, on the zone's wall clock."""
    start = datetime.fromisoformat(f"{day}T12:00:00+00:00").timestamp()
    zone = ZoneInfo(timing.tz or "UTC")
    return [datetime.fromtimestamp(t, zone).strftime("%m-%d %H:%M%z") for t in timing.upcoming(start, count)]


@pytest.mark.parametrize(("tz", "day", "cron", "expected"), [
    # spring forward: the skipped wall time fires once, shifted by the gap
    ("Europe/Berlin", "2026-03-28", "30 2 * * *", ["03-29 03:30+0200", "03-30 02:30+0200"]),
    ("America/New_York", "2026-03-07", "30 2 * * *", ["03-08 03:30-0400", "03-09 02:30-0400"]),
    # fall back: the repeated wall time fires once, at its first occurrence
    ("Europe/Berlin", "2026-10-24", "30 2 * * *", ["10-25 02:30+0200", "10-26 02:30+0100"]),
    ("America/New_York", "2026-10-31", "30 1 * * *", ["11-01 01:30-0400", "11-02 01:30-0500"]),
])
def test_a_daily_time_fires_once_on_both_daylight_saving_nights(tz, day, cron, expected):
    assert walls(Timing(cron, tz=tz), day, 2) == expected


def test_an_hourly_cron_keeps_its_wall_times_across_both_changes():
    half_hourly = Timing("*/30 * * * *", tz="Europe/Berlin")
    spring = half_hourly.upcoming(datetime(2026, 3, 28, 23, 10, tzinfo=UTC).timestamp(), 5)
    assert [datetime.fromtimestamp(t, UTC).strftime("%H:%M") for t in spring] == [
        "23:30", "00:00", "00:30", "01:00", "01:30"]  # 02:00 and 02:30 local are 03:00 and 03:30
    fall = half_hourly.upcoming(datetime(2026, 10, 24, 23, 40, tzinfo=UTC).timestamp(), 5)
    assert [datetime.fromtimestamp(t, UTC).strftime("%H:%M") for t in fall] == [
        "00:00", "00:30", "02:00", "02:30", "03:00"]  # the repeated hour (01:00-02:00 UTC) fires once


# A reference independent of croniter: every wall-clock minute that matches, read by
# zoneinfo with fold=0 (what timing.py documents), the least one after the moment.

def matches(value: int, field: str) -> bool:
    if field == "*":
        return True
    if field.startswith("*/"):
        return value % int(field[2:]) == 0
    return value in {int(v) for v in field.split(",")}


def reference_next(minute: str, hour: str, tz: str, moment: float) -> float:
    zone = ZoneInfo(tz)
    wall = datetime.fromtimestamp(moment, zone).replace(tzinfo=None, second=0) - timedelta(hours=3)
    best = None
    for step in range(60 * 60 * 30):
        candidate = wall + timedelta(minutes=step)
        if matches(candidate.minute, minute) and matches(candidate.hour, hour):
            fires = candidate.replace(tzinfo=zone, fold=0).timestamp()
            if fires > moment and (best is None or fires < best):
                best = fires
            best_wall = None if best is None else datetime.fromtimestamp(best, zone).replace(tzinfo=None)
            if best_wall is not None and candidate > best_wall + timedelta(hours=3):
                return best
    raise AssertionError("no match within 30 hours")


TRANSITIONS = [datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 10, 25, 1, tzinfo=UTC),
               datetime(2026, 3, 8, 7, tzinfo=UTC), datetime(2026, 11, 1, 6, tzinfo=UTC)]


@settings(max_examples=60, deadline=None)
@given(zone=st.sampled_from(["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"]),
       near=st.sampled_from(TRANSITIONS), offset=st.integers(-4 * 3600, 4 * 3600),
       minute=st.sampled_from(["*", "*/15", "0", "30", "0,45", "7"]),
       hour=st.sampled_from(["*", "1", "2", "3", "1,2", "*/2"]))
def test_next_fire_times_agree_with_zoneinfo(zone, near, offset, minute, hour):
    moment = near.timestamp() + offset
    expected = reference_next(minute, hour, zone, moment)
    assert Timing(f"{minute} {hour} * * *", tz=zone).next_after(moment) == expected


@given(every=st.integers(1, 7200), moment=st.floats(0, 4e9))
def test_every_ticks_fall_on_multiples_of_the_interval(every, moment):
    tick = Timing(every=every).next_after(moment)
    assert tick > moment >= tick - every and tick % every == 0


@pytest.mark.parametrize(("keywords", "sentence"), [
    ({"cron": "61 * * * *"}, "'61 * * * *' is not a valid cron expression"),
    ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"every": timedelta(milliseconds=500)}, "every must be at least one second"),
    ({"every": 5, "cron": "* * * * *"}, "either cron or every"),
    ({}, "either cron or every"),
    ({"every": 5, "missed": "some"}, "missed must be one of skip, latest, all"),
    ({"every": 5, "jitter": -1}, "jitter must be 0 to 86400 seconds"),
    ({"every": 5, "delay": 3}, "cannot set 'delay'"),
])
def test_bad_schedules_are_refused_in_one_sentence(keywords, sentence):
    with pytest.raises(ConfigError, match=sentence.replace("*", r"\*")) as caught:
        make_schedule("s", "t", **keywords)
    assert "\n" not in str(caught.value)


def test_a_definition_survives_json_as_is():
    job = make_schedule("s", "t", [1], {"a": 2}, cron="0 9 * * 1-5", tz="Europe/Berlin", jitter=5,
                        missed="latest", queue="q", expires=30)
    assert PeriodicJob.from_dict(job.to_dict()) == job


def test_app_periodic_takes_every_and_tz():
    app = deferq.App("memory://")

    @app.periodic(every=timedelta(seconds=30), jitter=2)
    def poll() -> None: ...

    @app.periodic("0 9 * * 1-5", tz="Europe/Berlin", missed="all")
    def report() -> None: ...

    assert [(j.name, j.every, j.cron, j.tz) for j in app.periodic_jobs] == [
        ("poll", 30.0, None, None), ("report", None, "0 9 * * 1-5", "Europe/Berlin")]


@settings(max_examples=80, deadline=None)
@given(every=st.integers(1, 900), down=st.floats(0, 50_000), offset=st.floats(0, 1))
def test_missed_policies_nest_and_always_fire_the_ticks_on_time(every, down, offset):
    after = 1_800_000_000 + offset * every
    now = after + down
    fired = {missed: to_fire(make_schedule("s", "t", every=every, missed=missed), after, now)[0]
             for missed in ("skip", "latest", "all")}
    ticks = due_ticks(make_schedule("s", "t", every=every), after, now)
    on_time = [t for t in ticks if now - t <= GRACE]
    late = len(ticks) - len(on_time)
    newest_late = ticks[late - 1:late]  # [] when none is late
    assert fired["skip"] == on_time  # in order, each once
    assert fired["latest"] == newest_late + on_time
    assert fired["all"] == ticks[max(0, late - MISSED_LIMIT):late] + on_time
    assert all(after < t <= now for t in fired["all"]) and fired["all"] == sorted(set(fired["all"]))


def test_missed_cron_ticks_after_long_downtime_are_found_quickly():
    every_second = make_schedule("s", "t", cron="* * * * * *", missed="all")
    after = 1_800_000_000.0
    ticks = due_ticks(every_second, after, after + 10 * 86400)  # ten days down: the newest looked at
    assert ticks[-1] == after + 10 * 86400 and MISSED_LIMIT + GRACE <= len(ticks) <= 4 * MISSED_LIMIT
    yearly = make_schedule("y", "t", cron="0 0 1 1 *", missed="all")
    assert len(due_ticks(yearly, after, after + 5 * 366 * 86400)) == 5


def walked_next(cron: str, tz: str, moment: float) -> float:
    """A slow reference: every matching wall time from three hours before `moment`'s,
    read with fold=0, the least after `moment` (stopping three hours past the best)."""
    from croniter import croniter

    zone = ZoneInfo(tz)
    walk = croniter(cron, datetime.fromtimestamp(moment, zone).replace(tzinfo=None) - timedelta(hours=3),
                    second_at_beginning=True)
    best, best_wall = None, None
    while True:
        wall = walk.get_next(datetime)
        if best_wall is not None and wall > best_wall + timedelta(hours=3):
            return best
        fires = wall.replace(tzinfo=zone, fold=0).timestamp()
        if fires > moment and (best is None or fires < best):
            best, best_wall = fires, wall


@settings(max_examples=150, deadline=None)
@given(zone=st.sampled_from(["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Europe/Moscow",
                             "Pacific/Apia", "America/Santiago", "Asia/Tehran"]),
       near=st.sampled_from([*TRANSITIONS, datetime(2011, 12, 29, 10, tzinfo=UTC),
                             datetime(2026, 4, 5, 2, tzinfo=UTC), datetime(2026, 9, 6, 4, tzinfo=UTC)]),
       offset=st.floats(-30 * 3600, 30 * 3600),
       cron=st.sampled_from(["*/20 * * * * *", "30 */7 * * * *", "*/15 * * * *", "30 2 * * *", "0 0 * * *",
                             "59 23 31 12 *", "0 3 * * 0", "*/45 1-3 * * *", "0 0 29 2 *", "15 0 1 * *"]))
def test_the_next_tick_in_a_zone_agrees_with_walking_every_wall_time(zone, near, offset, cron):
    moment = near.timestamp() + offset
    assert Timing(cron, tz=zone).next_after(moment) == walked_next(cron, zone, moment)


def test_six_fields_are_read_seconds_first():
    start = datetime(2026, 12, 7, 9, 0, 3, tzinfo=UTC).timestamp()
    ticks = Timing("*/10 * * * * *").upcoming(start, 3)
    assert [datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S") for t in ticks] == ["09:00:10", "09:00:20",
                                                                                 "09:00:30"]
    assert Timing("*/10 * * * * *").describe(start) == ("*/10 * * * * * (UTC): next 2026-12-07 09:00:10+00:00, "
                                                        "09:00:20, 09:00:30")
    assert Timing("0 9 * * *", tz="America/New_York").describe(start, 2) == (
        "0 9 * * * (America/New_York): next 2026-12-07 09:00:00-05:00, 2026-12-08 09:00:00-05:00")


@pytest.mark.parametrize(("cron", "tz", "sentence"), [
    ("0 0 31 2 *", None, "'0 0 31 2 *' never fires: no date matches it"),
    ("0 0 30 2 *", "Europe/Berlin", "never fires"),
    ("* * * * * * *", None, "has 7 fields"),
    ("* * * *", None, "has 4 fields"),
    ("H * * * *", None, "hashed (H) values are not supported"),
    ("0 R * * *", None, "random (R)"),
    ("@often", None, "the shortcuts are"),
    ("* " * 200, None, "1 to 200 characters"),
    ("* * * * *", "x" * 10_000, "unknown time zone"),
    ("* * * * *", "../../etc/passwd", "unknown time zone"),
    ("* * * * *", "Europe/Berlin\n", "unknown time zone"),
])
def test_crons_that_can_never_fire_are_refused_in_one_sentence(cron, tz, sentence):
    with pytest.raises(ConfigError, match=re.escape(sentence)) as caught:
        Timing(cron, tz=tz)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


def test_names_and_weekday_words_that_are_fine():
    assert Timing("0 9 * * MON-FRI").next_after(0) and Timing("@daily", tz="Asia/Tokyo").next_after(0)
    assert make_schedule("é 😀 x:1", "t", every=5).name == "é 😀 x:1"
