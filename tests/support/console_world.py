"""A small world for the console's tests and screenshots: a store with jobs in every
state in a few queues, a chunk task's call, a worker's and a master's heartbeat, a topic, tokens, alert
settings and a periodic schedule (`deferq serve --app tests.support.console_world:app` lists it),
plus a headless Debian Chromium driven by Playwright."""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import orjson

import deferq
from deferq.backends.base import Outcome
from deferq.schedules.store import ScheduleInfo
from deferq.server.http import auth
from deferq.server.topics import topic as topics
from tests.conftest import need_service

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
PRIORITIES = (0, 1, 2)
TRACEBACK = """Traceback (most recent call last):
  File "/srv/shop/tasks.py", line 41, in charge_card
    receipt = gateway.charge(order.total, order.card_token)
  File "/srv/shop/gateway.py", line 88, in charge
    raise GatewayError(f"card declined: {answer['reason']}")
shop.gateway.GatewayError: card declined: insufficient_funds
"""

# The App the server loads with --app: its periodic schedules show on /dashboard/periodic.
app = deferq.App(os.environ.get("DEFERQ_URL", "memory://"))


@app.periodic("*/15 * * * *", name="refresh-rates", queue="reports")
def refresh_rates() -> None:
    """Fetch exchange rates (for the tests: never runs)."""


@app.periodic("0 3 * * *", name="nightly-cleanup", kwargs={"days": 30})
def cleanup(days: int = 30) -> None:
    """Purge old rows (for the tests: never runs)."""


@dataclass
class World:
    url: str
    admin: str
    reader: str
    producer: str
    ids: dict[str, str]  # a job id per state, and a few more by name


def _settle(backend: Any, queue: str, kind: str, worker: str, progress: tuple[float, str] | None = None,
            **outcome: Any) -> str:
    (job,) = backend.reserve([queue], 1, worker, 300.0, PRIORITIES)
    if progress is not None:  # what the task reported while it ran
        backend.record_progress([job.evolve(progress=progress[0], progress_message=progress[1])])
    if kind != "active":
        assert backend.settle([Outcome(job, kind, **outcome)]) == [True]
    return str(job.id)


WORKER = f"{socket.gethostname()}:4242:console-test"
# What the worker's code declares (its heartbeat carries it to the Limits page).
DECLARED_LIMITS = {
    "shop.tasks.charge_card": {"rate": "100/m", "rate_key": "customer:{customer_id}", "concurrency": None,
                               "concurrency_key": None, "queue": "payments"},
    "shop.tasks.render_invoice": {"rate": None, "rate_key": None, "concurrency": 2, "concurrency_key": None,
                                  "queue": "reports"},
}


def seed_attempts(backend: Any, job_id: str) -> None:
    """The dead job's three attempts, as the workers that ran them note them (observe/attempts.py)."""
    from deferq.observe import attempts

    now = time.time()
    errors = ["shop.gateway.GatewayError: the gateway timed out", "shop.gateway.GatewayError: 502 Bad Gateway",
              TRACEBACK]
    kept = [{"attempt": n + 1, "worker": WORKER, "started_at": now - 3600 + 1200 * n, "seconds": 30.0 + n,
             "outcome": "dead" if n == 2 else "retry", "error": error} for n, error in enumerate(errors)]
    backend.kv_put(attempts.NAMESPACE, job_id, orjson.dumps(kept), attempts.KEEP_SECONDS)


def seed_limits(world_app: deferq.App, active: str) -> None:
    """Limits set at run time on a queue, a task and a key, a pause, and a slot held."""
    world_app.limits.set("queue:email", rate="20/s", concurrency=4)
    world_app.limits.set("shop.tasks.charge_card", rate="50/m")
    world_app.limits.set("customer:7", rate="1/s", concurrency=1)
    world_app.limits.pause("customer:7", 900)
    world_app.backend.slot_take("shop.tasks.render_invoice", 2, f"{active}:1")


