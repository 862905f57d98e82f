"""What follows a job's cancel (`app.cancel`, DELETE /v1/jobs/{id}, the console): its
unfinished child jobs are cancelled (children.py), and a waiting durable job with undo
handlers not run yet is queued again to run them (undo.py). The cancel itself stands
whatever happens here: a part of the store that is down (a Redis shard holding the
job's records) is said in one warning line, not raised."""

from __future__ import annotations

import logging

from ..backends.base import Backend
from ..backends.guard import STORE_FAILURES
from ..errors import first_line
from .children import cancel_children
from .undo import after_cancel

log = logging.getLogger("deferq")


def after_cancelled(store: Backend, job_id: str) -> None:
    try:
        cancel_children(store, job_id)
        after_cancel(store, job_id)
    except STORE_FAILURES as exc:
        log.warning("job %s is cancelled, but its child jobs and undo handlers could not be looked for (%s)",
                    job_id, first_line(str(exc)))
