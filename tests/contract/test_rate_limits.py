"""Rate limits (limits.py) in real workers, on every store: turns are handed out by the
store, a job over its rate waits without spending an attempt, and keys are separate."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deferq
from deferq.job import JobState
from deferq.limits import Rate
from tests.conftest import STORES
from tests.contract.test_worker import start_worker, stop_worker, wait_for_state
from tests.support.server_helpers import wait_until

# slow: rates held over seconds of real time in workers of this process (~40 s on two stores)
pytestmark = pytest.mark.slow

stores = pytest.mark.parametrize("store_url", STORES, indirect=True)


def most_in_any_window(times: list[float], period: float) -> int:
    """The most start times that fall in one half-open window of `period` seconds."""
    times = sorted(times)
    edge = period * (1 - 1e-9)  # turns an exact period apart, summed in floating point, may fall short by 1 ulp
    return max(sum(1 for t in times[i:] if t < start + edge) for i, start in enumerate(times))


@stores
def test_a_rate_spreads_runs_and_spends_no_attempts(app):
    started: list[float] = []
    lock = threading.Lock()

    @app.task(rate="4/s", max_attempts=1)
    def send(n: int) -> int:
        with lock:
            started.append(time.time())
        return n

    jobs = [send.enqueue(n) for n in range(13)]
    worker, thread = start_worker(app, concurrency=8)
    try:
        done = [wait_for_state(app, job.id, JobState.SUCCEEDED, timeout=30) for job in jobs]
    finally:
        stop_worker(worker, thread)
    assert {job.attempts for job in done} == {1}  # waiting for a turn is no attempt
    # turns are 0.25 s apart; a run starts a few ms after its turn, so a window may catch one more
    assert most_in_any_window(started, 1.0) <= 4 + 1
    assert max(started) - min(started) >= 2.9  # 13 turns 0.25 s apart


@stores
def test_each_key_has_its_own_rate(app):
    started: dict[str, list[float]] = {"a": [], "b": []}

    @app.task(rate="1/m", rate_key="customer:{customer}")
    def sync(customer: str) -> None:
        started[customer].append(time.time())

    a1, b1, a2 = sync.enqueue("a"), sync.enqueue("b"), sync.enqueue("a")
    worker, thread = start_worker(app, concurrency=4)
    try:
        wait_for_state(app, b1.id, JobState.SUCCEEDED)
        states = {JobState.SUCCEEDED, JobState.SCHEDULED}
        wait_until(lambda: {app.get(a1.id).state, app.get(a2.id).state} == states,
                   what="one of a's jobs run, the other waiting for its turn")
    finally:
        stop_worker(worker, thread)
    (waiting,) = [job for job in (app.get(a1.id), app.get(a2.id)) if job.state == JobState.SCHEDULED]
    assert (len(started["a"]), len(started["b"])) == (1, 1)
    assert waiting.attempts == 0 and waiting.run_at - time.time() > 50  # its turn is a minute away


def test_a_key_that_cannot_be_named_is_refused_at_enqueue():
    app = deferq.App("memory://")

    @app.task(rate="10/s", rate_key="customer:{customer_id}")
    def sync(customer_id: int, full: bool = False) -> None: ...

    sync.enqueue(7)  # named from the arguments, defaults included
    with pytest.raises(ValueError, match="missing a required argument: 'customer_id'"):
        sync.enqueue(full=True)
    with pytest.raises(deferq.ConfigError, match="'region', which is not a parameter of other"):
        @app.task(rate="1/s", rate_key="r:{region}")
        def other(customer_id: int) -> None: ...
    with pytest.raises(deferq.ConfigError, match='rate must look like "100/m"'):
        app.task(rate="lots")
    with pytest.raises(deferq.ConfigError, match="rate_key needs a rate"):
        app.task(rate_key="k")


@pytest.mark.parametrize(("text", "count", "period"), [
    ("100/m", 100, 60), ("10/s", 10, 1), ("5/30s", 5, 30), ("1000/h", 1000, 3600), (" 1 / d ", 1, 86400),
])
def test_rates_are_read_as_runs_per_period(text, count, period):
    rate = Rate.parse(text)
    assert (rate.count, rate.period, rate.interval) == (count, period, period / count)


@settings(max_examples=200, deadline=None)
@given(count=st.integers(1, 50), period=st.sampled_from([1.0, 60.0]),
       gaps=st.lists(st.floats(0, 5), min_size=1, max_size=120))
def test_turns_never_put_more_than_count_in_any_window(count, period, gaps):
    """The store's arithmetic (here the memory store's, the same rule as every store's):
    asked at any moments, turns are an interval apart and never before the asking."""
    from deferq.backends.memory import MemoryBackend

    store = MemoryBackend()
    clock = [1000.0]
    store.now = lambda: clock[0]  # type: ignore[method-assign]
    interval = period / count
    turns = []
    for gap in gaps:
        clock[0] += gap * interval
        turn, now = store.rate_take("k", interval)
        assert turn >= now
        turns.append(turn)
    assert all(b - a >= interval - 1e-9 for a, b in zip(turns, turns[1:]))
    assert most_in_any_window(turns, period) <= count


@settings(max_examples=100, deadline=None)
@given(count=st.integers(1, 20), lateness=st.lists(st.floats(0, 3), min_size=2, max_size=40))
def test_a_run_starts_within_half_a_turn_of_its_turn(count, lateness):
    """Jobs take turns in a row, then each comes back `lateness` turns after its own
    (busy workers, a polling store): one that is more than half a turn late takes a new
    turn, so whatever the lateness no window of one period holds more than count + 1
    starts, and every job runs."""
    from deferq.backends.memory import MemoryBackend
    from deferq.limits import take_turn

    store = MemoryBackend()
    clock = [1000.0]
    store.now = lambda: clock[0]  # type: ignore[method-assign]
    rate = Rate.parse(f"{count}/s")
    due = {f"j{i}": clock[0] + take_turn(store, rate, "k", f"j{i}").wait for i in range(len(lateness))}
    late = dict(zip(due, lateness, strict=True))
    starts = []
    while due:  # the earliest return first, as the store hands snoozed jobs back
        job = min(due, key=lambda j: due[j] + late[j] * rate.interval)
        clock[0] = max(clock[0], due[job] + late.pop(job, 0.0) * rate.interval)
        wait = take_turn(store, rate, "k", job).wait
        if wait <= 0:
            starts.append(clock[0])
            del due[job]
        else:  # a new turn, and back on time for it
            due[job], late[job] = clock[0] + wait, 0.0
    assert len(starts) == len(lateness)
    assert most_in_any_window(starts, 1.0) <= count + 1


# -- concurrency limits ---------------------------------------------------------------------------


def overlaps(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = open_now = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


@stores
def test_one_run_per_key_at_a_time_and_keys_run_side_by_side(app):
    spans: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    lock = threading.Lock()

    @app.task(concurrency=1, concurrency_key="customer:{customer}")
    def sync(customer: str) -> None:
        start = time.time()
        time.sleep(0.15)
        with lock:
            spans[customer].append((start, time.time()))

    jobs = [sync.enqueue(c) for c in "aabbaabb"]
    worker, thread = start_worker(app, concurrency=8)
    try:
        done = [wait_for_state(app, job.id, JobState.SUCCEEDED, timeout=30) for job in jobs]
    finally:
        stop_worker(worker, thread)
    assert overlaps(spans["a"]) == overlaps(spans["b"]) == 1
    assert overlaps(spans["a"] + spans["b"]) == 2  # the keys do not wait for each other
    assert {job.attempts for job in done} == {1}  # waiting for a slot is no attempt


def test_a_killed_run_frees_its_slot_at_lease_expiry_and_never_two_run_at_once(tmp_path):
    """Three worker processes (lease 2 s) share customer "a" (concurrency 1); one of them
    is SIGKILLed while it runs a job, twice. Every job still finishes; no two runs of
    "a" were ever open at once (a killed run is open until its kill)."""
    import os
    import signal

    from tests.process.test_crash import start_fault_worker

    url, record, log = f"sqlite:///{tmp_path}/limits.db", tmp_path / "runs.log", tmp_path / "workers.log"
    app = deferq.App(url)
    task = app.task(name="one_at_a_time", concurrency=1, concurrency_key="customer:{customer}", max_attempts=50)(
        lambda customer, seconds: None)
    jobs = [task.enqueue("a", 0.3) for _ in range(10)]
    workers = [start_fault_worker(url, record, log) for _ in range(3)]
    killed: dict[int, float] = {}
    try:
        for _ in range(2):
            started = wait_until(lambda: _running(record, killed), timeout=30, what="a run in progress")
            victim = next(w for w in workers if w.pid == started)
            victim.send_signal(signal.SIGKILL)
            killed[victim.pid] = time.time()
            victim.wait(10)
            workers[workers.index(victim)] = start_fault_worker(url, record, log)
        for job in jobs:
            wait_for_state(app, job.id, JobState.SUCCEEDED, timeout=60)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(30)
    spans = _spans(record, killed)
    assert overlaps(spans) == 1, spans
    assert len(killed) == 2 and os.path.exists(record)
    app.close()


def _lines(record) -> list[tuple[str, int, str, float]]:
    if not record.exists():
        return []
    lines = map(str.split, record.read_text().splitlines())
    return [(kind, int(pid), job_id, float(t)) for kind, pid, job_id, t in lines]


def _running(record, killed: dict[int, float]) -> int | None:
    """The pid of a process running a job now (started, not ended, not killed)."""
    ended = {(pid, job_id) for kind, pid, job_id, _ in _lines(record) if kind == "end"}
    for kind, pid, job_id, _ in reversed(_lines(record)):
        if kind == "start" and (pid, job_id) not in ended and pid not in killed:
            return pid
    return None


def _spans(record, killed: dict[int, float]) -> list[tuple[float, float]]:
    starts: dict[tuple[int, str], float] = {}
    spans = []
    for kind, pid, job_id, t in _lines(record):
        if kind == "start":
            starts[(pid, job_id)] = t
        else:
            spans.append((starts.pop((pid, job_id)), t))
    spans += [(t, killed[pid]) for (pid, _), t in starts.items()]  # killed mid-run
    return spans
