"""GET /v1/jobs without `key`: a page of jobs through the store's `find_jobs`
(backends/search.py), with `q` looked up exactly as an id and a key first (one index
probe each, so a job is found however old it is), then as text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgspec import UNSET

from ...backends.base import Backend
from ...backends.search import MIN_TEXT, SCHEDULED_KINDS, JobPage, JobQuery, find_scheduled
from ...job import Job, JobState
from ..http.errors import Invalid
from . import jobs as jobs_module

if TYPE_CHECKING:
    from ..process.service import Service
    from . import models


def _given(value: Any) -> Any:
    return None if value is UNSET else value


def _exact(backend: Backend, q: str, find: JobQuery) -> list[Job]:
    """The jobs whose id (as typed or upper case: ids are Crockford base 32) or key is `q`,
    if they pass the filters."""
    found = [backend.get(job_id) for job_id in dict.fromkeys((q, q.upper()))] + [backend.get_by_key(q)]
    unique = {job.id: job for job in found if job is not None}

    def passes(job: Job) -> bool:
        return (
            find.state in (None, job.state) and find.queue in (None, job.queue) and find.task in (None, job.task)
            and (find.tag is None or find.tag in job.tags) and find.chunk in (None, job.chunk_call)
        )

    return [job for job in unique.values() if passes(job)]


def _search(backend: Backend, q: str, find: JobQuery, kind: str | None) -> tuple[list[Job], JobPage | None]:
    """`kind`: one of SCHEDULED_KINDS (`retrying`, `waiting`), a part of the scheduled jobs."""
    exact = _exact(backend, q, find) if q and find.cursor is None else []
    if kind is not None:
        exact = [job for job in exact if SCHEDULED_KINDS[kind](job)]
    if q and len(q) < MIN_TEXT:
        return exact, None
    return exact, find_scheduled(backend, find, kind) if kind is not None else backend.find_jobs(find)


async def page(service: Service, query: models.JobsQuery) -> dict[str, Any]:
    q = (_given(query.q) or "").strip()
    state = _given(query.state)
    kind = state if state in SCHEDULED_KINDS else None
    as_state = JobState.SCHEDULED if kind else None if state is None else JobState(state)
    find = JobQuery(state=as_state, queue=_given(query.queue), task=_given(query.task), tag=_given(query.tag),
                    chunk=_given(query.chunk), text=q if len(q) >= MIN_TEXT else "", cursor=_given(query.cursor),
                    limit=query.limit, window=query.window)
    try:
        exact, found = await service.store(_search, service.backend, q, find, kind)
    except ValueError as exc:  # a cursor this store did not make
        raise Invalid(str(exc)) from None
    seen = {job.id for job in exact}
    jobs = exact + [job for job in (found.jobs if found else []) if job.id not in seen]
    answer: dict[str, Any] = {"jobs": [jobs_module.view(job, service.sealer) for job in jobs],
                              "cursor": found.cursor if found else None}
    if q:
        answer["search"] = {"exact": len(exact), "text": found.text_search if found else None,
                            "scanned": found.scanned if found else None,
                            "complete": found.complete if found else True}
    return answer
