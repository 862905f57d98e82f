"""Sans-I/O plans: one description of each store operation for every driver.

A plan is a generator that yields statements (`Step`), receives their replies
(`Reply`) and returns the operation's answer. It does no I/O itself, so the same
plan runs on a sync driver (`drive`), an async one (`drive_async`: PostgreSQL's
`enqueue_many_async`), a pooled connection or the caller's own (transactional
enqueue). Where transactions begin and end is part of the plan (`begin`, `commit`);
how a driver honours that is its backend's business.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")


class Step(NamedTuple):
    """One statement of a plan.

    With `many`, `params` is a list: one run per entry, and the reply counts rows per
    entry (`counts`) and lists their result rows in entry order. With `batch` as well,
    only the total row count is wanted, so the driver may send the runs as one batch
    (a multi-row INSERT, sqlite3's executemany). `begin` / `commit` open / close a
    transaction around the statement, in the same round trip where the driver can.

    Steps and replies are named tuples: as immutable as frozen dataclasses, and made
    in a third of the time (every statement of every operation makes one of each).
    """

    sql: str
    params: Any = None
    many: bool = False
    batch: bool = False
    begin: bool = False
    commit: bool = False


class Reply(NamedTuple):
    rows: Sequence[tuple[Any, ...]] = ()
    rowcount: int = 0
    counts: Sequence[int] = ()  # per entry, for `many`


Plan = Generator[Step, Reply, T]


def drive(plan: Plan[T], execute: Callable[[Step], Reply]) -> T:
    """Run a plan with a sync executor."""
    reply: Reply | None = None
    while True:
        try:
            step = plan.send(reply)  # type: ignore[arg-type]
        except StopIteration as done:
            return done.value
        reply = execute(step)


async def drive_async(plan: Plan[T], execute: Callable[[Step], Awaitable[Reply]]) -> T:
    """Run a plan with an async executor."""
    reply: Reply | None = None
    while True:
        try:
            step = plan.send(reply)  # type: ignore[arg-type]
        except StopIteration as done:
            return done.value
        reply = await execute(step)
