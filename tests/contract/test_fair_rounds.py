"""Fair queues (backends/fair.py): the round-robin's properties on the memory store, for
any mix of backlogs, and every store claiming in exactly the memory store's order."""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import deferq
from deferq.backends import fair
from deferq.backends.base import Outcome

KEYS = "abcdef"
# One claim's levels, fixed (the plain level first, then the fair one): every store
# alternates them claim by claim, which a comparison between stores must not depend on.
LEVELS = fair.claim_levels((0, 1, 2), fair_first=False)


def test_claims_take_the_fair_and_plain_levels_first_in_turn():
    first, second = fair.claim_levels((1, 0, 2)), fair.claim_levels((1, 0, 2))
    assert {first[:2], second[:2]} == {(1, 11), (11, 1)}
    assert sorted(first) == [0, 1, 2, 10, 11, 12]
    assert fair.levels_of(LEVELS) == LEVELS  # levels already chosen are kept


def test_virtual_times_start_at_the_floor_and_step_by_one_over_the_weight():
    nexts: dict = {(("q", 11), "old"): 2.0}
    floors = {("q", 11): 5.0}
    entries = [(("q", 11), "old", 1.0), (("q", 11), "new", 4.0), (("q", 11), "new", 4.0), (("q", 11), "old", 1.0)]
    assert fair.virtual_times(entries, floors, nexts) == [5.0, 5.0, 5.25, 6.0]


