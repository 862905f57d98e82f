"""What a worker says about each job: one line per finished job, with JSON fields."""

from __future__ import annotations

import io
import logging

import orjson
import pytest

import deferq
from deferq.observe.logs import setup_logging
from deferq.worker import Worker, WorkerConfig


def test_each_finished_job_is_one_json_line_with_fields():
    stream = io.StringIO()
    setup_logging("info", "json", stream)
    try:
        app = deferq.App("memory://")

        @app.task(max_attempts=2, backoff=deferq.backoff.fixed(0))
        def flaky(n: int) -> int:
            if deferq.current_job().attempts == 1:
                raise ValueError("not yet")
            return n

        job = flaky.enqueue(7)
        assert Worker(app, WorkerConfig(burst=True, concurrency=1)).run() == 0
    finally:
        logging.getLogger("deferq").handlers.clear()
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    jobs = [line for line in lines if line["logger"] == "deferq.jobs"]
    assert [(e["job_id"], e["task"], e["queue"], e["attempt"]) for e in jobs] == [
        (job.id, "flaky", "default", 1), (job.id, "flaky", "default", 2),
    ]
    retried, succeeded = jobs
    assert retried["level"] == "info" and retried["error"] == "ValueError: not yet"
    assert "error" not in succeeded and succeeded["duration_ms"] >= 0
    assert "succeeded in" in succeeded["message"]


@pytest.mark.slow  # ~10 s of a worker under a burst of retries
def test_a_job_retried_at_once_is_still_tracked_when_leased_in_the_same_round_trip():
    """Settling a retry with no delay can lease the same job again in that very call:
    the new attempt must stay tracked (heartbeats, burst exit, shutdown), not be dropped
    with the old attempt's bookkeeping (it was, and the job stayed leased)."""
    for _ in range(10):  # the race showed in about half the runs
        app = deferq.App("memory://")

        @app.task(queue="mail")
        def ok() -> None:
            return None

        @app.task(max_attempts=2, backoff=deferq.backoff.fixed(0))
        def bad() -> None:
            raise RuntimeError("no")

        ok.enqueue(), ok.enqueue()
        job = bad.enqueue()
        assert Worker(app, WorkerConfig(queues=("default", "mail"), burst=True, concurrency=2)).run() == 0
        assert (app.get(job.id).state, app.get(job.id).attempts) == ("dead", 2)


def test_text_lines_keep_their_form_and_the_jobs_logger_filters_them():
    """A job's line skips logging's search for its caller, not the logger's filters:
    a filter on `deferq.jobs` still drops lines, and the text form is unchanged."""
    stream = io.StringIO()
    setup_logging("info", "text", stream)
    jobs_logger = logging.getLogger("deferq.jobs")

    class NoSecret(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return record.__dict__.get("task") != "secret"

    dropping = NoSecret()
    jobs_logger.addFilter(dropping)
    try:
        app = deferq.App("memory://")

        @app.task
        def shown() -> None:
            return None

        @app.task
        def secret() -> None:
            return None

        job = shown.enqueue()
        secret.enqueue()
        assert Worker(app, WorkerConfig(burst=True, concurrency=1)).run() == 0
    finally:
        jobs_logger.removeFilter(dropping)
        logging.getLogger("deferq").handlers.clear()
    lines = [line for line in stream.getvalue().splitlines() if "deferq.jobs" in line]
    assert len(lines) == 1
    clock, level, logger, rest = lines[0].split(maxsplit=3)
    assert len(clock) == 8 and clock[2] == clock[5] == ":" and (level, logger) == ("INFO", "deferq.jobs:")
    assert rest.startswith(f"job {job.id} shown succeeded in ") and rest.endswith(" ms")


def test_a_job_line_written_directly_is_the_line_logging_would_write():
    """With the CLI's logging as set up, a job's line goes to the stream without a
    LogRecord; any filter on the way (here one that drops nothing) takes the logging
    module's path again. Both write the same line, text and JSON alike."""
    from deferq.backends.base import Outcome, OutcomeKind
    from deferq.observe.logs import _direct_handler, report

    app = deferq.App("memory://")

    @app.task
    def flaky() -> None:
        return None

    job = flaky.enqueue()
    outcomes = [Outcome(job, OutcomeKind.SUCCEEDED), Outcome(job, OutcomeKind.RETRY, 1.5, "boom\nsecond line"),
                Outcome(job, OutcomeKind.DEAD, 0, "gone")]
    jobs_logger = logging.getLogger("deferq.jobs")
    passing = logging.Filter()  # lets every record through
    try:
        for fmt in ("text", "json"):
            lines = []
            for filtered in (False, True):
                stream = io.StringIO()
                setup_logging("info", fmt, stream)
                if filtered:
                    jobs_logger.addFilter(passing)
                assert (_direct_handler() is None) == filtered
                for outcome in outcomes:
                    report(outcome, 0.0123)
                jobs_logger.removeFilter(passing)
                lines.append(stream.getvalue().splitlines())
            direct, through_logging = lines
            assert len(direct) == len(outcomes) == len(through_logging)
            for mine, theirs in zip(direct, through_logging, strict=True):
                if fmt == "json":
                    mine_entry, their_entry = orjson.loads(mine), orjson.loads(theirs)
                    assert len(mine_entry.pop("time")) == len(their_entry.pop("time")) == 24
                    assert mine_entry == their_entry
                else:
                    assert mine.split(" ", 1)[1] == theirs.split(" ", 1)[1] and len(mine.split()[0]) == 8
    finally:
        jobs_logger.removeFilter(passing)
        logging.getLogger("deferq").handlers.clear()
        app.close()


def test_a_settle_batch_writes_its_job_lines_at_once():
    from deferq.backends.base import Outcome, OutcomeKind
    from deferq.observe.logs import lines_together, report

    app = deferq.App("memory://")

    @app.task
    def quick() -> None:
        return None

    jobs = [quick.enqueue() for _ in range(3)]
    stream = io.StringIO()
    setup_logging("info", "text", stream)
    try:
        with lines_together():
            for job in jobs:
                report(Outcome(job, OutcomeKind.SUCCEEDED), 0.001)
            assert stream.getvalue() == ""
        lines = stream.getvalue().splitlines()
        assert [line.split()[4] for line in lines] == [job.id for job in jobs]
        report(Outcome(jobs[0], OutcomeKind.SUCCEEDED), 0.001)  # outside a batch: at once
        assert len(stream.getvalue().splitlines()) == 4
    finally:
        logging.getLogger("deferq").handlers.clear()
        app.close()
