"""Property tests of dependencies and batch counts (issue 14), on the memory store,
SQLite, PostgreSQL, MySQL and Redis (one server; a Cluster and shards, where a graph's
jobs sit in several queues, slots and servers): random graphs of jobs, random outcomes
settled in random order, a few at a time; every child ends as the rules of
backends/deps.py say, and a batch's counts add up."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deferq
from deferq.backends.base import Outcome
from deferq.job import JobState
from deferq.options import JobOptions
from tests.conftest import need_service
from tests.support.stores.redis import delete_prefix, shared_answers, shared_url, unique_prefix

OUTCOMES = st.sampled_from(["succeeded", "dead", "cancelled"])


@st.composite
def graphs(draw):
    """Roots with outcomes, and children (each after some earlier jobs, maybe any-outcome)."""
    roots = draw(st.lists(OUTCOMES, min_size=1, max_size=6))
    children = []
    for i in range(draw(st.integers(0, 8))):
        known = len(roots) + i
        parents = draw(st.lists(st.integers(0, known - 1), min_size=1, max_size=3, unique=True))
        children.append((parents, draw(st.booleans())))
    order = draw(st.permutations(range(len(roots))))
    return roots, children, order, draw(st.integers(1, 3))


def expected(roots, children):
    """The final state of every job by the rules, children run as they come due."""
    states = [JobState(o) for o in roots]
    for parents, any_outcome in children:
        finals = [states[p] for p in parents]
        if not any_outcome and any(s != JobState.SUCCEEDED for s in finals):
            states.append(JobState.CANCELLED)
        else:
            states.append(JobState.SUCCEEDED)  # released, and run to success below
    return states


def run_graph(url, roots, children, order, chunk, queues=("default",)):
    """Job i goes to queues[i % len(queues)]: several queues put a graph's edges across
    Redis slots (Cluster) and servers (shards)."""
    app = deferq.App(url)
    backend = app.backend
    jobs = [app.enqueue("t", [i], queue=queues[i % len(queues)]) for i in range(len(roots))]
    for parents, any_outcome in children:
        jobs.append(app.enqueue("t", [len(jobs)], after=[jobs[p] for p in parents], after_any_outcome=any_outcome,
                                queue=queues[len(jobs) % len(queues)]))
    outcome_of = {jobs[i].id: roots[i] for i in range(len(roots))}
    rank = {jobs[i].id: order.index(i) for i in range(len(roots))}
    while True:  # settle the roots in the drawn order; released children succeed
        leased = backend.reserve(list(queues), 100, "w", 60, (0, 1, 2))
        if not leased:
            break
        leased.sort(key=lambda j: rank.get(j.id, -1))
        for start in range(0, len(leased), chunk):  # one settle for a few: one release for their edges
            some = leased[start : start + chunk]
            backend.settle([Outcome(job, outcome_of.get(job.id, "succeeded"), error="x") for job in some])
    states = [app.get(j.id).state for j in jobs]
    app.close()
    return states


@settings(max_examples=60, deadline=None)
@given(graphs())
def test_every_child_ends_as_the_rules_say_memory(graph):
    roots, children, order, chunk = graph
    assert run_graph("memory://", roots, children, order, chunk) == expected(roots, children)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=graphs())
def test_every_child_ends_as_the_rules_say_sqlite(graph, tmp_path_factory):
    roots, children, order, chunk = graph
    url = f"sqlite:///{tmp_path_factory.mktemp('g')}/g.db"
    assert run_graph(url, roots, children, order, chunk) == expected(roots, children)


# One clean store for all examples: each drains the queue it fills.
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=graphs())
def test_every_child_ends_as_the_rules_say_postgres(graph, postgres_url):
    roots, children, order, chunk = graph
    assert run_graph(postgres_url, roots, children, order, chunk) == expected(roots, children)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=graphs())
def test_every_child_ends_as_the_rules_say_mysql(graph, mysql_url):
    roots, children, order, chunk = graph
    assert run_graph(mysql_url, roots, children, order, chunk) == expected(roots, children)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=graphs())
def test_every_child_ends_as_the_rules_say_redis(graph):
    if not shared_answers():
        need_service("Redis", "nothing answers at DEFERQ_TEST_REDIS")
    roots, children, order, chunk = graph
    prefix = unique_prefix()
    try:
        found = run_graph(shared_url(prefix=prefix), roots, children, order, chunk, ("default", "a", "b"))
    finally:
        delete_prefix(prefix)
    assert found == expected(roots, children)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=graphs())
def test_every_child_ends_as_the_rules_say_redis_cluster_and_shards(graph, redis_cluster_url, redis_shards_url):
    roots, children, order, chunk = graph
    for url in (redis_cluster_url, redis_shards_url):
        # a fresh prefix per example: the fixtures' URL is the same for every example
        url = url.replace("prefix=", f"prefix={unique_prefix()}")
        assert run_graph(url, roots, children, order, chunk, ("default", "a", "b")) == expected(roots, children)


@settings(max_examples=40, deadline=None)
@given(st.lists(OUTCOMES, min_size=0, max_size=30))
def test_a_batch_counts_add_up(outcomes):
    app = deferq.App("memory://")
    backend = app.backend
    aside = JobOptions(queue="callbacks")  # not taken by the reserve below
    with app.batch(
        on_complete=deferq.Call("done", (), {}, aside), on_success=deferq.Call("yay", (), {}, aside)
    ) as b:
        members = [app.enqueue("m", [i]) for i in range(len(outcomes))]
    by_id = {m.id: o for m, o in zip(members, outcomes, strict=True)}
    info = app.get_batch(b.id)
    assert (info.total, info.pending) == (len(outcomes), len(outcomes))
    for job in backend.reserve(["default"], 100, "w", 60, (0, 1, 2)):
        if job.id in by_id:
            backend.settle([Outcome(job, by_id[job.id], error="x")])
    info = app.get_batch(b.id)
    counts = {o: outcomes.count(o) for o in ("succeeded", "dead", "cancelled")}
    assert (info.succeeded, info.dead, info.cancelled, info.pending) == (*counts.values(), 0)
    assert info.state == "complete"
    complete, success = (app.get(info.callbacks[k]) for k in ("on_complete", "on_success"))
    assert complete.state == JobState.QUEUED  # released once every member finished
    all_good = counts["dead"] == counts["cancelled"] == 0
    assert success.state == (JobState.QUEUED if all_good else JobState.CANCELLED)
