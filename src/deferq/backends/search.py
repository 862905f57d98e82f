"""Listing and searching jobs at scale: the store's part of GET /v1/jobs.

`find_jobs(JobQuery)` answers one page of jobs that match a filter (state, queue, task, tag,
chunk call)
and, optionally, a text to find in their arguments and error, with a keyset cursor to
the next page: a page costs the same on the first page and the thousandth, however many
jobs the store holds.

Each store lists in the order its indexes give cheaply, newest first: SQL stores by
enqueue order (a page is one range of an index on (state), (queue, state) or (task,
state)); Redis by each state's time (due, lease or finish time: its sorted sets), a
state at a time. A cursor is opaque: only the store that made it reads it.

Text is matched as a case-insensitive substring of the arguments (JSON), the error and
the unique key where the store has a text index (SQLite FTS5 trigram, PostgreSQL
pg_trgm; PostgreSQL without pg_trgm: whole words, tsvector). Elsewhere (MySQL, Redis, and a task filter on
Redis) the newest `window` jobs are looked at, and the page says so (`scanned`,
`complete`), so a caller never takes a partial answer for a whole one.
"""

from __future__ import annotations

import base64
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from ..errors import ConfigError
from ..job import Job, JobState
from ..values import storable

WINDOW = 10_000  # jobs a scan looks at, at most, unless told otherwise
# How an encrypted value's text starts (encryption/envelope.py takes it from here): its
# base64 finds nothing meant, so a search leaves it out, on every store alike.
ENCRYPTED = "$enc:"
ENCRYPTED_RAW = (b'[[],{"$enc":"$enc:', ENCRYPTED.encode())  # a stored payload of encrypted arguments, a value
MIN_TEXT = 3  # characters: a trigram index needs three


@dataclass(frozen=True, slots=True)
class JobQuery:
    state: JobState | None = None
    queue: str | None = None
    task: str | None = None
    tag: str | None = None  # jobs with this tag among theirs
    chunk: str | None = None  # the jobs a chunk call last ran (Job.chunk_call)
    text: str = ""
    cursor: str | None = None
    limit: int = 50
    window: int = WINDOW

    def __post_init__(self) -> None:
        for name in ("queue", "task", "tag", "chunk", "text"):
            value = getattr(self, name)
            if value is not None and not storable(value):
                raise ConfigError(f"the {name} to find, {value!r:.60}, holds NUL or a lone surrogate, which no "
                                  "stored job holds")


@dataclass(slots=True)
class JobPage:
    jobs: list[Job]
    cursor: str | None = None  # the next page's; None: this was the last
    text_search: str | None = None  # how text was matched: "index" | "words" | "scan" (None: no text)
    scanned: int | None = None  # jobs looked at, when a window was scanned
    complete: bool = True  # False: a scan stopped at its window; older jobs were not looked at
    missing: list[str] = field(default_factory=list)  # parts of the store that did not answer


class SearchStore(ABC):
    @abstractmethod
    def find_jobs(self, query: JobQuery) -> JobPage:
        """One page of the jobs matching `query`, newest first (module doc)."""


RETRYING_ROUNDS = 8  # store pages one page of retrying (or waiting) jobs reads at most

# The filters that are a part of the scheduled jobs, told apart by a field of the job
# itself (no read per job): `retrying`, scheduled jobs that failed before; `waiting`,
# scheduled jobs in a durable wait (job.wait_for, Job.waits_for).
SCHEDULED_KINDS: dict[str, Callable[[Job], bool]] = {
    "retrying": lambda job: job.attempts > 0,
    "waiting": lambda job: job.waits_for is not None,
}


def find_scheduled(store: SearchStore, find: JobQuery, kind: str) -> JobPage:
    """Scheduled jobs of one of SCHEDULED_KINDS, from the store's pages of scheduled
    jobs: each store page asks for no more than the places left, so the cursor of the last
    one is exactly where the next page goes on. Stops at `find.window` jobs looked at, or
    after a few store pages (a shorter page, its cursor going on: the next page goes on)."""
    wanted = SCHEDULED_KINDS[kind]
    found: list[Job] = []
    cursor, scanned, page = find.cursor, 0, None
    for _ in range(RETRYING_ROUNDS):
        if len(found) >= find.limit or scanned >= find.window:
            break
        size = min(find.limit - len(found), find.window - scanned)
        page = store.find_jobs(replace(find, state=JobState.SCHEDULED, cursor=cursor, limit=size))
        found += [job for job in page.jobs if wanted(job)]
        scanned += page.scanned or len(page.jobs)
        cursor = page.cursor
        if cursor is None or not page.complete:
            break
    return JobPage(found, cursor, page.text_search if page else None, scanned, page is None or page.complete)