# An operation: ("put", key, how many) enqueues a backlog; ("take", how many) claims one at a time.
operations = st.lists(
    st.one_of(st.tuples(st.just("put"), st.sampled_from(KEYS), st.integers(1, 25)),
              st.tuples(st.just("take"), st.integers(1, 30))),
    min_size=1, max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(operations)
@example([("put", "a", 6), ("put", "b", 1), ("put", "b", 6), ("take", 11), ("put", "a", 1), ("take", 3)])
def test_every_key_with_work_is_served_within_one_round(ops):
    """A key that gets work while it has none is served within one claim per key with
    work (it starts at the floor, behind at most one job of each), or two per key when it
    was served before (its own last turn may be in the round under way: a put just after
    its last job was claimed waits behind the round's rest and the next); each key's jobs
    run in the order they were enqueued."""
    app = deferq.App("memory://")
    task = app.task(name="fair.t", queue="q", fair_key="{key}")(lambda key, i: i)
    waiting: dict[str, int] = {}  # key -> jobs of it not yet claimed
    deadline: dict[str, int] = {}  # key -> the claim by which its first new job must run
    served: dict[str, list[int]] = {}
    claims = 0
    for op in ops:
        if op[0] == "put":
            _, key, n = op
            if not waiting.get(key):
                rounds = 2 if key in served else 1
                deadline[key] = claims + rounds * sum(1 for k, left in waiting.items() if left) + 1
            start = len(served.get(key, [])) + waiting.get(key, 0)
            app.enqueue_many([task.call(key, start + i) for i in range(n)])
            waiting[key] = waiting.get(key, 0) + n
            continue
        for _ in range(op[1]):
            jobs = app.backend.reserve(["q"], 1, "w", 30.0, LEVELS)
            if not jobs:
                break
            claims += 1
            key = jobs[0].args[0]
            if key in deadline:
                assert claims <= deadline.pop(key), f"{key} waited past its round"
            served.setdefault(key, []).append(jobs[0].args[1])
            waiting[key] -= 1
            app.backend.settle([Outcome(jobs[0], "succeeded")])
    for key, numbers in served.items():
        assert numbers == list(range(len(numbers))), f"{key} out of order"


def claims_of(url: str, plan: list[tuple[str, str, int]], rounds: list[int]) -> list[list[str]]:
    """Enqueue `plan` ((queue, fair key or "", priority) in batches of one key), then
    claim `rounds` (limits) over both queues; the job names each claim took."""
    app = deferq.App(url)
    try:
        task = app.task(name="fair.x", fair_key="{key}")(lambda key, name: name)
        for n, (queue, key, priority) in enumerate(plan):
            if key:
                task.options(queue=queue, priority=priority).enqueue(key, f"{key}{n}")
            else:
                app.enqueue("noop", [f"plain{n}"], queue=queue, priority=priority)
        taken = []
        for limit in rounds:
            jobs = app.backend.reserve(["a", "b"], limit, "w", 30.0, LEVELS)
            taken.append([job.args[-1] for job in jobs])
        return taken
    finally:
        app.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres", "mysql", "mysql_update", "redis"])
def test_every_store_claims_fair_jobs_in_the_memory_stores_order(store, request):
    url = request.getfixturevalue(f"{store}_url")
    rng = random.Random(7)
    plan = [(rng.choice("ab"), rng.choice(["x", "y", "z", ""]), rng.choice((1, 1, 1, 0))) for _ in range(60)]
    rounds = [rng.choice((1, 2, 5)) for _ in range(20)] + [100]
    expected = claims_of("memory://", plan, rounds)
    assert claims_of(url, plan, rounds) == expected
    assert sum(map(len, expected)) == 60


def test_a_fair_key_template_names_the_tasks_parameters():
    app = deferq.App("memory://")
    with pytest.raises(deferq.ConfigError, match="fair_key 'customer:{nope}' names 'nope'"):
        app.task(name="bad", fair_key="customer:{nope}")(lambda customer_id: customer_id)
    task = app.task(name="ok", fair_key="customer:{customer_id}")(lambda customer_id, region="eu": customer_id)
    assert task.enqueue(customer_id=7).fair_key == "customer:7"
    assert task.options(fair_key="vip").enqueue(8).fair_key == "vip"  # a job's own key, as written
    with pytest.raises(ValueError, match="the fair key 'customer:{customer_id}' of ok: the call does not fit"):
        task.enqueue()
    assert app.enqueue("noop", [1]).fair_key is None


def test_a_fair_queue_keys_its_jobs_unless_the_job_or_its_task_has_a_key():
    app = deferq.App("memory://")
    app.fair_queue("reports", key="customer:{customer_id}", weights={"customer:7": 3, "vip": 5})
    build = app.task(name="build", queue="reports")(lambda customer_id, month="11": customer_id)
    mine = app.task(name="mine", queue="reports", fair_key="region:{region}")(lambda region, customer_id: 0)
    weighed = app.task(name="weighed", queue="reports", fair_weight=2)(lambda customer_id: 0)
    elsewhere = app.task(name="elsewhere")(lambda customer_id: 0)

    def stored(call):
        [item] = app.runtime.prepare([call])[0]
        return item.job.fair_key, item.fair_weight

    assert stored(build.call(7)) == ("customer:7", 3.0)  # the queue's key and its weight
    assert stored(build.call(customer_id=8)) == ("customer:8", 1.0)
    assert stored(build.options(fair_key="vip").call(7)) == ("vip", 5.0)  # the job's key wins
    assert stored(build.options(fair_weight=0.5).call(7)) == ("customer:7", 0.5)  # so does its weight
    assert stored(mine.call("eu", 7)) == ("region:eu", 1.0)  # the task's own template wins
    assert stored(weighed.call(7)) == ("customer:7", 2.0)  # the task's declared weight wins
    assert stored(elsewhere.call(7)) == (None, 1.0)  # not on the queue
    assert stored(elsewhere.options(queue="reports").call(7)) == ("customer:7", 3.0)  # sent to it
    assert stored(deferq.Call("unknown", (), {"customer_id": 9}, deferq.options.JobOptions(queue="reports"))) == (
        "customer:9", 1.0)  # a task this App does not declare: its arguments by name
    with pytest.raises(ValueError, match="unknown, a task this App does not declare, must pass 'customer_id' by"):
        app.enqueue("unknown", [9], queue="reports")
    assert app.enqueue("unknown", [9], queue="reports", fair_key="c9").fair_key == "c9"
    assert app.get(build.enqueue(7).id).fair_key == "customer:7"


def test_a_fair_queue_refuses_a_task_that_cannot_fill_its_key_whichever_comes_first():
    app = deferq.App("memory://")
    app.task(name="early", queue="reports")(lambda: None)
    with pytest.raises(deferq.ConfigError, match="'customer_id' is not a parameter of early: give the task a "
                       "fair_key of its own"):
        app.fair_queue("reports", key="customer:{customer_id}")
    assert app.fair_queues == {}
    app.fair_queue("exports", key="customer:{customer_id}")
    with pytest.raises(deferq.ConfigError, match="'customer_id' is not a parameter of late"):
        app.task(name="late", queue="exports")(lambda: None)
    assert "late" not in app.tasks
    own = app.task(name="late", queue="exports", fair_key="late")(lambda: None)
    assert own.enqueue().fair_key == "late"  # a constant template: all its jobs one key
    sent = app.task(name="sent")(lambda: None)
    with pytest.raises(ValueError, match="not a parameter of sent: .*, or the job one"):
        sent.options(queue="exports").enqueue()
    app.fair_queue("exports", key="customer:{customer_id}")  # the same declaration again: kept
    with pytest.raises(deferq.ConfigError, match="already declared fair by 'customer:{customer_id}'"):
        app.fair_queue("exports", key="tenant:{customer_id}")
    for bad, words in [({"key": "c:{x!r}"}, "key fields must be plain argument names"),
                       ({"key": "c", "weights": {"c": 0}}, "the weight of 'c' must be a number above 0"),
                       ({"key": "c", "weights": ["c"]}, "weights must map fair keys to weights")]:
        with pytest.raises(deferq.ConfigError, match=words):
            app.fair_queue("other", **bad)
    with pytest.raises(deferq.ConfigError, match="queue name"):
        app.fair_queue("two words", key="c")
