"""The error a failed job keeps: the traceback a user reads in the console and `deferq
show`, chained causes included, its end kept when it is long, no caret lines."""

from __future__ import annotations

import traceback

import deferq
from deferq.attempt.tracebacks import format_error
from deferq.worker import Worker, WorkerConfig


def lookup(table: dict[str, int], name: str) -> int:
    return table[name]


def test_a_failed_job_keeps_its_traceback_with_the_cause_and_without_carets():
    app = deferq.App("memory://")

    @app.task(max_attempts=1)
    def price(name: str) -> int:
        try:
            return lookup({}, name)
        except KeyError as missing:
            raise ValueError(f"no price for {name}") from missing

    job = price.enqueue("tea")
    assert Worker(app, WorkerConfig(burst=True, concurrency=1)).run() == 0
    error = app.get(job.id).error
    assert error is not None
    assert "KeyError: 'tea'" in error and "direct cause" in error
    assert error.rstrip().endswith("ValueError: no price for tea")
    line = lookup.__code__.co_firstlineno + 1
    assert f"line {line}, in lookup\n    return table[name]\n" in error  # the frame and its source
    assert not any(set(line.strip()) <= {"^", "~"} for line in error.splitlines() if line.strip())
    app.close()


def test_a_deep_traceback_keeps_its_end():
    app = deferq.App("memory://")

    def down(depth: int) -> None:
        if depth == 0:
            raise RuntimeError("at the bottom")
        down(depth - 1)

    @app.task(max_attempts=1)
    def deep() -> None:
        down(200)

    job = deep.enqueue()
    assert Worker(app, WorkerConfig(burst=True, concurrency=1)).run() == 0
    error = app.get(job.id).error
    assert error is not None and len(error) <= 4000
    assert error.rstrip().endswith("RuntimeError: at the bottom")
    app.close()


def caught(raiser) -> BaseException:
    try:
        raiser()
    except BaseException as exc:  # noqa: BLE001 - the test's own exceptions
        return exc
    raise AssertionError("did not raise")


def with_cause() -> None:
    try:
        lookup({}, "a")
    except KeyError as missing:
        raise ValueError("no a") from missing


def with_context() -> None:
    try:
        with_cause()
    except ValueError:
        raise RuntimeError("while handling")  # noqa: B904 - the context is what is tested


def without_context() -> None:
    try:
        lookup({}, "b")
    except KeyError:
        raise LookupError("hidden cause") from None


def noted() -> None:
    error = TypeError("bad type")
    error.add_note("a note for the reader")
    raise error


def recursing(depth: int = 40) -> None:
    if depth == 0:
        raise RecursionError("deep enough")
    recursing(depth - 1)


def test_the_kept_traceback_is_pythons_less_its_caret_lines():
    for raiser in (with_cause, with_context, without_context, noted, recursing):
        exc = caught(raiser)
        python = "".join(traceback.format_exception(exc))
        without_carets = "".join(line for line in python.splitlines(keepends=True)
                                 if not line.strip() or set(line.strip()) - {"^", "~"})
        assert format_error(exc) == without_carets, raiser.__name__


def test_an_exception_group_keeps_each_of_its_exceptions():
    def many() -> None:
        raise ExceptionGroup("two failures", [caught(with_cause), KeyError("other")])

    text = format_error(caught(many))
    assert "ExceptionGroup: two failures (2 sub-exceptions)" in text
    assert "| ValueError: no a" in text and "| KeyError: 'a'" in text and "| KeyError: 'other'" in text
