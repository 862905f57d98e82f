"""The routes the console reads and acts through (server/console_api.py), the reader
scope, and the pages and files /dashboard/ serves, in process (Starlette's test client)."""

from __future__ import annotations

import re
import time

import orjson
import pytest

import deferq
from deferq.net.policy import POLICY_ENV
from deferq.schedules.definition import make_schedule
from deferq.server import ServerConfig, create_app
from deferq.server.app import full_document as document
from deferq.server.console.routes import route_scopes
from deferq.server.http import auth
from deferq.worker import orders
from tests.support.alert_receivers import BANNER, banner_listener, free_port, webhook_inbox  # noqa: F401 - fixture
from tests.support.console_world import app as periodic_app
from tests.support.console_world import seed
from tests.support.server_helpers import TestClient

# Its tests share a module fixture: one xdist worker runs them all and builds it once.
pytestmark = pytest.mark.xdist_group("console_api")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('console')}/deferq.db"
    made = seed(url)
    app = deferq.App(url)
    app.periodic_jobs = periodic_app.periodic_jobs
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        yield client, made
    app.close()


def as_(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


# -- scopes ----------------------------------------------------------------------------------

CONSOLE_ROUTES = sorted(route_scopes().items())


@pytest.mark.parametrize(("route", "scope"), CONSOLE_ROUTES, ids=[f"{m} {p}" for (m, p), _ in CONSOLE_ROUTES])
def test_every_console_route_checks_its_scope(world, route, scope):
    client, made = world
    method, path = route
    url = path.replace("{job_id}", made.ids["dead"])

    def call(token: str | None) -> int:
        return client.request(method, url, json={}, headers=as_(token) if token else {}).status_code

    assert call(None) == 401
    assert call("dq_not-a-real-token") == 401
    if scope == "admin":
        assert call(made.reader) == 403 and call(made.producer) == 403
    elif scope == "producer":
        assert call(made.reader) == 403 and call(made.producer) not in (401, 403, 500)
    else:
        assert call(made.reader) not in (401, 403, 500)
        assert call(made.producer) not in (401, 403, 500)
    assert call(made.admin) not in (401, 403, 500)


def test_a_reader_reads_jobs_and_queues_and_changes_nothing(world):
    client, made = world
    reader = as_(made.reader)
    assert client.get(f"/v1/jobs/{made.ids['queued']}", headers=reader).status_code == 200
    dead = client.get("/v1/jobs?state=dead&queue=payments", headers=reader).json()["jobs"]
    assert [job["id"] for job in dead] == [made.ids["dead"]]
    assert "email" in client.get("/v1/queues", headers=reader).json()["queues"]
    refused = [
        client.post("/v1/jobs", json={"task": "x"}, headers=reader),
        client.delete(f"/v1/jobs/{made.ids['queued']}", headers=reader),
        client.post(f"/v1/dead/{made.ids['dead']}/retry", headers=reader),
        client.post("/v1/dead/retry", headers=reader),
        client.get("/v1/topics", headers=reader),
        client.get("/v1/dead", headers=reader),
        client.post("/v1/tokens", json={"scope": "reader"}, headers=reader),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert "needs a token with the admin scope; this token has the reader scope" in refused[2].text
    assert client.get(f"/v1/jobs/{made.ids['queued']}", headers=reader).json()["state"] == "queued"


def test_reader_tokens_are_made_over_the_api_and_allows_orders_the_scopes(world):
    client, made = world
    answer = client.post("/v1/tokens", json={"scope": "reader", "note": "wall screen"}, headers=as_(made.admin))
    assert answer.status_code == 201 and answer.json()["scope"] == "reader"
    whoami = client.get("/v1/whoami", headers=as_(answer.json()["token"])).json()
    assert whoami == {"auth": True, "scope": "reader"}
    assert [auth.allows(g, n) for g in auth.SCOPES for n in auth.SCOPES] == [
        True, False, False, True, True, False, True, True, True]
    assert not auth.allows("nobody", "reader")


def test_whoami_without_auth_is_admin(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as client:
        assert client.get("/v1/whoami").json() == {"auth": False, "scope": "admin"}
    app.close()


# -- search and leases ---------------------------------------------------------------------------


def search(client, made, **params):
    answer = client.get("/v1/search", params=params, headers=as_(made.reader))
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_search_filters_by_state_queue_task_and_id_or_key(world):
    client, made = world
    everything = search(client, made)
    # 7 of workflows, 6 of a chunk call
    assert everything["matched"] == 22 and everything["complete"] and everything["scanned"] == 22
    ids = [job["id"] for job in everything["jobs"]]
    assert ids == sorted(ids, reverse=True)  # newest first across states
    assert "shop.tasks.charge_card" in everything["tasks"]
    assert [j["id"] for j in search(client, made, state="dead", queue="payments")["jobs"]] == [made.ids["dead"]]
    assert search(client, made, queue="email")["matched"] == 6
    welcome = search(client, made, task="WELCOME", state="queued")
    assert welcome["matched"] == 3 and {j["task"] for j in welcome["jobs"]} == {"shop.tasks.send_welcome"}
    assert [j["key"] for j in search(client, made, q="welcome:1")["jobs"]] == ["welcome:1"]
    assert [j["id"] for j in search(client, made, q=made.ids["active"].lower())["jobs"]] == [made.ids["active"]]
    assert search(client, made, q="charge:1042", state="queued")["matched"] == 0  # the key's job is dead
    limited = search(client, made, limit=2)
    assert len(limited["jobs"]) == 2 and limited["matched"] == 22


def test_search_looks_at_a_window_but_finds_an_exact_id_or_key_however_old(world):
    client, made = world
    small = search(client, made, state="queued", window=1)
    assert small["scanned"] == 1 and not small["complete"] and small["window"] == 1
    oldest = made.ids["queued"]  # the first of three queued jobs: outside a window of one
    assert oldest not in [j["id"] for j in small["jobs"]]
    assert [j["id"] for j in search(client, made, state="queued", window=1, q=oldest)["jobs"]] == [oldest]
    assert search(client, made, state="queued", window=1, q="welcome:0")["matched"] == 1


@pytest.mark.parametrize("query", ["state=lost", "window=0", "limit=1001", "window=x", "sort=id"])
def test_search_refuses_what_it_cannot_do(world, query):
    client, made = world
    answer = client.get(f"/v1/search?{query}", headers=as_(made.reader))
    assert answer.status_code == 422, answer.text


def test_a_lease_names_its_worker_while_the_job_runs(world):
    client, made = world
    lease = client.get(f"/v1/jobs/{made.ids['active']}/lease", headers=as_(made.reader)).json()
    assert lease["state"] == "active" and lease["worker"].endswith(":4242:console-test")
    assert lease["lease_until"] > lease["now"] > time.time() - 60
    done = client.get(f"/v1/jobs/{made.ids['succeeded']}/lease", headers=as_(made.reader)).json()
    assert done["worker"] is None and done["lease_until"] is None
    assert client.get("/v1/jobs/06H000000000000000000000XX/lease", headers=as_(made.reader)).status_code == 404


def test_retry_batch_retries_the_dead_ones_named(tmp_path):
    url = f"sqlite:///{tmp_path}/deferq.db"
    made = seed(url)
    app = deferq.App(url)
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        ids = [made.ids["dead"], made.ids["queued"], "nope"]
        answer = client.post("/v1/dead/retry-batch", json={"ids": ids}, headers=as_(made.admin))
        assert answer.json() == {"retried": 1, "not_retried": [made.ids["queued"], "nope"]}
        assert app.get(made.ids["dead"]).state == "queued"
        for body in ({"ids": []}, {"ids": ["a"] * 1001}, {"ids": [1]}, {"ids": "a"}, {"ids": ["a"], "all": True}):
            assert client.post("/v1/dead/retry-batch", json=body, headers=as_(made.admin)).status_code == 422
    app.close()


# -- workers, schedules, the store -------------------------------------------------------------


def test_workers_and_masters_come_from_their_heartbeats(world):
    client, made = world
    report = client.get("/v1/workers", headers=as_(made.reader)).json()
    (worker,) = report["workers"]
    assert worker["pid"] == 4242 and worker["concurrency"] == 8 and worker["processed"] == 1289
    assert worker["master"] == "m-console" and worker["queues"] == ["email", "reports", "payments"]
    assert worker["jobs"][0]["id"] == made.ids["active"] and worker["jobs"][0]["running_for"] >= 12
    (master,) = report["masters"]
    assert master["url"] == "postgresql://deferq:***@db.internal/deferq"  # no password leaves the store
    assert master["heartbeat_age"] >= 0


def test_periodic_schedules_show_their_next_and_last_ticks(world):
    client, made = world
    report = client.get("/v1/periodic", headers=as_(made.reader)).json()
    by_name = {s["name"]: s for s in report["schedules"]}
    rates, cleanup = by_name["refresh-rates"], by_name["nightly-cleanup"]
    assert rates["cron"] == "*/15 * * * *" and rates["options"] == {"queue": "reports"}
    assert rates["source"] == "code" and rates["timing"] == "*/15 * * * * (UTC)" and not rates["paused"]
    assert report["now"] < rates["next"][0] < rates["next"][1] < rates["next"][4]
    assert rates["next"][1] - rates["next"][0] == 900
    assert rates["last_tick"] is not None and rates["last_tick"] % 900 == 0
    assert rates["last_job"]["state"] == "queued"
    assert cleanup["kwargs"] == {"days": 30} and cleanup["last_tick"] is None
    assert report["masters"] == 1 and report["leader"] is None  # nothing fires them in this world


def test_a_schedule_from_a_masters_config_is_listed_with_its_source(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")
    token, _ = auth.create(app.backend, "reader")
    app.schedules.declare([make_schedule("from-config", "cleanup", cron="0 3 * * *", tz="Europe/Berlin")],
                          "config")
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        (schedule,) = client.get("/v1/periodic", headers=as_(token)).json()["schedules"]
    assert schedule["name"] == "from-config" and schedule["source"] == "config" and len(schedule["next"]) == 5
    assert schedule["tz"] == "Europe/Berlin" and schedule["last_tick"] is None
    app.close()


def test_the_store_answers_with_its_kind_and_latency(world):
    client, made = world
    report = client.get("/v1/store", headers=as_(made.reader)).json()
    assert report["up"] and report["kind"] == "sqlite" and report["backend"] == "SQLiteBackend"
    assert len(report["pings_ms"]) == 3 and report["latency_ms"] >= 0 and report["error"] is None
    assert abs(report["clock_skew_ms"]) < 1000


def test_a_store_that_is_down_is_reported_not_refused():
    port = free_port()  # nothing listens there
    app = deferq.App(f"redis://:hunter2@127.0.0.1:{port}/0")
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as client:
        answer = client.get("/v1/store")
        assert client.get("/v1/queues").status_code == 503
    report = answer.json()
    assert answer.status_code == 200 and not report["up"] and report["latency_ms"] is None
    assert report["url"] == f"redis://:***@127.0.0.1:{port}/0" and "hunter2" not in answer.text
    assert report["error"].startswith("the store cannot be reached")
    app.close()


# -- trying topic settings ---------------------------------------------------------------------------


CONDITION = "{res.code}!=200 && {res.data.status}!=2 || {res.data.msg}=='failed'"


@pytest.mark.parametrize(("body", "retry", "reason"), [
    ({"condition": CONDITION, "answer": '{"code": 200}'}, False, None),
    ({"condition": CONDITION, "answer": '{"code": 500, "data": {"status": 1}}'}, True,
     f"retry condition is true: {CONDITION}"),
    ({"condition": CONDITION, "answer": '{"code": 200, "data": {"msg": "failed"}}'}, True, None),
    ({"answer": "  "}, True, "empty answer"),
    ({"condition": None, "answer": "ok"}, False, None),
    ({"answer": "ok", "status": 502}, True, "status 502 is not 2xx"),
])
def test_a_condition_is_tried_on_a_sample_answer_as_a_worker_would(world, body, retry, reason):
    client, made = world
    answer = client.post("/v1/conditions/evaluate", json=body, headers=as_(made.reader)).json()
    assert answer["retry"] is retry
    if reason is not None:
        assert answer["reason"] == reason


@pytest.mark.parametrize("body", [{"condition": "{res.code} !=", "answer": ""}, {"condition": "1"},
                                  {"answer": 1}, {"answer": "", "status": 99}, {"answer": "", "extra": 1}])
def test_a_bad_condition_or_sample_is_a_422_naming_it(world, body):
    client, made = world
    answer = client.post("/v1/conditions/evaluate", json=body, headers=as_(made.reader))
    assert answer.status_code == 422
    if "condition" in body and "answer" in body:
        assert re.search(r"condition: .* at position \d+", answer.json()["error"]["message"])


def test_a_backoff_preview_gives_each_wait_and_the_running_total(world):
    client, made = world

    def preview(backoff, attempts=5):
        answer = client.post("/v1/backoff/preview", json={"backoff": backoff, "attempts": attempts},
                             headers=as_(made.reader))
        assert answer.status_code == 200, answer.text
        return answer.json()["retries"]

    linear = preview({"kind": "linear"})
    assert [r["wait"] for r in linear] == [60, 180, 300, 420] and [r["attempt"] for r in linear] == [2, 3, 4, 5]
    assert [r["after"] for r in linear] == [60, 240, 540, 960]
    jittered = preview({"kind": "exponential", "first": 2, "base": 3})
    assert [(r["wait_min"], r["wait"]) for r in jittered] == [(1, 2), (3, 6), (9, 18), (27, 54)]
    assert preview({"kind": "schedule", "seconds": [5, 10]}, 4) == [
        {"attempt": 2, "wait": 5, "wait_min": 5, "after": 5},
        {"attempt": 3, "wait": 10, "wait_min": 10, "after": 15},
        {"attempt": 4, "wait": 10, "wait_min": 10, "after": 25}]
    assert preview({"kind": "fixed", "seconds": 5}, 1) == []
    for bad in ({"backoff": {"kind": "cubic"}}, {"attempts": 3}, {"backoff": {"kind": "fixed", "secs": 1}}):
        assert client.post("/v1/backoff/preview", json=bad, headers=as_(made.reader)).status_code == 422


# -- a test alert ---------------------------------------------------------------------------------


def test_a_test_alert_without_targets_says_so(world):
    client, made = world
    answer = client.post("/v1/settings/alerts/test", headers=as_(made.admin)).json()
    assert answer == {"sent": False, "targets": [],
                      "message": "no alert target is set: save an e-mail or webhook target first"}


def test_a_test_alert_reaches_the_webhook_or_says_why_not(tmp_path, webhook_inbox):  # noqa: F811
    inbox, hook = webhook_inbox
    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")
    admin = as_(auth.create(app.backend, "admin")[0])
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        assert client.put("/v1/settings/alerts", json={"webhook": hook}, headers=admin).status_code == 200
        answer = client.post("/v1/settings/alerts/test", headers=admin).json()
        assert answer["sent"] and answer["targets"] == [
            {"target": "webhook", "delivered": True, "status": "delivered", "error": None}
        ]
        alert = inbox.wait_for(lambda a: a["kind"] == "test")
        assert alert["subject"] == "test alert from the deferq console"
        closed = f"http://127.0.0.1:{free_port()}/alerts"
        client.put("/v1/settings/alerts", json={"webhook": closed}, headers=admin)
        failed = client.post("/v1/settings/alerts/test", headers=admin).json()
    assert not failed["sent"] and failed["targets"][0]["delivered"] is False
    assert (
        failed["targets"][0]["status"] == failed["targets"][0]["error"] == "connection failed: Connection refused"
    )
    app.close()


def test_a_test_alert_reports_a_status_never_the_other_sides_bytes(tmp_path, monkeypatch, banner_listener):  # noqa: F811
    """An admin points the alerts at a loopback service that speaks first (SSH, Redis):
    under the default policy nothing connects; allowed, the answer still holds only a
    status, not the line that service wrote."""
    port, accepted = banner_listener
    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")
    admin = as_(auth.create(app.backend, "admin")[0])
    email = {"smtp": f"127.0.0.1:{port}", "from": "a@example.org", "to": ["b@example.org"]}
    settings = {"webhook": f"http://127.0.0.1:{port}/", "email": email}
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        assert client.put("/v1/settings/alerts", json=settings, headers=admin).status_code == 200
        monkeypatch.setenv(POLICY_ENV, "")  # the default policy
        refused = client.post("/v1/settings/alerts/test", headers=admin)
        assert accepted == []
        monkeypatch.setenv(POLICY_ENV, '{"allow_networks": ["loopback"]}')
        failed = client.post("/v1/settings/alerts/test", headers=admin)
    app.close()
    statuses = {t["target"]: t["status"] for t in refused.json()["targets"]}
    said = ("refused by the network policy: 127.0.0.1 is a loopback address (allow it with "
            "allow_networks in DEFERQ_CALLBACK_POLICY)")
    assert statuses == {"e-mail": said, "webhook": said}
    statuses = {t["target"]: t["status"] for t in failed.json()["targets"]}
    assert statuses["webhook"] == "connection failed: the other side does not answer HTTP"
    assert statuses["e-mail"].startswith("connection failed: the other side"), statuses
    assert len(accepted) == 2
    for answer in (refused, failed):
        assert BANNER.decode().strip() not in answer.text and "secret-banner" not in answer.text


# -- the pages and files ------------------------------------------------------------------------------


def test_every_console_url_gets_the_page_with_a_strict_csp(world):
    client, _ = world
    assert client.get("/", follow_redirects=False).headers["location"] == "/dashboard/"
    for path in ("/dashboard", "/dashboard/", "/dashboard/jobs/06H0", "/dashboard/topics/new", "/dashboard/nope"):
        page = client.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp and "default-src 'none'" in csp
        assert "require-trusted-types-for 'script'" in csp and "unsafe" not in csp
        assert page.headers["x-content-type-options"] == "nosniff"
    html = client.get("/dashboard/").text
    assert "<style" not in html and " style=" not in html and " on" not in re.sub(r"\s(content|name)=", "", html)
    assert all(re.search(r'src="[^"]+"', tag) for tag in re.findall(r"<script[^>]*>", html))  # no inline script


def test_static_files_ship_in_the_package_with_the_chart_library_and_its_licence(world):
    client, _ = world
    script = client.get("/dashboard/static/console/main.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert script.headers["x-content-type-options"] == "nosniff"
    assert client.get("/dashboard/static/vendor/uPlot.iife.min.js").text.startswith(
        "/*! https://github.com/leeoniya/uPlot"
    )
    assert "MIT License" in client.get("/dashboard/static/vendor/uPlot.LICENSE.txt").text
    assert client.get("/dashboard/static/console/nope.js").status_code == 404
    for sneaky in (
        "/dashboard/static/../api.py",
        "/dashboard/static/%2e%2e/api.py",
        "/dashboard/static/..%2fapi.py",
    ):
        assert "import" not in client.get(sneaky).text  # the page or a 404, never a file outside static/


def test_no_script_sets_html_from_a_string():
    """The console builds every element with createElement and sets text as text."""
    from importlib import resources

    static = resources.files("deferq.server.console").joinpath("static/console")
    sources = [p for p in static.iterdir() if p.name.endswith(".js")]
    sources += [p for p in static.joinpath("views").iterdir() if p.name.endswith(".js")]
    assert len(sources) > 10
    for source in sources:
        text = source.read_text("utf-8")
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in text, f"{source.name} uses {sink}"


def test_the_openapi_document_has_the_console_routes(world):
    paths = document()["paths"]
    for method, path in route_scopes():
        operation = paths[path][method.lower()]
        assert operation["description"] == f"Needs a token with the {route_scopes()[(method, path)]} scope."
    assert orjson.dumps(document())  # still one JSON document


def test_a_job_shows_its_workflow(world):
    """GET /v1/jobs/{id}: parents and children with their states (a finished step still
    names the step after it), and the batch a job is a member or callback of."""
    client, made = world
    ids = made.ids

    def job(name):
        return client.get(f"/v1/jobs/{ids[name]}", headers=as_(made.reader)).json()

    first, middle, alone = job("chain_first"), job("chain_middle"), job("queued")
    link = {"id": ids["chain_first"], "state": "succeeded", "task": "shop.tasks.fetch_order", "queue": "orders"}
    assert middle["after"] == [ids["chain_first"]] and middle["parents"] == [link]
    assert middle["waiting"] == [ids["chain_last"]] and middle["children"][0]["state"] == "blocked"
    assert first["waiting"] == [] and [c["id"] for c in first["children"]] == [ids["chain_middle"]]
    assert alone["parents"] == alone["children"] == [] and alone["batch"] is None
    member, callback = job("batch_member"), job("batch_callback")
    assert member["batch"] == {"id": ids["batch"], "role": "member", "total": 3, "pending": 1, "succeeded": 1,
                               "dead": 1, "cancelled": 0, "state": "running",
                               "callbacks": {"on_complete": ids["batch_callback"]}}
    assert [c["id"] for c in member["children"]] == [ids["batch_callback"]]
    assert callback["batch"]["role"] == "on_complete" and len(callback["parents"]) == 3
    assert sorted(p["state"] for p in callback["parents"]) == ["dead", "queued", "succeeded"]


# -- acting on running, scheduled and chosen jobs -------------------------------------------


@pytest.fixture
def fresh(tmp_path):
    """A seeded world of its own (these tests change it)."""
    url = f"sqlite:///{tmp_path}/deferq.db"
    made = seed(url)
    app = deferq.App(url)
    with TestClient(create_app(ServerConfig(error_log="off"), app)) as client:
        yield client, made, app
    app.close()


def test_a_cancel_from_the_console_records_who_when_and_why(fresh):
    client, made, app = fresh
    running, blocked = made.ids["active"], made.ids["chain_last"]
    assert client.delete(f"/v1/jobs/{running}?via=console", headers=as_(made.reader)).status_code == 403
    stop = client.delete(f"/v1/jobs/{running}?via=console&reason=stuck on a dead printer",
                         headers=as_(made.admin))
    assert stop.status_code == 202 and stop.json()["cancel_requested"] is True
    remark = app.get(running).remark
    assert re.fullmatch(r"Cancelled \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC by token [0-9a-f]{12} \(console tests\) "
                        r"from the console: stuck on a dead printer", remark)
    gone = client.delete(f"/v1/jobs/{blocked}?via=console", headers=as_(made.producer))
    assert gone.json() == {"id": blocked, "state": "cancelled"}
    assert app.get(blocked).remark.endswith("(shop backend) from the console")
    old = made.ids["dead"]  # finished: refused, and its remark left alone
    assert client.delete(f"/v1/jobs/{old}?reason=x", headers=as_(made.admin)).status_code == 409
    assert app.get(old).remark == "order 1042: the customer asked for a retry tonight"
    for bad in ("via=The Console", "reason=" + "x" * 301, "who=me"):
        assert client.delete(f"/v1/jobs/{made.ids['queued']}?{bad}", headers=as_(made.admin)).status_code == 422


def test_run_now_makes_a_scheduled_or_retrying_job_due(fresh):
    client, made, app = fresh
    for name in ("scheduled", "retrying"):
        url = f"/v1/jobs/{made.ids[name]}/run-now"
        assert client.post(url, headers=as_(made.reader)).status_code == 403
        assert client.post(url, headers=as_(made.producer)).json() == {"id": made.ids[name], "state": "queued"}
        assert app.get(made.ids[name]).state == "queued"
        assert client.post(url, headers=as_(made.producer)).status_code == 409  # due already
    assert app.get(made.ids["retrying"]).attempts == 1
    assert client.post("/v1/jobs/06H000000000000000000000XX/run-now", headers=as_(made.admin)).status_code == 404


def test_retrying_is_a_filter_of_its_own(world):
    client, made = world
    reader = as_(made.reader)
    retrying = client.get("/v1/jobs?state=retrying", headers=reader).json()
    newest_first = [made.ids["chunk_retrying"], made.ids["retrying"]]  # a chunk call's job waits for its retry too
    assert [job["id"] for job in retrying["jobs"]] == newest_first and retrying["cursor"] is None
    scheduled = {job["id"] for job in client.get("/v1/jobs?state=scheduled", headers=reader).json()["jobs"]}
    assert {made.ids["retrying"], made.ids["scheduled"]} <= scheduled
    assert client.get("/v1/jobs?state=retrying&queue=email", headers=reader).json()["jobs"] == []
    one_a_page = client.get("/v1/jobs?state=retrying&limit=1", headers=reader).json()
    assert [job["id"] for job in one_a_page["jobs"]] == newest_first[:1]
    found = client.get(f"/v1/jobs?state=retrying&q={made.ids['scheduled']}", headers=reader).json()["jobs"]
    assert found == []  # found by id, but it never failed


def test_cancel_and_delete_batches_act_on_the_jobs_they_may(fresh):
    client, made, app = fresh
    ids = [made.ids["queued"], made.ids["active"], made.ids["succeeded"], "nope"]
    assert client.post("/v1/jobs/cancel-batch", json={"ids": ids}, headers=as_(made.reader)).status_code == 403
    answer = client.post("/v1/jobs/cancel-batch", json={"ids": ids, "reason": "bad deploy"},
                         headers=as_(made.producer)).json()
    assert answer == {"cancelled": 1, "stopping": 1, "not_cancelled": [made.ids["succeeded"], "nope"]}
    assert app.get(made.ids["queued"]).remark.endswith("from the console: bad deploy")
    doomed = [made.ids["succeeded"], made.ids["dead"], made.ids["scheduled"]]
    refused = client.post("/v1/jobs/delete-batch", json={"ids": doomed}, headers=as_(made.producer))
    assert refused.status_code == 403
    deleted = client.post("/v1/jobs/delete-batch", json={"ids": doomed}, headers=as_(made.admin)).json()
    assert deleted == {"deleted": 2, "not_deleted": [made.ids["scheduled"]]}
    assert app.get(made.ids["succeeded"]) is None and app.get(made.ids["scheduled"]) is not None
    for body in ({"ids": []}, {"ids": ["a"] * 1001}, {"ids": ["a"], "reason": "x" * 301}, {"ids": ["a"], "x": 1}):
        assert client.post("/v1/jobs/cancel-batch", json=body, headers=as_(made.admin)).status_code == 422


def test_a_worker_is_ordered_quiet_or_to_stop_through_the_store(fresh):
    client, made, app = fresh
    name = next(w["worker"] for w in client.get("/v1/workers", headers=as_(made.reader)).json()["workers"])
    assert client.post(f"/v1/workers/{name}/quiet", headers=as_(made.producer)).status_code == 403
    given = client.post(f"/v1/workers/{name}/quiet", headers=as_(made.admin)).json()
    token_id = auth.record_of(app.backend, made.admin)["id"]
    assert given["order"] == "quiet" and given["by"] == f"token {token_id} (console tests)"
    assert orders.read(app.backend, name)["order"] == "quiet"
    assert client.post(f"/v1/workers/{name}/stop", headers=as_(made.admin)).json()["order"] == "stop"  # replaces
    assert client.post(f"/v1/workers/{name}x/stop", headers=as_(made.admin)).status_code == 404
    master = client.post("/v1/masters/m-console/quiet", headers=as_(made.admin)).json()
    left = orders.read(app.backend, orders.master_key("m-console"))
    assert master["order"] == "quiet" and left is not None and left["by"] == given["by"]
    assert client.post("/v1/masters/m-other/stop", headers=as_(made.admin)).status_code == 404
