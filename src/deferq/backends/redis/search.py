"""Listing and searching jobs on Redis (backends/search.py states the contract).

Redis keeps each queue's jobs in sorted sets by state (keys.py): waiting by due time,
active by lease deadline, finished by finish time. A page walks them a state at a time
(in JobState order), highest score first, merged over the queues (and priorities); the
cursor is (state, score, id) of the last job shown, and each set resumes right after
that job when it holds it (page.lua). Redis has no index by task nor of text: those
filters scan the newest `window` jobs and say so. A task filter without text is decided
inside page.lua, which sends back only the matching ids (`task_page`): a scan of 10,000
jobs is one or two pipelined rounds of scripts, not 10,000 replies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...job import ALL_STATES, FINISHED_STATES, Job, JobState
from ..search import JobPage, JobQuery, SearchStore, decode_cursor, encode_cursor, is_score, raw_matches, scan_page
from . import scripts
from .codec import record_fields
from .connection import guarded
from .keys import KeySpace
from .scripts import Call

Position = list[Any]  # [state index, score, job id]
def is_position(value: Any) -> bool:
    """[state index] (that state from its top) or [state index, score, job id]."""
    if type(value) is not list or len(value) not in (1, 3) or type(value[0]) is not int:
        return False
    return 0 <= value[0] <= len(ALL_STATES) and (len(value) == 1 or (is_score(value[1]) and type(value[2]) is str))


FIRST_LOOK = 1000  # jobs task_page looks at in its first round (then 4 times more each round)


class RedisSearch(SearchStore):
    keys: KeySpace
    _run_all: Callable[[list[Call]], list[Any]]
    _queues: Callable[[], list[str]]
    _fetch: Callable[[Sequence[tuple[str, str]]], list[Job]]
    _read: Callable[[Sequence[tuple[Any, ...]]], list[Any]]
    _read_jobs: Callable[[Sequence[tuple[str, str]], tuple[str, ...]], list[tuple[Any, bytes | None]]]
    now: Callable[[], float]

    @guarded
    def find_jobs(self, query: JobQuery) -> JobPage:
        if query.task is not None and not query.text and query.tag is None and query.chunk is None:
            return self.task_page(query)
        return scan_page(query, self.job_pages(query), is_position)

    def task_page(self, query: JobQuery) -> JobPage:
        """A task filter without text: each sorted set is read by page.lua, which looks at
        up to `k` members after where it last stopped and sends back only the task's. Every
        set has been looked at down to the highest of the sets' stopping points (the
        boundary), so the matches above it are the newest, in order; those below wait for
        the next round. Stops at `limit` matches or after `window` jobs were looked at."""
        queues = [query.queue] if query.queue is not None else self._queues()
        states = [query.state] if query.state is not None else list(ALL_STATES)
        now = repr(self.now())
        position = decode_cursor(query.cursor, is_position)
        found: list[tuple[Job, Position]] = []
        scanned = 0
        for index in range(0 if position is None else int(position[0]), len(states)):
            start = position[1:] or None if position is not None and int(position[0]) == index else None
            sets = [(queue, *s) for queue in queues for s in self._sets(states[index], queue, now)]
            stopped: dict[int, list[Any] | None] = dict.fromkeys(range(len(sets)), start)
            pending: list[tuple[float, str, str]] = []  # (score, id, queue) below the boundary so far
            budget = FIRST_LOOK  # jobs to look at in a round, growing: a common task is found at once
            while stopped and len(found) < query.limit and scanned < query.window:
                ahead = self._ahead(stopped, pending, query.limit - len(found))
                k = -(-min(budget, query.window - scanned) // len(ahead))
                budget *= 4
                looked, boundary = self._task_round(sets, stopped, ahead, k, query.task or "", pending)
                scanned += looked
                pending.sort(reverse=True)
                ready = [m for m in pending if boundary is None or m[:2] >= boundary]
                pending = pending[len(ready) :]
                found += self._still_in(states[index], index, ready)[: query.limit - len(found)]
                if len(found) >= query.limit:
                    return JobPage([job for job, _ in found], encode_cursor(found[-1][1]), None, scanned)
                if scanned >= query.window and boundary is not None:  # looked at down to the boundary
                    cursor = [index, *boundary]
                    return JobPage([job for job, _ in found], encode_cursor(cursor), None, scanned, False)
            if scanned >= query.window and index + 1 < len(states):  # the next state is not looked at
                return JobPage([job for job, _ in found], encode_cursor([index + 1]), None, scanned, False)
        return JobPage([job for job, _ in found], None, None, scanned, True)

    def _still_in(
        self, state: JobState, index: int, ready: list[tuple[float, str, str]]
    ) -> list[tuple[Job, Position]]:
        """The jobs of `ready` (score, id, queue) read, those still in `state`, in order."""
        jobs = {job.id: job for job in self._fetch([(queue, job_id) for _, job_id, queue in ready])}
        return [(job, [index, score, job_id]) for score, job_id, _ in ready
                if (job := self._in_state(jobs.get(job_id), state)) is not None]

    @staticmethod
    def _ahead(
        stopped: dict[int, list[Any] | None], pending: list[tuple[float, str, str]], need: int
    ) -> list[int]:
        """The open sets worth reading on: a match becomes ready once every open set has
        stopped below it, so only the sets stopped above the `need`-th match found so far
        (`pending`, highest first), else above the lowest set; any not read yet."""
        places = {i: (float(at[0]), str(at[1])) for i, at in stopped.items() if at is not None}
        if len(places) < len(stopped):
            return list(stopped)
        target = pending[need - 1][:2] if len(pending) >= need else min(places.values())
        return [i for i, place in places.items() if place > target] or list(stopped)

    def _task_round(
        self,
        sets: list[tuple[str, str, str, str]],
        stopped: dict[int, list[Any] | None],
        ahead: list[int],
        k: int,
        task: str,
        pending: list[tuple[float, str, str]],
    ) -> tuple[int, tuple[float, str] | None]:
        """One round of `task_page`: the open sets `ahead` read on from where each
        stopped (`stopped`, None: at its top), `k` members each; the task's jobs go to
        `pending`, `stopped` moves on (a set with no more in range leaves it). (How many
        were looked at, the boundary: the highest place an open set stopped at, None
        when every set is through.)"""
        calls = []
        for i in ahead:
            where = stopped[i]
            queue, key, high, low = sets[i]
            after = ["", ""] if where is None else [repr(float(where[0])), str(where[1])]
            prefix = self.keys.queue(queue).job_prefix
            calls.append(Call(scripts.PAGE, self._page_keys(queue, key), [high, low, *after, k, prefix, task]))
        looked = 0
        for i, reply in zip(ahead, self._run_all(calls), strict=True):
            queue, _, high, low = sets[i]
            top = float("inf") if high == "+inf" else float(high)
            bottom = float(low[1:]) if low.startswith("(") else float("-inf")
            looked += int(reply[0])
            for at in range(3, len(reply), 2):
                if bottom < (score := float(reply[at + 1])) <= top:
                    pending.append((score, reply[at].decode(), queue))
            last = float(reply[2]) if reply[1] else bottom
            if int(reply[0]) < k or last <= bottom:  # nothing more of this set in the state
                del stopped[i]
            else:
                stopped[i] = [last, reply[1].decode()]
        floors = [(float(at[0]), str(at[1])) for at in stopped.values() if at is not None]
        return looked, max(floors) if floors else None

    def job_pages(self, query: JobQuery) -> Callable[[Position | None, int], list[tuple[Job | None, Position]]]:
        """The pager `scan_page` filters: the jobs of `query`'s state and queue, in order."""
        queues = [query.queue] if query.queue is not None else self._queues()
        states = [query.state] if query.state is not None else list(ALL_STATES)
        now = repr(self.now())

        def pages(position: Position | None, size: int) -> list[tuple[Job | None, Position]]:
            taken: list[tuple[Job | None, Position]] = []
            first = 0 if position is None else int(position[0])
            for index in range(first, len(states)):
                cursor = position if position is not None and index == first and len(position) == 3 else None
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
        if state == JobState.SCHEDULED:
            return [(key, "+inf", f"({now}") for key in (*qk.waiting, qk.held, *qk.fair)]
        return [*((key, now, "-inf") for key in (*qk.waiting, qk.held, *qk.fair)),
                *((key, "+inf", "-inf") for key in qk.ready)]  # (all due: at their creation)

    def _page_keys(self, queue: str, key: str) -> list[str]:
        """KEYS of page.lua for one of `_sets`: a ready list's entries are read with their
        jobs (their due times are the jobs' creation times)."""
        qk = self.keys.queue(queue)
        return [key, qk.job_prefix] if key in qk.ready else [key]

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
        calls = [Call(scripts.PAGE, self._page_keys(q, key), [high, low, *after, size, prefixes[q]])
                 for q, key, high, low in sets]
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
            reads = self._read_jobs(refs, ("hmget", "payload", "error", "key"))
            texts = [[record_fields(record)[b"payload"], None, None] if record else hashed
                     for hashed, record in reads]  # a record (add.lua) has no error and no key
            passing = [raw_matches(query, None, fields) for fields in texts]
            refs = [ref for ref, ok in zip(refs, passing, strict=True) if ok]
        jobs = {job.id: job for job in self._fetch(refs)}
        return [(self._in_state(jobs.get(job_id), state), [index, score, job_id]) for score, job_id, _, _ in found]

    @staticmethod
    def _in_state(job: Job | None, state: JobState) -> Job | None:
        """The job if it is (still) in `state`: it may have moved since its set was read."""
        return job if job is not None and job.state == state else None
