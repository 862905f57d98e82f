"""Listing and searching jobs on Redis (backends/search.py states the contract).

Redis keeps each queue's jobs in sorted sets by state (keys.py): waiting by due time,
active by lease deadline, finished by finish time. A page walks them a state at a time
(in JobState order), highest score first, merged over the queues (and priorities); the
cursor is (state, score, id) of the last job shown, and each set resumes right after
that job when it holds it (page.lua). Redis has no index by task nor of text: those
filters scan the newest `window` jobs and say so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...job import ALL_STATES, FINISHED_STATES, Job, JobState
from ..search import JobPage, JobQuery, SearchStore, raw_matches, scan_page
from . import scripts
from .connection import guarded
from .keys import KeySpace
from .scripts import Call

Position = list[Any]  # [state index, score, job id]


class RedisSearch(SearchStore):
    keys: KeySpace
    _run_all: Callable[[list[Call]], list[Any]]
    _queues: Callable[[], list[str]]
    _fetch: Callable[[Sequence[tuple[str, str]]], list[Job]]
    _read: Callable[[Sequence[tuple[Any, ...]]], list[Any]]
    now: Callable[[], float]

    @guarded
    def find_jobs(self, query: JobQuery) -> JobPage:
        return scan_page(query, self.job_pages(query))

    def job_pages(self, query: JobQuery) -> Callable[[Position | None, int], list[tuple[Job | None, Position]]]:
        """The pager `scan_page` filters: the jobs of `query`'s state and queue, in order."""
        queues = [query.queue] if query.queue is not None else self._queues()
        states = [query.state] if query.state is not None else list(ALL_STATES)
        now = repr(self.now())

        def pages(position: Position | None, size: int) -> list[tuple[Job | None, Position]]:
            taken: list[tuple[Job | None, Position]] = []
            first = 0 if position is None else int(position[0])
            for index in range(first, len(states)):
                cursor = position if position is not None and index == first else None
                taken += self._state_page(states[index], index, queues, cursor, size - len(taken), now, query)
                if len(taken) >= size:
                    break
            return taken

        return pages

    def _sets(self, state: JobState, queue: str, now: str) -> list[tuple[str, str, str]]:
        """(sorted set, highest score, lowest score) holding a queue's jobs in `state`."""
        qk = self.keys.queue(queue)
        if state in FINISHED_STATES:
            return [(qk.finished(state), "+inf", "-inf")]
        if state == JobState.ACTIVE:
            return [(qk.active, "+inf", "-inf")]
        if state == JobState.BLOCKED:
            return [(qk.blocked, "+inf", "-inf")]
        high, low = ("+inf", f"({now}") if state == JobState.SCHEDULED else (now, "-inf")
        return [(key, high, low) for key in (*qk.waiting, qk.held)]

    def _state_page(
        self,
        state: JobState,
        index: int,
        queues: list[str],
        cursor: Position | None,
        size: int,
        now: str,
        query: JobQuery,
    ) -> list[tuple[Job | None, Position]]:
        after = ["", ""] if cursor is None else [repr(float(cursor[1])), str(cursor[2])]
        sets = [(queue, *s) for queue in queues for s in self._sets(state, queue, now)]
        if not sets or size <= 0:
            return []
        by_task = query.task is not None
        prefixes = {q: self.keys.queue(q).job_prefix if by_task else "" for q in queues}
        calls = [Call(scripts.PAGE, [key], [high, low, *after, size, prefixes[q]]) for q, key, high, low in sets]
        stride = 3 if by_task else 2
        found: list[tuple[float, str, str, bool]] = []  # (score, id, queue, whether its task matches)
        for (queue, _, high, low), reply in zip(sets, self._run_all(calls), strict=True):
            top = float("inf") if high == "+inf" else float(high)
            bottom = float(low[1:]) if low.startswith("(") else float("-inf")
            for at in range(0, len(reply), stride):
                value = float(reply[at + 1])
                if bottom < value <= top:  # after a cursor by rank, the set's lower part may be reached
                    ok = not by_task or reply[at + 2].decode() == query.task
                    found.append((value, reply[at].decode(), queue, ok))
        found.sort(reverse=True)
        found = found[:size]
        refs = [(queue, job_id) for _, job_id, queue, ok in found if ok]
        if query.text:  # read the fields that decide first: most jobs fail
            reads = [("hmget", self.keys.queue(q).job(i), "payload", "error", "key") for q, i in refs]
            passing = [raw_matches(query, None, texts) for texts in self._read(reads)]
            refs = [ref for ref, ok in zip(refs, passing, strict=True) if ok]
        jobs = {job.id: job for job in self._fetch(refs)}
        return [(self._in_state(jobs.get(job_id), state), [index, score, job_id]) for score, job_id, _, _ in found]

    @staticmethod
    def _in_state(job: Job | None, state: JobState) -> Job | None:
        """The job if it is (still) in `state`: it may have moved since its set was read."""
        return job if job is not None and job.state == state else None
