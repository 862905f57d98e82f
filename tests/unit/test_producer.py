"""The producer API without a worker: eager mode, bad input, URLs."""

from __future__ import annotations

import pytest

import deferq
from deferq.errors import ConfigError, MissingExtra


def test_eager_mode_runs_at_enqueue_with_retries():
    app = deferq.App("memory://", eager=True)
    calls = []

    @app.task(max_attempts=3)
    def flaky(x):
        calls.append(x)
        if len(calls) < 2:
            raise RuntimeError("first call fails")
        return x * 10

    job = flaky.options(delay=3600).enqueue(4)
    assert job.state == "succeeded" and job.result == 40 and job.attempts == 2


def test_eager_mode_async_task_and_dead():
    app = deferq.App("memory://?eager=1")

    @app.task(max_attempts=2)
    async def never():
        raise ValueError("no")

    job = never.enqueue()
    assert job.state == "dead" and "ValueError: no" in job.error


def test_eager_needs_memory():
    with pytest.raises(ConfigError, match="memory"):
        deferq.App("sqlite:///x.db", eager=True)


def test_unknown_scheme_is_a_sentence():
    with pytest.raises(ConfigError, match="unknown store URL 'ftp://x'"):
        deferq.App("ftp://x").backend


def test_missing_extra_names_the_pip_command(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_redis(name, *args, **kwargs):
        if name == "redis" or name.startswith("redis."):
            raise ImportError("no redis here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_redis)
    monkeypatch.delitem(__import__("sys").modules, "redis", raising=False)
    with pytest.raises(MissingExtra, match=r"pip install '/path/to/deferq\[redis\]'"):
        deferq.App("redis://127.0.0.1:6379/0").backend


def test_options_validate():
    app = deferq.App("memory://")

    @app.task()
    def f(): ...

    for bad in ({"max_attempts": 0}, {"timeout": -1}, {"queue": "a b"}, {"at": "tomorrow"}):
        with pytest.raises(ValueError):
            f.options(**bad)
    with pytest.raises(ValueError, match="already registered"):
        app.task(name="f")(lambda: None)


def test_task_is_still_a_function():
    app = deferq.App("memory://")

    @app.task()
    def add(a, b):
        return a + b

    assert add(2, 3) == 5


@pytest.mark.parametrize("delay, run_at, expires_at, expires_in", [
    (0.0, 0.0, None, None), (5.0, 0.0, None, 30.0), (0.0, 50.0, 70.0, 30.0), (0.0, 90.0, None, None),
])
def test_a_stored_job_is_the_items_fields_the_store_time_and_defaults(delay, run_at, expires_at, expires_in):
    """Enqueue.stored builds the Job by position (for speed): the same Job as by name."""
    from deferq.backends.base import Enqueue
    from deferq.job import Job, JobState, new_job_id

    job = Job(id=new_job_id(), task="t", args=(1, "a"), kwargs={"k": [2]}, queue="q", priority=0, max_attempts=7,
              timeout=3.5, key="u", run_at=run_at, meta={"m": 1}, expires_at=expires_at, remark="r")
    now = 60.0
    due = run_at or now + delay
    expected = Job(
        id=job.id, task="t", args=(1, "a"), kwargs={"k": [2]}, queue="q", priority=0,
        state=JobState.SCHEDULED if due > now else JobState.QUEUED, max_attempts=7, timeout=3.5, key="u",
        run_at=due, created_at=now, meta={"m": 1}, updated_at=now, remark="r",
        expires_at=expires_at if expires_at is not None or expires_in is None else now + expires_in,
    )
    assert Enqueue(job, delay, b"[]", expires_in).stored(now) == expected


def test_jobs_built_by_the_fast_init_are_whole_frozen_jobs_and_subclasses_still_work():
    """job.slot_init: the instance passes through a twin class while its fields are set."""
    import dataclasses

    from deferq.job import Job

    job = Job("a", "t", (1,), queue="q")
    assert type(job) is Job and job == Job(id="a", task="t", args=(1,), queue="q")
    assert job.kwargs == {} and job.kwargs is not Job("a", "t").kwargs  # a new default per job
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.queue = "other"  # type: ignore[misc]

    class Tagged(Job):  # another layout (it has a __dict__): set through the descriptors
        pass

    tagged = Tagged("b", "t", priority=0)
    assert type(tagged) is Tagged and (tagged.id, tagged.priority, tagged.meta) == ("b", 0, {})


def test_the_quicker_builders_make_the_same_frozen_records():
    """job.slot_builder: fresh_job, stamped, a Call and an Enqueue built on their twin
    are instances of the class itself, frozen, equal to the ones built by name, with
    a new default per instance."""
    import dataclasses

    from deferq.backends.base import Enqueue, make_enqueue
    from deferq.job import Job, JobState, fresh_job, stamped
    from deferq.task import Call, _make_call

    job = fresh_job("a", "t", (1,), {}, "q", 0, JobState.QUEUED, 5, 2.0, None, 0.0, 1.0, {}, None, None,
                    "r", ("x",), None)
    assert type(job) is Job and job == Job("a", "t", (1,), {}, "q", 0, max_attempts=5, timeout=2.0,
                                           created_at=1.0, remark="r", tags=("x",))
    done = stamped(job, JobState.QUEUED, 3.0, 3.0, None, 3.0)
    assert type(done) is Job and (done.run_at, done.remark, done.result) == (3.0, "r", None)
    assert done.meta is job.meta  # what a new job sets is the job's own
    call = _make_call("t", (1,), {})
    assert type(call) is Call and call == Call("t", (1,), {}) and call.source is None
    assert call.options is not _make_call("t", (1,), {}).options  # a new default per instance
    item = make_enqueue(job, 1.0, b"[]", unique_for=5.0)
    assert type(item) is Enqueue and item == Enqueue(job, 1.0, b"[]", unique_for=5.0)
    for made in (job, done, call, item):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, dataclasses.fields(made)[1].name, "other")


def test_payloads_are_the_json_of_the_arguments_whatever_their_size():
    """encode_payload copies small payloads out of orjson's buffer: the same bytes."""
    import orjson

    from deferq.job import encode_payload

    for text in ("", "x" * 100, "é" * 5000, "y" * 20_000):
        payload = encode_payload("t", (1, text), {"k": [text]})
        assert type(payload) is bytes and payload == orjson.dumps([[1, text], {"k": [text]}])


def test_a_big_batch_leaves_the_garbage_collector_as_it_found_it():
    """enqueue_many of 100+ calls holds off cyclic collection until stored (app.py):
    on again afterwards, even when a call is refused, and left off if the program
    turned it off itself."""
    import gc

    app = deferq.App("memory://")

    @app.task()
    def work(n: int) -> None: ...

    assert len(app.enqueue_many([work.call(i) for i in range(150)])) == 150
    assert gc.isenabled()
    with pytest.raises(TypeError):
        app.enqueue_many([work.call(i) for i in range(149)] + ["not a call"])  # type: ignore[list-item]
    assert gc.isenabled()
    gc.disable()
    try:
        app.enqueue_many([work.call(i) for i in range(150)])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_batch_of_calls_alike_and_loops_of_option_copies_keep_each_calls_options():
    app = deferq.App("memory://")

    @app.task(queue="q", max_attempts=4)
    def f(x):
        return x

    @app.task()
    def g(x):
        return x

    urgent, later = f.options(priority=0, queue="urgent"), f.options(delay=60)
    calls = [f.call(1), f.call(2), urgent.call(3), urgent.call(4), g.call(5), f.call(6), later.call(7)]
    jobs = app.enqueue_many(calls)
    assert [(j.task, j.queue, j.priority, j.max_attempts, j.args) for j in jobs] == [
        ("f", "q", 1, 4, (1,)), ("f", "q", 1, 4, (2,)), ("f", "urgent", 0, 4, (3,)), ("f", "urgent", 0, 4, (4,)),
        ("g", "default", 1, 3, (5,)), ("f", "q", 1, 4, (6,)), ("f", "q", 1, 4, (7,))]
    assert jobs[-1].run_at >= jobs[-1].created_at + 60 and jobs[0].run_at == jobs[0].created_at
    for n in range(3):  # a copy's rules, resolved once, stay its own
        assert (urgent.enqueue(n).queue, later.enqueue(n).queue, f.enqueue(n).queue) == ("urgent", "q", "q")
    with pytest.raises(TypeError, match="task.call"):
        app.enqueue_many([f.call(1), f.call(2), "not a call"])  # type: ignore[list-item]
    app.close()