def find_retrying(store: SearchStore, find: JobQuery) -> JobPage:
    """Scheduled jobs that failed before (attempts > 0): `find_scheduled`."""
    return find_scheduled(store, find, "retrying")


def encode_cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


Valid = Callable[[Any], bool]  # whether a decoded cursor has the shape its store makes
_REFUSED = "cursor is not one this store gave: start again without it"


def decode_cursor(cursor: str | None, valid: Valid) -> Any:
    """A cursor's value; None for none. A cursor this store did not make (`valid` says
    whether its shape is one the store makes: a cursor comes back from clients, who may
    have changed it) raises ValueError."""
    if not cursor:
        return None
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError):
        raise ValueError(_REFUSED) from None
    if value is None or not valid(value):
        raise ValueError(_REFUSED)
    return value


def is_int(value: Any) -> bool:
    """A whole number a store's integer column holds (not a bool)."""
    return type(value) is int and -(2**63) <= value < 2**63


def is_score(value: Any) -> bool:
    """A finite number (a sorted set's score), not a bool."""
    return type(value) in (int, float) and math.isfinite(value)


def text_matches(job: Job, needle: str) -> bool:
    """The scanning stores' text match: a substring, without case, of the arguments as
    JSON, the error or the key (encrypted arguments and errors left out)."""
    needle = needle.lower()
    if any(needle in text.lower() for text in (job.error, job.key) if text and not text.startswith(ENCRYPTED)):
        return True
    if not job.args and type(job.kwargs.get("$enc")) is str and job.kwargs["$enc"].startswith(ENCRYPTED):
        return False
    return needle in orjson.dumps([job.args, job.kwargs]).decode().lower()


def raw_matches(query: JobQuery, task: bytes | None, texts: Iterable[bytes | None]) -> bool:
    """`text_matches` and the task filter (unless `task` is None: decided elsewhere) on a
    job's stored fields (payload, error, key), not decoded: a scan reads these first and
    decodes only the jobs that pass."""
    if query.task is not None and task is not None and task.decode() != query.task:
        return False
    needle = query.text.lower()
    return not needle or any(needle in raw.decode(errors="replace").lower() for raw in texts
                             if raw and not raw.startswith(ENCRYPTED_RAW))


def tag_text(tag: str) -> str:
    """A tag as the stored JSON array holds it: quoted (a tag has no quote, comma,
    backslash or control character, so JSON writes it as itself), so a SQL store finds
    it as a substring, whole, never as part of a longer tag."""
    return f'"{tag}"'


def like_pattern(text: str) -> str:
    """`text` as a LIKE pattern matching it anywhere (its % _ and \\ taken literally)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


Pager = Callable[[Any, int], list[tuple[Job | None, Any]]]


def scan_page(query: JobQuery, pages: Pager, valid: Valid) -> JobPage:
    """A page made by filtering, with what the store cannot select by (the task, the
    text), the jobs `pages(position, size)` gives: up to `size` jobs after `position`
    (None: from the newest), each with the position right after it; None for a job the
    pager already found not to match (read in part: cheaper). Stops at `query.limit`
    matches, or after `query.window` jobs (the page says so). `valid`: the pager's
    positions' shape (decode_cursor)."""
    filtering = query.task is not None or query.tag is not None or query.chunk is not None or bool(query.text)
    size = min(query.window, 500) if filtering else query.limit
    position = decode_cursor(query.cursor, valid)
    found: list[Job] = []
    scanned = 0
    how = "scan" if query.text else None
    while True:
        batch = pages(position, size)
        for job, after in batch:
            scanned += 1
            position = after
            if (
                job is not None
                and query.task in (None, job.task)
                and (query.tag is None or query.tag in job.tags)
                and query.chunk in (None, job.chunk_call)
                and (not query.text or text_matches(job, query.text))
            ):
                found.append(job)
            if len(found) == query.limit or scanned >= query.window:
                complete = len(found) == query.limit or not filtering
                return JobPage(found, encode_cursor(after), how, scanned if filtering else None, complete)
        if len(batch) < size:
            return JobPage(found, None, how, scanned if filtering else None, True)
