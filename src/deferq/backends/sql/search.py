"""Listing and searching jobs on the SQL stores (backends/search.py states the contract).

Newest enqueued first; the cursor is the last seq shown. A page is one query per stored
state: with a state, or none (then over the whole table by seq, or a chunk call's jobs
by its index); with a queue or task and no state, one query per stored state, merged
(each one range of the (queue, state) or (task, state) index, where one query over all
states would sort them all). Text: the dialect's `find_text` condition (`text_condition`).
"""

from __future__ import annotations

import heapq
from typing import Any

from ...job import JobState
from ..search import JobPage, JobQuery, SearchStore, decode_cursor, encode_cursor, is_int, tag_text
from .plans import Plan, Step
from .rows import WIDTH, job_of

STORED = {"scheduled": "queued", "queued": "queued", "active": "active", "blocked": "blocked",
          "succeeded": "succeeded", "dead": "dead", "cancelled": "cancelled"}
STORED_STATES = ("queued", "active", "blocked", "succeeded", "dead", "cancelled")
# What `text_condition` makes: (condition, parameters, how text is matched, the cursor's carry)
TextCondition = Plan[tuple[str, dict[str, Any], str, dict[str, Any]]]


def is_sql_position(value: Any) -> bool:
    """The last seq shown, and MySQL's text scan's floor (mysql.py)."""
    return type(value) is dict and value.keys() <= {"after", "floor"} and all(map(is_int, value.values()))


class SQLSearch(SearchStore):
    q: dict[str, str]
    run: Any  # SQLBackend.run
    # Whether the whole table reads newest first cheaply (seq is SQLite's rowid and
    # MySQL's primary key); else a list over every state is merged from one per state.
    seq_ordered: bool = True
    # Whether a query names its state as a literal (PostgreSQL: its list and text indexes
    # leave active jobs out, and only a literal shows the planner that a state other than
    # 'active' is in them, in a prepared statement's generic plan as well).
    state_literal: bool = False

    def text_condition(
        self, query: JobQuery, position: dict[str, Any]
    ) -> Plan[tuple[str, dict[str, Any], str, dict[str, Any]]]:
        """For `query.text`: (condition, its parameters, how text is matched: "index" |
        "words" | "scan", what the next cursor carries, with `scanned` and `complete`
        for a scan); may run statements."""
        raise NotImplementedError
        yield  # a plan

    def state_condition(self, state: str, query: JobQuery) -> str:
        """One stored state's condition (`state` is one of STORED_STATES) in `query`."""
        return f"state = '{state}'" if self.state_literal else self.q["find_state"]

    def find_jobs(self, query: JobQuery) -> JobPage:
        return self.run(self.find_plan(query))  # type: ignore[no-any-return]

    def find_plan(self, query: JobQuery) -> Plan[JobPage]:
        position: dict[str, Any] = decode_cursor(query.cursor, is_sql_position) or {}
        conditions: list[str] = []
        params: dict[str, Any] = {"limit": query.limit}
        for name in ("queue", "task", "chunk"):
            value = getattr(query, name)
            if value is not None:
                conditions.append(self.q[f"find_{name}"])
                params[name] = value
        if query.tag is not None:
            conditions.append(self.q["find_tag"])
            params["tag"] = tag_text(query.tag)
        if query.state in (JobState.SCHEDULED, JobState.QUEUED):
            conditions.append(self.q["find_scheduled" if query.state == JobState.SCHEDULED else "find_due"])
        if "after" in position:
            conditions.append(self.q["find_after"])
            params["after"] = int(position["after"])
        how: str | None = None
        carry: dict[str, Any] = {}
        scanned, complete = None, True
        if query.text:
            condition, more, how, carry = yield from self.text_condition(query, position)
            conditions.append(condition)
            params.update(more)
            scanned, complete = carry.pop("scanned", None), carry.pop("complete", True)
        if query.state is not None:
            states: list[str | None] = [STORED[str(query.state)]]
        elif query.chunk is not None:  # its index reads the call's jobs by seq
            states = [None]
        else:
            states = list(STORED_STATES) if query.queue or query.task or not self.seq_ordered else [None]
        found: list[tuple[int, Any]] = []
        for state in states:
            where = conditions + ([self.state_condition(state, query)] if state else [])
            sql = f"{self.q['find_jobs']} {' AND '.join(where) or 'TRUE'} {self.q['find_order']}"
            reply = yield Step(sql, {**params, "state": state} if state else params)
            found += [(-int(row[WIDTH + 1]), row) for row in reply.rows]
        rows = [row for _, row in heapq.nsmallest(query.limit, found, key=lambda pair: pair[0])]
        jobs = [job_of(row) for row in rows]
        if query.state is not None:  # scheduled and queued share a stored state
            jobs = [job for job in jobs if job.state == query.state]
        cursor = encode_cursor({"after": int(rows[-1][WIDTH + 1]), **carry}) if len(rows) == query.limit else None
        return JobPage(jobs, cursor, how, scanned, complete)
