"""Fair queues (options.fair_key): start-time fair queueing, for every store.

A job with a fair key that is due when it is stored gets a virtual time: its key's
next one in its queue and priority (the key's last job's virtual time + 1 / weight),
or the queue's floor when that is later. The floor is the smallest virtual time still
waiting at that queue and priority, or, when none waits, the largest a key has reached:
so a key with no work keeps no credit and a newcomer starts level with the keys being
served. Such jobs are stored at their priority + `FAIR` (a level of their own, out of
the plain claim's reach, as `base.BEHIND` is) and claimed by (virtual time, enqueue
order): each key with work has one job per round, whatever its backlog.

Jobs without a key keep their level and their order (due time, enqueue order). A claim
takes the two levels of a priority in turn (`claim_levels`), so neither kind waits
behind the other's backlog. A fair job due later (a delay, `at`, a retry or a snooze)
waits at its plain level and is claimed in due-time order among the jobs without a key
once due: a virtual time given then would need the store to move it at its due time.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Enqueue

FAIR = 10  # + priority: a due job with a fair key, claimed by virtual time (see base.LEVELS)
_turns = itertools.cycle((False, True))  # which kind a claim tries first, alternately


def claim_levels(priorities: Sequence[int], fair_first: bool | None = None) -> tuple[int, ...]:
    """The stored levels a claim reads, in order: each priority's plain and fair levels,
    the fair one first on every other claim."""
    first = next(_turns) if fair_first is None else fair_first
    levels: list[int] = []
    for p in priorities:
        levels += (p + FAIR, p) if first else (p, p + FAIR)
    return tuple(levels)


def levels_of(priorities: Sequence[int]) -> tuple[int, ...]:
    """`claim_levels` of a caller's priorities; levels already chosen (a claim over several
    Redis servers asks each in one order) as they are."""
    if any(p >= FAIR for p in priorities):
        return tuple(priorities)
    return claim_levels(priorities)


def plain_level(level: int) -> int:
    """A stored priority without the fair offset (a fair job retried or due later)."""
    return level - FAIR if (level % (2 * FAIR)) >= FAIR else level


def due_fair(item: Enqueue) -> bool:
    """A job with a fair key that is due when stored (no delay, no `at`): it waits at its
    fair level. One due later waits at its plain level (see above)."""
    return item.job.fair_key is not None and item.delay == 0 and not item.job.run_at


def virtual_times(
    entries: Iterable[tuple[Hashable, str, float]],
    floors: dict[Hashable, float],
    nexts: dict[tuple[Hashable, str], float],
) -> list[float]:
    """The virtual time of each entry (scope, key, weight) in order; `floors` holds each
    scope's floor (a scope is a queue and priority), `nexts` each key's next virtual
    time, updated here."""
    out = []
    for scope, key, weight in entries:
        floor = floors.get(scope, 0.0)
        at = nexts.get((scope, key), floor)
        vtime = at if at > floor else floor
        nexts[(scope, key)] = vtime + 1.0 / weight
        out.append(vtime)
    return out
