"""Middleware, the registry and the option schema: what a plug-in author relies on."""

from __future__ import annotations

import logging
from dataclasses import fields

import pytest

import deferq
from deferq import options
from deferq.backends.base import OutcomeKind
from deferq.server.api.jobs import JOB_FIELDS
from deferq.server.api.openapi import document
from deferq.worker import Worker, WorkerConfig


class Recorder(deferq.Middleware):
    """Writes every hook it sees into a shared list, tagged with its own name."""

    def __init__(self, name: str, seen: list[tuple[str, ...]]) -> None:
        self.name, self.seen = name, seen

    def before_enqueue(self, items):
        self.seen.append((self.name, "before_enqueue", items[0].job.task))
        return items

    def after_enqueue(self, jobs):
        self.seen.append((self.name, "after_enqueue", jobs[0].state))
        return jobs

    def before_run(self, job):
        self.seen.append((self.name, "before_run", deferq.current_job().id == job.id))

    def after_run(self, job, outcome, exc):
        self.seen.append((self.name, "after_run", outcome.kind))

    def after_settle(self, job, outcome, exc):
        self.seen.append((self.name, "after_settle", job.state))


def run_burst(app: deferq.App) -> None:
    assert Worker(app, WorkerConfig(burst=True, concurrency=1)).run() == 0


@pytest.mark.parametrize("store_url", ["memory", "sqlite"], indirect=True)
def test_hooks_run_in_order_and_after_hooks_unwind(app):
    seen: list[tuple[str, ...]] = []
    app.add_middleware(Recorder("outer", seen))
    app.add_middleware(Recorder("inner", seen))

    @app.task()
    def add(a, b):
        return a + b

    add.enqueue(1, 2)
    run_burst(app)
    assert seen == [
        ("outer", "before_enqueue", "add"), ("inner", "before_enqueue", "add"),
        ("inner", "after_enqueue", "queued"), ("outer", "after_enqueue", "queued"),
        ("outer", "before_run", True), ("inner", "before_run", True),
        ("inner", "after_run", OutcomeKind.SUCCEEDED), ("outer", "after_run", OutcomeKind.SUCCEEDED),
        ("inner", "after_settle", "succeeded"), ("outer", "after_settle", "succeeded"),
    ]


class Broken(deferq.Middleware):
    def before_run(self, job):
        raise RuntimeError("before_run broke")

    def after_settle(self, job, outcome, exc):
        raise RuntimeError("after_settle broke")


@pytest.mark.parametrize("store_url", ["memory", "sqlite"], indirect=True)
def test_a_failing_hook_is_logged_and_isolated(app, caplog):
    seen: list[tuple[str, ...]] = []
    app.add_middleware(Recorder("first", seen))
    app.add_middleware(Broken())

    @app.task()
    def ok():
        return "fine"

    job = ok.enqueue()
    with caplog.at_level(logging.ERROR, logger="deferq.middleware"):
        run_burst(app)
    assert app.get(job.id).result == "fine"
    assert ("first", "after_settle", "succeeded") in seen  # the later hook still ran
    failures = [r.getMessage() for r in caplog.records]
    assert any("Broken.before_run failed" in m for m in failures)
    assert any("Broken.after_settle failed" in m for m in failures)


class Postpone(deferq.Middleware):
    """A plug-in that puts every job back once: how a limiter defers work."""

    def __init__(self) -> None:
        self.postponed: set[str] = set()

    def before_run(self, job):
        if job.id not in self.postponed:
            self.postponed.add(job.id)
            raise deferq.Retry(delay=0, reason="postponed by middleware")


@pytest.mark.parametrize("store_url", ["memory", "sqlite"], indirect=True)
def test_retry_from_before_run_puts_the_job_back_without_running_it(app):
    runs = []

    @app.task(max_attempts=3)
    def work():
        runs.append(1)

    app.add_middleware(Postpone())
    job = work.enqueue()
    run_burst(app)
    done = app.get(job.id)
    assert done.state == "succeeded" and done.attempts == 2 and runs == [1]


@pytest.mark.parametrize("store_url", ["memory", "sqlite"], indirect=True)
def test_app_hooks_and_task_hooks_ride_on_middleware(app):
    events = []

    @app.on("dead")
    def on_dead(job, exc):
        events.append(("app", job.state, type(exc).__name__))

    @app.task(max_attempts=1, on_failure=lambda job, exc: events.append(("task", job.state, str(exc))))
    def fail():
        raise ValueError("nope")

    fail.enqueue()
    run_burst(app)
    assert events == [("task", "dead", "nope"), ("app", "dead", "ValueError")]


def test_eager_mode_runs_middleware_too():
    app = deferq.App("memory://", eager=True)
    seen: list[tuple[str, ...]] = []
    app.add_middleware(Recorder("r", seen))

    @app.task()
    def one():
        return 1

    assert one.enqueue().result == 1
    # as in production: the enqueue is over before the job runs
    assert [hook for _, hook, _ in seen] == [
        "before_enqueue", "after_enqueue", "before_run", "after_run", "after_settle",
    ]


class Batches(deferq.Middleware):
    """The consumer's batch hooks: a claimed job's arguments replaced, settled batches noted."""

    def __init__(self, seen: list[object]) -> None:
        self.seen = seen

    def after_claim(self, jobs):
        self.seen.append(("claimed", [j.task for j in jobs]))
        return [j.evolve(args=(j.args[0] * 10,)) if j.task == "double" else j for j in jobs]

    def after_settle_many(self, settled):
        self.seen.append(("settled", [(o.job.task, o.kind) for o, _ in settled]))