def publish_heartbeats(backend: Any, running: str) -> None:
    """A worker running job `running` and its master, as they publish themselves."""
    now = time.time()
    status = {"name": WORKER, "pid": 4242, "host": socket.gethostname(),
              "queues": ["email", "reports", "payments"], "concurrency": 8, "processed": 1289,
              "running": [{"id": running, "task": "shop.tasks.render_invoice",
                           "started": time.monotonic() - 12.5}],
              "seen": now, "monotonic": time.monotonic(), "limits": DECLARED_LIMITS}
    backend.kv_put("workers", WORKER, orjson.dumps(status), 600)
    master = {"id": "m-console", "pid": 4240, "host": socket.gethostname(), "started": now - 7200, "seen": now,
              "url": "postgresql://deferq:s3cret@db.internal/deferq", "config": "/etc/deferq.toml",
              "store_up": True, "pools": {"default": {"queues": ["email", "reports"], "target": 2, "min": 1,
              "max": 4, "concurrency": 8, "children": [{"index": 0, "pid": 4242, "worker": WORKER,
              "generation": 1, "started": now - 3600, "state": "running"}]}}}
    backend.kv_put("masters", "m-console", orjson.dumps(master), 600)


# A day of per-minute history (deferq.history), the same every run: (queue, task, per
# minute enqueued at the day's peak, share that fails, typical wait bucket, run bucket).
HISTORY = [("email", "shop.tasks.send_welcome", 40, 0.02, 12, 19),
           ("payments", "shop.tasks.charge_card", 12, 0.15, 16, 21)]
HISTORY_MINUTES = 1440


