"""Each attempt of a job that failed at least once: when it started, on which worker, how
long it ran, how it ended and its error (and a chunk task's, the call it ran in). The job
record keeps only the last error; this is what a job page and GET /v1/jobs/{id} show as
`attempt_log`.

Kept as one small record per job in the store's records (kv), written by the worker that
settles the attempt, after the settle: a failed attempt, and the attempt that ends a job
that failed before. A job that succeeds at its first attempt writes nothing, so the
common path costs nothing. At most KEPT attempts (the newest) for KEEP_SECONDS.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from ..backends.base import Outcome, OutcomeKind, retried
from ..job import Job
from ..middleware import Middleware, Settled, settled_view

if TYPE_CHECKING:
    from ..encryption import Sealer

NAMESPACE = "attempts"
KEPT = 25  # attempts a job keeps, the newest
KEEP_SECONDS = 30 * 86400.0  # how long after its last attempt
ERROR_CHARS = 4000  # of each attempt's error text (a traceback's end is kept)
COUNTED = {OutcomeKind.SUCCEEDED, OutcomeKind.RETRY, OutcomeKind.DEAD, OutcomeKind.CANCELLED}

log = logging.getLogger("deferq.attempts")


class Attempts(Middleware):
    """Notes the attempts of jobs that failed at least once (see the module's text); the
    chain calls it only for a settled batch with such an attempt (`settles`)."""

    settles = staticmethod(retried)

    def __init__(self, store: Any, sealer: Callable[[], Sealer | None] = lambda: None) -> None:
        self.store = store  # a callable answering the App's store, opened on first use
        self.sealer = sealer  # the App's encryption at rest, if any: an encrypted job's errors stay so

    def after_settle_many(self, settled: list[Settled]) -> None:
        for outcome, _ in settled:
            if retried(outcome):
                self.noted(settled_view(outcome), outcome)

    def noted(self, job: Job, outcome: Outcome) -> None:
        """`job` as settled."""
        if outcome.kind not in COUNTED or (outcome.error is None and job.attempts <= 1):
            return
        store = self.store()
        ended = job.finished_at or job.updated_at or time.time()  # the settle's time, in the store's clock
        entry = {"attempt": job.attempts, "worker": job.last_worker, "started_at": ended - (outcome.ran or 0.0),
                 "seconds": outcome.ran, "outcome": str(outcome.kind),
                 "error": self._error(job, outcome.error[-ERROR_CHARS:]) if outcome.error else None}
        if outcome.chunk_call is not None:  # a chunk task's attempt: the call it ran in
            entry["chunk_call"] = outcome.chunk_call
        kept = read(store, job.id)
        if not kept and job.attempts > 1 and outcome.error is None:
            return  # its failures were not noted (older records expired): nothing to add to
        kept = [a for a in kept if a["attempt"] != job.attempts][-(KEPT - 1):] + [entry]
        store.kv_put(NAMESPACE, job.id, orjson.dumps(kept), KEEP_SECONDS)


    def _error(self, job: Job, error: str) -> str:
        sealer = self.sealer()
        if sealer is None or not sealer.wants(job.task):
            return error
        return sealer.sealed_error(job.id, error)  # as the job's error, when the same text


def read(store: Any, job_id: str) -> list[dict[str, Any]]:
    """The attempts kept for a job, oldest first ([] when none are)."""
    raw = store.kv_get(NAMESPACE, job_id)
    if raw is None:
        return []
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        log.warning("the attempts kept for job %s cannot be read; left out", job_id)
        return []
    return found if isinstance(found, list) else []