class OnlyMarked(Batches):
    """The same hooks, which concern only jobs of the task `marked`: skipped for the others."""

    claims = staticmethod(lambda job: job.task == "marked")
    settles = staticmethod(lambda outcome: outcome.job.task == "marked")


class Dormant(deferq.Middleware):
    """Idle until told otherwise: none of its hooks runs."""

    idle = True

    def __init__(self, seen: list[object]) -> None:
        self.seen = seen

    def before_run(self, job):
        self.seen.append(("dormant ran", job.task))


def consumer_app(kind: str, app: deferq.App | None) -> deferq.App:
    return deferq.App("memory://", eager=True) if kind == "eager" else app  # type: ignore[return-value]


@pytest.mark.parametrize("store_url", ["memory", "sqlite"], indirect=True)
@pytest.mark.parametrize("kind", ["worker", "eager"])
def test_the_consumer_batch_hooks_run_in_a_worker_and_in_eager_mode_alike(app, kind):
    app = consumer_app(kind, app)
    seen: list[object] = []
    filtered: list[object] = []
    app.add_middleware(Batches(seen))
    app.add_middleware(OnlyMarked(filtered))
    dormant = Dormant(seen)
    app.add_middleware(dormant)

    @app.task()
    def double(n):
        return n

    @app.task()
    def plain():
        return None

    first = double.enqueue(4)
    plain.enqueue()
    if kind == "worker":
        run_burst(app)
    assert app.get(first.id).result == 40  # the task saw the job as after_claim gave it
    assert ("claimed", ["double"]) in seen and ("settled", [("double", OutcomeKind.SUCCEEDED)]) in seen
    assert filtered == []  # no marked job: the filtered hooks never ran
    assert not [s for s in seen if s[0] == "dormant ran"]

    @app.task()
    def marked():
        return None

    dormant.idle = False
    app.registry.chain.changed()
    marked.enqueue()
    if kind == "worker":
        run_burst(app)
    assert filtered == [("claimed", ["marked"]), ("settled", [("marked", OutcomeKind.SUCCEEDED)])]
    assert ("dormant ran", "marked") in seen


def test_middleware_must_subclass_middleware():
    with pytest.raises(TypeError, match="deferq.Middleware"):
        deferq.App("memory://").add_middleware(object())  # type: ignore[arg-type]


def test_the_registry_resolves_a_job_once_with_its_own_timeout():
    app = deferq.App("memory://")

    @app.task(timeout=10)
    async def slow():
        return None

    default = app.registry.spec_for(slow.enqueue())
    own = app.registry.spec_for(slow.options(timeout=2).enqueue())
    unknown = app.registry.spec_for(app.enqueue("not_here"))
    assert (default.timeout, default.is_async, own.timeout) == (10, True, 2)
    assert unknown.fn is None


def test_every_option_list_derives_from_the_schema():
    http = {spec.http for _, spec in options.specs(options.JobOptions) if spec.http}
    assert set(JOB_FIELDS) == {"topic", "task", "body", "args", "kwargs"} | http
    request = document()["components"]["schemas"]["JobRequest"]["properties"]
    assert http <= set(request)
    # a periodic job's key is its tick's claim (one enqueue per tick), so no key rules
    assert {"key", "on_conflict", "max_wait"}.isdisjoint(options.PERIODIC_OPTIONS)
    assert set(options.PERIODIC_OPTIONS) <= {f.name for f in fields(options.JobOptions)}
    with pytest.raises(deferq.ConfigError, match="unknown task option 'colour'"):
        deferq.App("memory://").task(colour="red")
    with pytest.raises(ValueError, match="unknown option 'colour'"):
        deferq.App("memory://").task(name="t")(lambda: None).options(colour="red")


@pytest.mark.parametrize("moment", [253402300800, "9999-12-31T23:59:59.5+00:00", "10000-01-01T00:00:00Z"])
def test_one_bound_for_a_due_time_in_every_form(moment):
    with pytest.raises(ValueError, match="at must be|ISO 8601"):
        options.JobOptions.parse(at=moment)


def test_a_plain_job_enters_no_feature_it_does_not_use(tmp_path):
    """One job with no batch, no limit, no durable step and no workflow, enqueued and run
    by a worker (bench/walk.py traces every call): it never enters batches or workflows
    (flows/), limits (limits/) or durable steps (steps/), neither at enqueue nor from its
    claim to its settle. Their plug-ins are idle or look at the record first."""
    from bench.walk import walks

    found = walks(tmp_path)
    features = {"flows", "limits", "steps"}
    assert not set(found.producer.folders().rooms) & features, found.producer.path
    assert not set(found.consumer.folders().rooms) & features, found.consumer.path


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_worker_takes_the_runtime_under_the_app(app):
    """A Worker uses of its App only the runtime (the store, the tasks and their chain, the
    settings): given the runtime itself, it runs the App's jobs alike."""

    @app.task()
    def add(a, b):
        return a + b

    job = add.enqueue(1, 2)
    assert Worker(app.runtime, WorkerConfig(burst=True, concurrency=1)).run() == 0
    assert app.get(job.id).result == 3
