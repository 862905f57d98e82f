"""Limits set, changed and cleared at run time, and `deferq.Backoff` (limits/runtime.py),
on every store: kept in the store, heard by every worker within a second."""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deferq
from deferq.job import JobState
from deferq.server import ServerConfig, create_app
from deferq.values import POSITIVE_RATE, Rate
from tests.conftest import STORES
from tests.contract.test_rate_limits import most_in_any_window
from tests.contract.test_worker import start_worker, stop_worker, wait_for_state
from tests.support.server_helpers import TestClient, wait_until

# slow: limits changed under running workers, each held over seconds of real time (~20 s on two stores)
pytestmark = pytest.mark.slow

stores = pytest.mark.parametrize("store_url", STORES, indirect=True)
# Workers hear of limits through the store's kv records, kept by every store (the first
# test); the variants of a store (Redis Cluster and shards, MySQL's other claim) differ
# in their claims, not there, so the tests with running workers leave them out.
KINDS = ["memory", "sqlite", "redis", "postgres", "mysql"]
kinds = pytest.mark.parametrize("store_url", KINDS, indirect=True)


@stores
def test_limits_are_set_listed_paused_and_cleared_in_the_store(app):
    assert app.limits.list() == {}
    assert app.limits.set("send_sms", rate="50/s") == {"rate": "50/s", "concurrency": None}
    app.limits.set("customer:7", rate="1/m", concurrency=2)
    app.limits.pause("customer:7", 30)
    listed = app.limits.list()
    assert listed["send_sms"] == {"rate": "50/s", "concurrency": None, "paused_for": None}
    assert listed["customer:7"]["concurrency"] == 2 and 28 < listed["customer:7"]["paused_for"] <= 30
    app.limits.set("send_sms", concurrency=4)  # a new value replaces the old one whole
    assert app.limits.get("send_sms") == {"rate": None, "concurrency": 4, "paused_for": None}
    assert app.limits.resume("customer:7") and not app.limits.resume("customer:7")  # the pause alone ends
    assert app.limits.get("customer:7") == {"rate": "1/m", "concurrency": 2, "paused_for": None}
    assert app.limits.clear("customer:7") and not app.limits.clear("customer:7")
    assert app.limits.clear("send_sms") and app.limits.list() == {}


def test_a_wrong_limit_is_refused_in_one_sentence():
    app = deferq.App("memory://")
    for call, message in [
        (lambda: app.limits.set("t"), "needs a rate"),
        (lambda: app.limits.set("t", rate="lots"), 'rate must look like "100/m"'),
        (lambda: app.limits.set("t", concurrency=0), "concurrency must be a whole number"),
        (lambda: app.limits.set("", rate="1/s"), "named by a task, a limit key or queue:<queue>"),
        (lambda: app.limits.pause("t", -1), "a pause lasts more than 0"),
        (lambda: app.limits.set("queue:", rate="1/s"), "names its queue"),
    ]:
        with pytest.raises(deferq.ConfigError, match=message):
            call()


def test_backoff_reads_retry_after_as_seconds_or_a_date():
    assert deferq.Backoff(12).delay == 12
    assert deferq.Backoff(retry_after="120").delay == 120
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=90), usegmt=True)
    assert 85 < deferq.Backoff(retry_after=when).delay <= 90
    assert deferq.Backoff(7, retry_after="soon").delay == 7  # unreadable: the seconds given
    assert isinstance(deferq.Backoff(1), deferq.Snooze)


def lower_over_http(app: deferq.App, name: str, rate: str) -> None:
    """PUT /v1/limits/NAME on a server of the store (in this process, as a client sees it)."""
    server = create_app(ServerConfig(auth=False, error_log="off"), app)
    answer = TestClient(server).put(f"/v1/limits/{name}", json={"rate": rate})
    assert answer.status_code == 200 and answer.json()["rate"] == rate, answer.text


@kinds
@pytest.mark.parametrize("through", ["python", "http"])
def test_a_rate_lowered_while_workers_run_holds_within_a_second(app, through):
    started: list[float] = []
    lock = threading.Lock()

    @app.task(rate="10/s")
    def send(n: int) -> None:
        with lock:
            started.append(time.time())

    jobs = [send.enqueue(n) for n in range(16)]  # 1.6 s of turns at 10/s: half run after the change
    worker, thread = start_worker(app, concurrency=8)
    try:
        wait_until(lambda: len(started) >= 2, what="the first jobs run at 10/s")
        changed = time.time()
        if through == "http":
            lower_over_http(app, "send", "4/s")
        else:
            app.limits.set("send", rate="4/s")
        for job in jobs:
            wait_for_state(app, job.id, JobState.SUCCEEDED, timeout=30)
    finally:
        stop_worker(worker, thread)
    later = [t for t in started if t >= changed + 1.0]
    assert len(later) >= 3 and most_in_any_window(later, 1.0) <= 4 + 1
    assert {app.get(job.id).attempts for job in jobs} == {1}


