"""Names compare exactly on every store: a trailing space makes another unique key,
event key, event name, fair key or kv key (MySQL's and MariaDB's `_bin` collations would
call `k` and `k ` equal; deferq's tables use a NO PAD one)."""

from __future__ import annotations

import deferq
from deferq.backends.base import Outcome
from deferq.job import JobState
from deferq.steps.events import send_event, timeline

from .test_contract import reserve
from .test_steps import run_next


def test_a_trailing_space_makes_another_unique_key(app, backend):
    plain = app.enqueue("noop", [1], key="k")
    spaced = app.enqueue("noop", [2], key="k ")
    assert spaced.id != plain.id and spaced.key == "k "
    assert backend.get_by_key("k").id == plain.id
    assert backend.get_by_key("k ").id == spaced.id
    assert app.enqueue("noop", [3], key="k ").id == spaced.id  # its own key still holds


def test_an_event_for_a_key_with_a_trailing_space_wakes_no_waiter_on_the_key(app):
    @app.task(name="checkout")
    def checkout() -> object:
        job = deferq.current_job()
        assert job is not None
        return job.wait_for("paid", event="payment", key="user:C", timeout=600)

    assert send_event(app.backend, "payment", "user:C ", "kept, for another key") == 0
    assert send_event(app.backend, "payment ", "user:C", "kept, for another event") == 0
    waiting = checkout.enqueue()
    assert run_next(app).state == JobState.SCHEDULED  # neither kept event answers its wait
    assert send_event(app.backend, "payment", "user:C ", "forged") == 0
    assert send_event(app.backend, "payment ", "user:C", "forged") == 0
    assert app.get(waiting.id).state == JobState.SCHEDULED
    assert [row["state"] for row in timeline(app.backend, waiting.id)] == ["waiting"]
    assert send_event(app.backend, "payment", "user:C", "real") == 1
    assert run_next(app, timeout=2).result == "real"


def test_a_trailing_space_makes_another_fair_key(app, backend):
    fair = app.task(name="fair.exact", queue="fair")(lambda i: i)
    app.enqueue_many([fair.options(fair_key="a").call(i) for i in (1, 2)] + [fair.options(fair_key="a ").call(3)])
    taken = []
    while jobs := reserve(backend, 1, queues=("fair",)):
        taken += [(job.fair_key, job.args[0]) for job in jobs]
        backend.settle([Outcome(job, "succeeded") for job in jobs])
    assert taken == [("a", 1), ("a ", 3), ("a", 2)]  # two keys served in turn, not one key's three jobs


def test_a_trailing_space_makes_another_kv_record(backend):
    backend.kv_put("exact", "a", b"1")
    assert backend.kv_put("exact", "a ", b"2", only_new=True) is True
    backend.kv_put("exact ", "a", b"3")
    assert backend.kv_list("exact") == {"a": b"1", "a ": b"2"}
    assert backend.kv_list("exact ") == {"a": b"3"}
    assert backend.kv_delete("exact", "a ") is True
    assert (backend.kv_get("exact", "a"), backend.kv_get("exact", "a ")) == (b"1", None)


def test_a_trailing_space_makes_another_limit_name(app):
    app.limits.set("report", rate="5/s")
    app.limits.pause("report ", 60)
    assert app.limits.get("report")["paused_for"] is None
    assert app.limits.get("report ")["rate"] is None
    assert app.limits.clear("report ") is True and app.limits.get("report")["rate"] == "5/s"
