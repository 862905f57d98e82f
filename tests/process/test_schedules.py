"""Schedules as data: managed at run time through app.schedules, `deferq schedule` and
/v1/schedules, and fired by plain workers without any restart."""

from __future__ import annotations

import re
import threading
from urllib.parse import quote

import orjson
import pytest

import deferq
from deferq.errors import ConfigError
from deferq.schedules import firing
from deferq.server import ServerConfig, create_app
from deferq.server.http import auth
from deferq.upkeep.leader import current_leader
from deferq.worker import Worker, WorkerConfig
from tests.process.test_cli import run_deferq
from tests.support.server_helpers import TestClient
from tests.support.supervisor_harness import wait_until


@pytest.fixture
def app(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/s.db")

    @app.task(queue="ticks")
    def ping(n: int = 0) -> int:
        return n

    yield app
    app.close()


def ran(app: deferq.App, name: str) -> list[deferq.Job]:
    return [j for j in app.list_jobs("succeeded", limit=1000) if (j.key or "").startswith(f"schedule:{name}:")]


def test_a_schedule_added_through_the_api_fires_on_a_running_worker_and_stops_when_paused(app):
    admin = {"authorization": f"Bearer {auth.create(app.backend, 'admin')[0]}"}
    worker = Worker(app, WorkerConfig(queues=("ticks",), concurrency=2, idle_wait=0.1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        with TestClient(create_app(ServerConfig(error_log="off"), deferq.App(app.url))) as client:
            pulse = {"task": "ping", "every": 1, "args": [3]}
            added = client.put("/v1/schedules/pulse", json=pulse, headers=admin)
            assert added.status_code == 201, added.text
            wait_until(lambda: len(ran(app, "pulse")) >= 2, 15, "two ticks run by the worker")
            assert client.post("/v1/schedules/pulse/pause", headers=admin).json()["paused"]
        settled = len(ran(app, "pulse")) + len(app.list_jobs("queued")) + len(app.list_jobs("active"))
        wait_until(lambda: not app.list_jobs("queued") and not app.list_jobs("active"), 5, "the last tick run")
        threading.Event().wait(2.5)  # nothing to await: two more ticks' time, and none of them fires
        assert len(ran(app, "pulse")) <= settled
        assert {j.args for j in ran(app, "pulse")} == {(3,)}
    finally:
        worker.stop()
        thread.join(30)
    assert current_leader(app.backend) is None  # a stopping worker gives the lease up


def test_code_schedules_are_declared_and_code_wins_at_the_next_start(app):
    app.periodic_jobs.append(firing.PeriodicJob("tidy", "0 3 * * *", "ping"))
    app.schedules.declare(app.periodic_jobs)
    app.schedules.pause("tidy")
    app.periodic_jobs[0] = firing.PeriodicJob("tidy", "0 4 * * *", "ping", tz="Europe/Berlin")
    app.schedules.declare(app.periodic_jobs)  # the next deploy
    info = app.schedules["tidy"]
    assert (info.schedule.cron, info.schedule.tz, info.source, info.paused) == ("0 4 * * *", "Europe/Berlin",
                                                                              "code", True)


@pytest.mark.parametrize(("keywords", "sentence"), [
    ({"cron": "not cron"}, "has 2 fields: a cron expression has five"),
    ({"cron": "0 9 * * *", "tz": "Nowhere/Atlantis"}, "unknown time zone"),
    ({"every": 0.2}, "every must be at least one second"),
])
def test_bad_input_stores_nothing(app, keywords, sentence):
    with pytest.raises(ConfigError, match=sentence):
        app.schedules.add("bad", app.tasks["ping"].call(), **keywords)
    with pytest.raises(ConfigError, match="names the task 'nope', which the app does not have"):
        app.schedules.put(firing.PeriodicJob("bad", "* * * * *", "nope"), "api")
    assert app.schedules.list() == []


def test_the_http_api_adds_changes_pauses_and_removes_a_schedule(app):
    admin, _ = auth.create(app.backend, "admin")
    reader, _ = auth.create(app.backend, "reader")
    as_admin, as_reader = {"authorization": f"Bearer {admin}"}, {"authorization": f"Bearer {reader}"}
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        body = {"task": "ping", "cron": "30 2 * * *", "tz": "Europe/Berlin", "args": [1], "priority": "high"}
        assert client.put("/v1/schedules/nightly", json=body, headers=as_reader).status_code == 403
        made = client.put("/v1/schedules/nightly", json=body, headers=as_admin)
        assert made.status_code == 201, made.text
        shown = made.json()
        assert shown["source"] == "api" and len(shown["next"]) == 5 and shown["options"]["queue"] == "ticks"
        changed = client.put("/v1/schedules/nightly", json={**body, "cron": "45 2 * * *"}, headers=as_admin)
        assert changed.status_code == 200 and changed.json()["cron"] == "45 2 * * *"
        assert client.post("/v1/schedules/nightly/pause", headers=as_admin).json()["paused"] is True
        assert client.get("/v1/schedules/nightly", headers=as_reader).json()["next"] == []
        assert client.post("/v1/schedules/nightly/resume", headers=as_admin).json()["paused"] is False
        job = client.post("/v1/schedules/nightly/run-now", headers=as_admin).json()
        assert app.get(job["id"]).args == (1,)
        listed = client.get("/v1/schedules", headers=as_reader).json()
        assert [s["name"] for s in listed["schedules"]] == ["nightly"] and listed["leader"] is None
        for bad, says in [({"task": "ping", "cron": "0 9 * * *", "every": 5}, "cron or every"),
                          ({"task": "ping", "cron": "0 9 * * *", "tz": "Mars/Base"}, "unknown time zone"),
                          ({"task": "nope", "every": 5}, "which the app does not have"),
                          ({"task": "ping", "every": 0.5}, "every")]:
            refused = client.put("/v1/schedules/bad", json=bad, headers=as_admin)
            assert refused.status_code == 422 and says in refused.json()["error"]["message"], refused.text
        assert client.delete("/v1/schedules/nightly", headers=as_admin).json() == {"deleted": "nightly"}
        assert client.delete("/v1/schedules/nightly", headers=as_admin).status_code == 404
        assert client.get("/v1/schedules", headers=as_reader).json()["schedules"] == []


SCHEDULED_APP = """
import deferq

app = deferq.App()


@app.task
def ping(n: int = 0) -> int:
    return n
"""


def test_the_cli_adds_lists_pauses_and_removes(tmp_path):
    (tmp_path / "sched.py").write_text(SCHEDULED_APP)
    url = f"sqlite:///{tmp_path}/c.db"

    def deferq_says(*args: str, code: int = 0) -> str:
        done = run_deferq("schedule", *args, "--url", url, cwd=tmp_path)
        assert done.returncode == code, done.stderr
        return done.stdout + done.stderr

    assert "added schedule nightly: 30 2 * * * (Europe/Berlin); next" in deferq_says(
        "add", "nightly", "ping", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--app", "sched:app")
    assert "which the app does not have" in deferq_says("add", "x", "nope", "--every", "5", "--app", "sched:app",
                                                        code=2)
    listed = (r"^nightly  30 2 \* \* \* \(Europe/Berlin\)  ping  api   "
              r"2\d{3}-\d\d-\d\d 02:30:00\+0[12]:00  never fired$")
    assert re.search(listed, deferq_says("list"), re.MULTILINE)
    assert "paused schedule nightly" in deferq_says("pause", "nightly")
    assert "enqueued" in deferq_says("run-now", "nightly")
    assert "removed schedule nightly" in deferq_says("remove", "nightly")
    assert "no schedule named 'nightly'" in deferq_says("remove", "nightly", code=1)


def test_jitter_delays_a_ticks_job_but_not_its_tick(app):
    app.schedules.add("spread", app.tasks["ping"].call(), every=60, jitter=30)
    info = app.schedules["spread"]
    tick = info.schedule.next_after(info.since)
    assert firing.Firer(app, "one").fire_due(info, tick + 1) == 1
    (job,) = app.list_jobs("scheduled") + app.list_jobs("queued")
    assert job.key == firing.tick_key("spread", tick) and job.created_at <= job.run_at <= job.created_at + 30


def noop() -> None:
    """A task to schedule."""


ADMIN_REFUSALS = [  # (name, body, what the sentence says): each refused with 422, nothing stored
    ("feb30", {"task": "ping", "cron": "0 0 31 2 *"}, "never fires"),
    ("seven", {"task": "ping", "cron": "0 0 * * * * 2030"}, "has 7 fields"),
    ("hashed", {"task": "ping", "cron": "H * * * *"}, "hashed (H)"),
    ("zoned", {"task": "ping", "cron": "0 9 * * *", "tz": "x" * 10_000}, "tz"),
    ("zoned2", {"task": "ping", "cron": "0 9 * * *", "tz": "Europe/" + "x" * 50}, "unknown time zone"),
    ("l" * 151, {"task": "ping", "every": 5}, "1 to 150 characters"),
    ("l" * 180, {"task": "ping", "every": 5}, "1 to 150 characters"),
    ("new\nline", {"task": "ping", "every": 5}, "control characters"),
    ("tab\there", {"task": "ping", "every": 5}, "control characters"),
    ("trailing ", {"task": "ping", "every": 5}, "spaces at either end"),
]


@pytest.mark.parametrize(("name", "body", "says"), ADMIN_REFUSALS, ids=[n[:10] for n, _, _ in ADMIN_REFUSALS])
def test_the_http_api_refuses_what_can_never_fire_or_fit_and_stores_nothing(app, name, body, says):
    admin = {"authorization": f"Bearer {auth.create(app.backend, 'admin')[0]}"}
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        refused = client.put(f"/v1/schedules/{quote(name, safe='')}", json=body, headers=admin)
        assert refused.status_code == 422 and says in refused.json()["error"]["message"], refused.text
        assert "\n" not in refused.json()["error"]["message"]
    assert app.backend.kv_list("schedules") == {}


@pytest.mark.parametrize(("name", "body", "says"), ADMIN_REFUSALS, ids=[n[:10] for n, _, _ in ADMIN_REFUSALS])
def test_python_and_periodic_refuse_the_same(app, name, body, says):
    timing = {k: v for k, v in body.items() if k != "task"}
    with pytest.raises(ConfigError, match=re.escape(says) if says != "tz" else "time zone"):
        app.schedules.add(name, app.tasks["ping"].call(), **timing)
    with pytest.raises(ConfigError, match=re.escape(says) if says != "tz" else "time zone"):
        app.periodic(timing.pop("cron", None), name=name, **timing)(noop)
    assert app.backend.kv_list("schedules") == {} and app.periodic_jobs == []


def test_the_answer_and_describe_show_the_next_ticks_seconds_first(app):
    admin = {"authorization": f"Bearer {auth.create(app.backend, 'admin')[0]}"}
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        made = client.put("/v1/schedules/tens", json={"task": "ping", "cron": "*/10 * * * * *"}, headers=admin)
    shown = made.json()
    assert made.status_code == 201 and [b - a for a, b in zip(shown["next"], shown["next"][1:])] == [10.0] * 4
    assert shown["described"].startswith("*/10 * * * * * (UTC): next ")
    assert re.fullmatch(r"\S+ \S+ \S+ \S+ \S+ \S+ \(UTC\): next \d{4}-\d\d-\d\d \d\d:\d\d:\d0\+00:00, "
                        r"\d\d:\d\d:\d0, \d\d:\d\d:\d0", shown["described"]), shown["described"]


def test_a_six_field_record_of_an_older_version_keeps_its_ticks(app):
    """Stored when six fields meant seconds last ("0 */5 * * * 30": second 30 of every
    fifth minute): read with the seconds moved first, the same ticks."""
    app.schedules.add("old", app.tasks["ping"].call(), cron="30 0 */5 * * *")
    record = orjson.loads(app.backend.kv_get("schedules", "old"))
    del record["format"]
    record["schedule"]["cron"] = "0 */5 * * * 30"
    app.backend.kv_put("schedules", "old", orjson.dumps(record))
    info = app.schedules["old"]
    assert info.schedule.cron == "30 0 */5 * * *"
    assert {t % 3600 for t in info.upcoming(1_800_000_000, 4)} == {30.0}


def test_a_broken_record_shows_in_every_listing_and_hides_nothing(app, tmp_path):
    app.schedules.add("pulse", app.tasks["ping"].call(), every=60)
    good = orjson.loads(app.backend.kv_get("schedules", "pulse"))
    app.backend.kv_put("schedules", "feb30", orjson.dumps(
        {**good, "schedule": {**good["schedule"], "name": "feb30", "every": None, "cron": "0 0 31 2 *"}}))
    reader = {"authorization": f"Bearer {auth.create(app.backend, 'reader')[0]}"}
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        listed = client.get("/v1/schedules", headers=reader)
        assert listed.status_code == 200, listed.text
        assert [s["name"] for s in listed.json()["schedules"]] == ["pulse"]
        (broken,) = listed.json()["broken"]
        assert broken["name"] == "feb30" and "never fires" in broken["problem"]
        console = client.get("/v1/periodic", headers=reader)
        assert console.status_code == 200 and console.json()["broken"] == [broken]
        one = client.get("/v1/schedules/feb30", headers=reader)
        assert one.status_code == 422 and "cannot be fired" in one.json()["error"]["message"]
    done = run_deferq("schedule", "list", "--url", app.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "feb30  BROKEN, not fired: " in done.stdout and "pulse  every 60s" in done.stdout
    header, row = (line for line in done.stdout.splitlines() if line.startswith(("name ", "pulse ")))
    assert [header.index(c) for c in ("timing", "task", "from", "next", "last")] == [
        row.index(c) for c in ("every 60s", "ping", "api", "20", "never fired")], "the columns line up"
    assert "Traceback" not in done.stderr
    fixed = run_deferq("schedule", "add", "feb30", "ping", "--cron", "0 0 28 2 *", "--url", app.url, cwd=tmp_path)
    assert fixed.returncode == 0 and "changed schedule feb30" in fixed.stdout, fixed.stderr
    assert [s.name for s in app.schedules.list()] == ["feb30", "pulse"]


def test_the_cli_refuses_what_can_never_fire_with_exit_2(tmp_path):
    url = f"sqlite:///{tmp_path}/c.db"
    for args, says in [(("feb30", "ping", "--cron", "0 0 31 2 *"), "never fires"),
                       (("tab\tname", "ping", "--every", "5"), "control characters"),
                       (("seven", "ping", "--cron", "* * * * * * *"), "has 7 fields")]:
        done = run_deferq("schedule", "add", *args, "--url", url, cwd=tmp_path)
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    store = deferq.App(url)
    assert store.backend.kv_list("schedules") == {}
    store.close()