def seed_history(backend: Any) -> dict[str, int]:
    """Counts for each of the last HISTORY_MINUTES minutes (none for the current one):
    a daily wave with a burst of failures an hour ago. Returns the totals per queue."""
    last = int(backend.now() // 60) - 1
    rows, totals = [], {}
    for queue, task, peak, failing, wait, run in HISTORY:
        for age in range(HISTORY_MINUTES):
            minute = last - age
            wave = 0.55 + 0.45 * math.sin(minute / 180)
            n = max(1, round(peak * wave))
            failed = round(n * (failing * 4 if 50 <= age <= 65 else failing))
            cell = {"enqueued": n, "succeeded": n - failed, "retried": failed, "failed": failed,
                    "dead": failed // 3, f"w{wait + (age % 3)}": n - 1, f"w{wait + 6}": 1,
                    f"r{run}": n - failed, f"r{run + 4}": failed}
            rows += [(minute, queue, task, field, amount) for field, amount in cell.items() if amount]
            if age < 60:
                totals[queue] = totals.get(queue, 0) + n
    backend.history_add(rows, HISTORY_MINUTES)
    return totals


def seed_workflows(world_app: deferq.App) -> dict[str, str]:
    """A chain of three whose first step succeeded (the second queued, the third blocked),
    and a batch of three (one succeeded, one dead, one queued) with an on_complete
    callback, in queues of their own."""
    from deferq.flows.chains import chain

    def task(name: str, queue: str) -> Any:
        return world_app.task(name=name, queue=queue)(lambda *args, **kwargs: None)

    steps_of = ("fetch_order", "render_pdf", "mail_pdf")
    fetch, render, mail = (task(f"shop.tasks.{name}", "orders") for name in steps_of)
    steps = chain(fetch.call(1050), render.call(), mail.call()).enqueue(world_app).ids
    backend = world_app.backend
    assert _settle(backend, "orders", "succeeded", WORKER, result={"order": 1050}) == steps[0]
    item = task("shop.tasks.import_row", "imports")
    with world_app.batch(on_complete=task("shop.tasks.import_report", "imports").call()) as batch:
        members = [batch.enqueue(item.call(row)).id for row in range(3)]
    _settle(backend, "imports", "succeeded", WORKER)
    _settle(backend, "imports", "dead", WORKER, error="ValueError: row 2 has no price")
    callback = world_app.get_batch(batch.id).callbacks["on_complete"]
    return {"chain_first": steps[0], "chain_middle": steps[1], "chain_last": steps[2], "batch": batch.id,
            "batch_member": members[0], "batch_callback": callback}


def seed_chunk_call(world_app: deferq.App) -> dict[str, str]:
    """One call of a chunk task over six products, in a queue of its own: five succeed,
    the third is refused and waits for its retry (it still names the call)."""
    from deferq import testing

    @world_app.task(name="shop.tasks.index_products", queue="search", chunk=deferq.Chunk(size=10, wait=0),
                    backoff=lambda attempt: 3600.0)
    def index_products(skus: list[str]) -> None:
        raise deferq.ChunkFailed({2: "the search engine refused SKU-1003: price missing"})

    members = world_app.enqueue_many([index_products.call(f"SKU-{1001 + n}") for n in range(6)])
    testing.drain(world_app, ["search"])
    return {"chunk_member": members[0].id, "chunk_retrying": members[2].id}


def seed(url: str) -> World:
    """Jobs in every state (each state's queue chosen so the views have something to
    show), a worker and a master that publish heartbeats, a topic and tokens."""
    world_app = deferq.App(url)
    backend = world_app.backend
    ids: dict[str, str] = {}
    # Leased jobs first, each alone in its queue when it is reserved.
    world_app.enqueue("shop.tasks.charge_card", [1042], {"amount": 59.9, "currency": "EUR"}, queue="payments",
                      max_attempts=3, key="charge:1042",
                      remark="order 1042: the customer asked for a retry tonight")
    ids["dead"] = _settle(backend, "payments", "dead", WORKER, error=TRACEBACK)
    seed_attempts(backend, ids["dead"])
    world_app.enqueue("shop.tasks.charge_card", [1044], {"amount": 12.5, "currency": "EUR"}, queue="payments",
                      max_attempts=5, tags=["vip", "eu"])
    ids["retrying"] = _settle(backend, "payments", "retry", WORKER, delay=3600,
                              error="shop.gateway.GatewayError: the gateway timed out")
    world_app.enqueue("shop.tasks.send_receipt", [1041], queue="email")
    ids["succeeded"] = _settle(backend, "email", "succeeded", WORKER, progress=(1.0, "sent to 1 of 1"),
                               result={"message_id": "<r-1041@shop>"})
    world_app.enqueue("shop.tasks.render_invoice", [1043], {"format": "pdf"}, queue="reports", timeout=120)
    (running,) = backend.reserve(["reports"], 1, WORKER, 300.0, PRIORITIES)
    backend.record_progress([running.evolve(progress=0.42, progress_message="page 21 of 50")])
    ids["active"] = running.id
    # Then waiting ones.
    for n in range(3):
        job = world_app.enqueue("shop.tasks.send_welcome", [f"user{n}@example.com"], {"name": f"User {n}"},
                                queue="email", key=f"welcome:{n}")
        ids.setdefault("queued", job.id)
    ids["scheduled"] = world_app.enqueue("shop.tasks.remind_expiry", [77], queue="email", delay=3 * 86400).id
    ids["cancelled"] = world_app.enqueue("shop.tasks.send_welcome", ["gone@example.com"], queue="email").id
    assert backend.cancel(ids["cancelled"])
    ids.update(seed_workflows(world_app))
    ids.update(seed_chunk_call(world_app))
    publish_heartbeats(backend, ids["active"])
    seed_limits(world_app, ids["active"])
    seed_history(backend)
    now = time.time()
    tick = (now // 900) * 900  # the last tick of refresh-rates, fired (a stand-in job)
    for schedule in app.periodic_jobs:  # as a process of the App declares them at start
        backend.kv_put("schedules", schedule.name, ScheduleInfo(schedule, False, "code", now - 3600).record())
    backend.kv_put("schedule-runs", "refresh-rates",
                   orjson.dumps({"tick": tick, "done": True, "job": ids["queued"], "fired": tick}))
    topic = topics.Topic(name="order-paid", url="https://shop.example/hooks/paid", max_attempts=5,
                         retry_condition="{res.code}!=200 && {res.data.status}!=2",
                         headers={"X-Team": "billing"}, signing_secret="whsec_console_test_secret_0123",
                         updated_at=now - 600)
    topics.save(backend, topic)
    admin, _ = auth.create(backend, "admin", "console tests")
    reader, _ = auth.create(backend, "reader", "on-call dashboard")
    producer, _ = auth.create(backend, "producer", "shop backend")
    world_app.close()
    return World(url, admin, reader, producer, ids)


def served_worlds(name: str, timeout_ms: int) -> tuple[Any, Any]:
    """The fixtures a console action module shares (assign both at its top):
    `served`, param sqlite or redis, is the world seeded on a fresh store of that kind,
    `deferq serve` on it, Chromium and an App on the store. Each kind's world is built
    when a test first asks for it and kept until the module ends, and one Chromium
    serves both: pytest-xdist runs a module's tests in its own order, so a module
    fixture with the kinds as params could be built again at every switch."""
    import pytest

    @pytest.fixture(scope="module")
    def worlds(tmp_path_factory: Any) -> Iterator[Callable[[str], tuple[World, str, Any, deferq.App]]]:
        with _worlds(tmp_path_factory.mktemp(name), timeout_ms) as world:
            yield world

    @pytest.fixture(params=["sqlite", "redis"])
    def served(request: Any, worlds: Callable[[str], tuple[World, str, Any, deferq.App]]) -> Any:
        return worlds(request.param)

    return worlds, served


@contextmanager
def _worlds(folder: Any, timeout_ms: int) -> Iterator[Callable[[str], tuple[World, str, Any, deferq.App]]]:
    from playwright.sync_api import expect

    from tests.support.server_helpers import running_server

    built: dict[str, tuple[World, str, Any, deferq.App]] = {}
    with ExitStack() as stack:
        browser = None

        def world(kind: str) -> tuple[World, str, Any, deferq.App]:
            nonlocal browser
            if kind not in built:
                url = stack.enter_context(_store(kind, folder))
                seeded = seed(url)
                app = deferq.App(url)
                stack.callback(app.close)
                base = stack.enter_context(running_server(url))
                if browser is None:
                    browser = stack.enter_context(chromium())
                    expect.set_options(timeout=timeout_ms)
                built[kind] = (seeded, base, browser, app)
            return built[kind]

        yield world


@contextmanager
def _store(kind: str, folder: Any) -> Iterator[str]:
    """A fresh store's URL: an SQLite file in `folder`, or the shared Redis under a prefix
    of its own, deleted after."""
    if kind == "sqlite":
        yield f"sqlite:///{folder}/deferq.db"
        return
    from tests.support.stores.redis import delete_prefix, shared_answers, shared_url, unique_prefix

    if not shared_answers():
        need_service("Redis", "the shared Redis does not answer")
    prefix = unique_prefix()
    try:
        yield shared_url(prefix=prefix)
    finally:
        delete_prefix(prefix)


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium (never a downloaded browser), headless, through Playwright."""
    if not os.path.exists(CHROMIUM):
        need_service("Chromium", f"{CHROMIUM} is missing (scripts/install-browser.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def signed_in(browser: Any, base: str, token: str, width: int = 1280, height: int = 900,
              dark: bool = False) -> Any:
    """A page whose localStorage already holds `token`; every console error fails the test."""
    context = browser.new_context(viewport={"width": width, "height": height},
                                  color_scheme="dark" if dark else "light")
    context.add_init_script(f"localStorage.setItem('deferq-token', {orjson.dumps(token).decode()})")
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.on("console", lambda msg: page.errors.append(msg.text) if msg.type == "error" else None)
    return page
