"""Chunk tasks without a store server: how a call's end maps to each job (chunks.endings,
a property), the Chunk option, the declaration's checks, the item codec, and the worker's
gathering (worker/gather.py); eager mode and deferq.testing make calls too."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import deferq
from deferq import testing
from deferq.chunks import MAX_SIZE, MAX_WAIT, ChunkFailed, ItemFailed, endings
from deferq.context import JobControl
from deferq.errors import ConfigError, PayloadError
from deferq.job import JobState
from deferq.registry import TaskSpec
from deferq.worker.gather import Gather

POSITIONS = st.one_of(st.integers(-3, 12), st.booleans(), st.text(max_size=3), st.none())
ERRORS = st.one_of(st.text(max_size=20), st.builds(ValueError, st.text(max_size=20)))


@given(count=st.integers(1, 10), failures=st.dictionaries(POSITIONS, ERRORS, max_size=6),
       results=st.one_of(st.none(), st.lists(st.integers(), max_size=12)))
def test_chunk_failed_fails_the_positions_it_names_or_every_job_when_one_is_stray(count, failures, results):
    ends = endings(count, None, ChunkFailed(failures, results), "t")
    assert len(ends) == count
    valid = all(type(p) is int and 0 <= p < count for p in failures)
    if not valid:
        assert all(isinstance(e.error, ItemFailed) for e in ends)
        assert all("every job of the call failed" in str(e.error) for e in ends)
        return
    for at, end in enumerate(ends):
        assert (end.error is not None) == (at in failures)
        if at in failures and isinstance(failures[at], BaseException):
            assert end.error is failures[at]
        elif at in failures:
            assert isinstance(end.error, ItemFailed) and str(end.error) == failures[at]
        kept = results is not None and len(results) == count
        assert end.result == (results[at] if kept else None)


@given(count=st.integers(1, 10), result=st.one_of(st.none(), st.integers(), st.lists(st.integers(), max_size=12)))
def test_a_return_is_every_jobs_success_with_its_own_result_when_one_per_item(count, result):
    ends = endings(count, result, None, "t")
    assert all(e.error is None for e in ends)
    per_item = isinstance(result, list) and len(result) == count
    assert [e.result for e in ends] == (result if per_item else [None] * count)


def test_any_other_exception_fails_every_job_of_the_call():
    boom = RuntimeError("boom")
    assert {e.error for e in endings(3, None, boom, "t")} == {boom}


@given(size=st.one_of(st.integers(-5, MAX_SIZE + 5), st.floats(), st.booleans(), st.text(max_size=3)),
       wait=st.one_of(st.floats(), st.integers(-5, 5000), st.timedeltas(), st.booleans()))
def test_a_chunk_is_made_of_a_size_and_a_wait_in_range_or_refused_with_a_sentence(size, wait):
    try:
        chunk = deferq.Chunk(size=size, wait=wait)
    except ValueError as exc:
        assert str(exc).startswith("Chunk ") and "\n" not in str(exc)
        return
    assert type(size) is int and 1 <= chunk.size <= MAX_SIZE
    seconds = wait.total_seconds() if isinstance(wait, timedelta) else wait
    assert chunk.wait == seconds and 0 <= chunk.wait <= MAX_WAIT


def test_a_chunk_task_takes_one_list():
    app = deferq.App("memory://")
    with pytest.raises(ConfigError, match="only required parameter"):
        app.task(chunk=deferq.Chunk())(lambda_free_two)
    with pytest.raises(ConfigError, match="deferq.Chunk"):
        app.task(chunk={"size": 3})(items_only)  # type: ignore[call-overload]
    task = app.task(chunk=deferq.Chunk(size=2))(items_only)
    assert task([1, 2]) == [1, 2]  # called directly: the function, here


def lambda_free_two(items: list[int], other: int) -> None:
    pass


def items_only(items: list[int]) -> list[int]:
    return items


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_an_item_travels_as_the_lists_item_type_and_a_call_is_one_item():
    app = deferq.App("memory://", eager=True)
    seen: list[Any] = []

    @app.task(chunk=deferq.Chunk(size=10))
    def plot(points: list[Point]) -> list[int]:
        seen.extend(points)
        return [p.x + p.y for p in points]

    job = plot.enqueue(Point(1, 2))
    assert seen == [Point(1, 2)] and (job.state, job.result) == (JobState.SUCCEEDED, 3)
    with pytest.raises(PayloadError, match="one item"):
        plot.enqueue(Point(1, 2), Point(3, 4))  # type: ignore[call-arg]
    assert len(app.list_jobs(JobState.SUCCEEDED)) == 1  # the refused call stored nothing


def test_drain_makes_calls_of_at_most_size():
    app = deferq.App("memory://")
    calls: list[list[int]] = []

    @app.task(chunk=deferq.Chunk(size=4, wait=10))
    def index(ids: list[int]) -> None:
        calls.append(ids)

    app.enqueue_many([index.call(i) for i in range(10)])
    done = testing.drain(app)
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert {job.state for job in done} == {JobState.SUCCEEDED}


def test_an_async_chunk_task_runs_in_eager_mode_and_under_drain():
    app = deferq.App("memory://", eager=True)

    @app.task(chunk=deferq.Chunk(size=3))
    async def double(ids: list[int]) -> list[int]:
        return [i * 2 for i in ids]

    assert double.enqueue(4).result == 8
    lazy = deferq.App("memory://")
    lazy.task(chunk=deferq.Chunk(size=3))(double.fn)
    lazy.enqueue_many([lazy.tasks["double"].call(i) for i in range(5)])
    assert [job.result for job in testing.drain(lazy)] == [0, 2, 4, 6, 8]


def spec(name: str, size: int, wait: float) -> TaskSpec:
    return TaskSpec(name, items_only, chunk=deferq.Chunk(size=size, wait=wait))


def job(i: int) -> Any:
    return dataclasses.replace(JOBS[0], id=f"j{i}", args=(i,))


JOBS = [deferq.App("memory://").enqueue("t", [0])]


def test_gather_makes_full_chunks_at_once_and_the_rest_after_the_wait():
    gather = Gather()
    for i in range(7):
        gather.add(spec("t", 3, 1.0), job(i), JobControl(), now=100.0)
    calls = gather.ripe(100.0)
    assert [[j.args[0] for j, _ in call.members] for call in calls] == [[0, 1, 2], [3, 4, 5]]
    assert gather.count == 1 and gather.next_due() == 101.0
    assert gather.ripe(100.5) == []
    assert [[j.args[0] for j, _ in call.members] for call in gather.ripe(101.0)] == [[6]]
    assert not gather


def test_gather_drops_the_jobs_it_is_asked_to():
    gather = Gather()
    for i in range(3):
        gather.add(spec("t", 5, 1.0), job(i), JobControl(), now=0.0)
    assert [j.id for j in gather.drop({"j1"})] == ["j1"]
    assert [[j.id for j, _ in call.members] for call in gather.ripe(5.0)] == [["j0", "j2"]]


def test_gather_leaves_out_a_job_whose_expiry_passed():
    gather = Gather()
    gather.add(spec("t", 5, 0.0), job(0), JobControl(), now=0.0)
    gather.add(spec("t", 5, 0.0), dataclasses.replace(job(1), expires_at=50.0), JobControl(), now=0.0)
    [call] = gather.ripe(1.0, wall=100.0)
    assert [j.id for j, _ in call.members] == ["j0"] and [j.id for j in gather.expired] == ["j1"]