@stores
def test_a_limit_set_on_a_task_without_one_and_a_key_limit_winning(app):
    started: dict[str, list[float]] = {"a": [], "b": []}

    @app.task(concurrency=8, concurrency_key="c:{customer}")
    def sync(customer: str) -> None:
        started[customer].append(time.time())

    app.limits.set("sync", rate="1/m")  # the task (declared without a rate): one run a minute
    app.limits.set("c:b", rate="50/s")  # but the key c:b has a rate of its own
    a = [sync.enqueue("a") for _ in range(2)]
    b = [sync.enqueue("b") for _ in range(3)]
    worker, thread = start_worker(app, concurrency=4)
    try:
        for job in b:
            wait_for_state(app, job.id, JobState.SUCCEEDED)
        wait_until(lambda: sorted(app.get(j.id).state for j in a) == [JobState.SCHEDULED, JobState.SUCCEEDED],
                   what="one of a's jobs run, the other waiting a minute for its turn")
    finally:
        stop_worker(worker, thread)
    assert len(started["a"]) == 1


def worker_apps(app, store_url, count):
    """Apps of their own on the same store (each with its own copy of the limits);
    the memory store lives in one App, so its workers share that App."""
    if store_url.startswith("memory"):
        return [app] * count
    return [app] + [deferq.App(store_url, lease=5) for _ in range(count - 1)]


@kinds
def test_backoff_pauses_the_key_across_three_workers_without_spending_an_attempt(app, store_url):
    started: dict[int, list[float]] = {}
    lock = threading.Lock()
    apps = worker_apps(app, store_url, 3)

    def call(n: int) -> None:
        with lock:
            started.setdefault(n, []).append(time.time())
            first = len(started[n]) == 1
        if n == 0 and first:
            raise deferq.Backoff(retry_after="2.5")

    for each in dict.fromkeys(apps):
        each.task(name="call")(call)

    workers = [start_worker(each, concurrency=2) for each in apps]
    try:
        trigger = app.enqueue("call", [0])
        wait_until(lambda: (app.limits.get("call") or {}).get("paused_for"), what="the pause stored")
        paused = time.time()
        rest = [app.enqueue("call", [n]) for n in range(1, 7)]
        for job in [trigger, *rest]:
            wait_for_state(app, job.id, JobState.SUCCEEDED, timeout=20)
    finally:
        for worker, _ in workers:  # all asked first: each takes up to a second to stop
            worker.stop()
        for worker, thread in workers:
            stop_worker(worker, thread)
        for each in set(apps) - {app}:
            each.close()
    ends = paused + 2.5 - 0.1
    # every worker hears of the pause within a second; none starts a job of the key until it ends
    assert not [t for n in range(1, 7) for t in started[n] if paused + 1.0 <= t < ends]
    assert app.get(trigger.id).attempts == 1 and len(started[0]) == 2
    assert app.limits.get("call") is None  # the pause expired with its record


@pytest.mark.parametrize("store_url", ["sqlite", "redis"], indirect=True)
def test_a_limit_set_by_another_process_holds_a_worker_whose_code_declares_none(app, store_url):
    """The worker's limits middleware is idle (its jobs never enter limits/) until the
    store holds a limit: its keeper reads them every second, as `deferq limits set` from
    another process needs."""
    running, most = [0], [0]
    lock, release = threading.Lock(), threading.Event()

    @app.task()
    def slow() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(0.2)
        with lock:
            running[0] -= 1

    assert app.limiter.idle
    worker, thread = start_worker(app, concurrency=4)
    other = deferq.App(store_url)
    try:
        other.limits.set("slow", concurrency=1)
        wait_until(lambda: not app.limiter.idle, what="the worker's limiter woke for the stored limit")
        jobs = [slow.enqueue() for _ in range(4)]
        for job in jobs:
            wait_for_state(app, job.id, JobState.SUCCEEDED, timeout=20)
    finally:
        stop_worker(worker, thread)
        other.limits.clear("slow")
        other.close()
    assert most[0] == 1


@given(st.from_regex(r"\A[ 0-9./smhdx]{0,12}\Z"))
@settings(max_examples=300, deadline=None)
def test_the_http_rate_pattern_takes_exactly_the_rates_deferq_reads(text):
    try:
        Rate.parse(text)
        readable = True
    except ValueError:
        readable = False
    assert bool(re.match(POSITIVE_RATE[:-1] + r"\Z", text)) == readable
