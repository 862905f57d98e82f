"""Rate limits: ``@app.task(rate="100/m")``, per key with ``rate_key="customer:{customer_id}"``.

Enforced in the store, so across every worker and host: each limit key has a "next free
time" (GCRA, the generic cell rate algorithm: one number per key, no counters to reset
and no window edges). A job that is leased asks the store for a turn (`rate_take`): a
turn now runs it; a turn in the future is *reserved* for that job (a kv record named by
the limit key and the job id) and the job is snoozed until then, its attempt not
counted. When it comes back it runs on its reservation without asking again. So a
backlog is spread over the future in leasing order, each waiting job is leased about
twice, and no worker polls or spins while jobs wait for their turns.

Turns are `period / count` apart ("100/m": one every 0.6 s), so any window of one period
holds at most `count` turns; a job runs at its turn, or later if every worker is busy.
A job that comes back more than half a turn after its reservation takes a new turn
rather than run next to the following turn's job: so every run starts within half a turn
of its own turn, and any window of one period holds at most `count + 1` starts. A chunk
task's item may come back up to its Chunk.wait later still (it waits that long for the
call), so its runs start within half a turn plus that wait of their turns.
Why GCRA and not a fixed window: a fixed window lets `count` jobs run at the end of one
minute and `count` more at the start of the next (2x in a few seconds), which is what a
provider's quota usually forbids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..values import Rate

if TYPE_CHECKING:
    from ..backends.base import Backend

GRANTS = "rate-turn"  # kv namespace: "<limit key>|<job id>" -> the turn reserved for that job
EARLY = 0.002  # a turn this close counts as now (clock rounding between store calls)


def take_turn(backend: Backend, rate: Rate, key: str, job_id: str, late_ok: float = 0.0) -> Turn:
    """This job's turn (a wait of 0: run now). A job that holds a reservation runs on it;
    otherwise it takes the next turn, reserved for it if in the future. A turn reserved
    under a faster rate than today's (declared lower since) is given up, so the lower
    rate holds from then on: the job takes a turn at the new rate. `late_ok`: seconds
    more than half a turn that a job may come back late and still run on its turn (a
    chunk task's item, which waits up to its Chunk.wait for the call after its lease)."""
    name = f"{key}|{job_id}"
    held = backend.kv_get(GRANTS, name)
    if held is not None:
        reserved, _, interval = held.decode().partition(" ")
        wait = float(reserved) - backend.now()
        slower = float(interval or rate.interval) < rate.interval * (1 - 1e-9)
        if wait > EARLY and not slower:
            return Turn(wait, float(reserved))  # back too early (e.g. released by a stopping worker)
        backend.kv_delete(GRANTS, name)
        if -wait <= rate.interval / 2 + late_ok and not slower:
            return NOW
        # back more than half a turn late (busy workers, a polling store): running now
        # would start close to the next turn's run, so it takes a new turn instead
    turn, now = backend.rate_take(key, rate.interval)
    if turn - now <= EARLY:
        return NOW
    # kept a period past the turn, and as long again as the job may come back late and still
    # run on it: a grant gone before its job comes back makes it take a new turn, later still
    backend.kv_put(GRANTS, name, f"{turn!r} {rate.interval!r}".encode(), ttl=turn - now + rate.period + late_ok)
    return Turn(turn - now, turn)


@dataclass(frozen=True)
class Turn:
    """When a job may run: in `wait` seconds, at `at` by the store's clock."""

    wait: float
    at: float


NOW = Turn(0.0, 0.0)


@dataclass(frozen=True)
class Rated:
    """A rate that holds for a job: its turns' key, and the limit names that change it."""

    rate: Rate
    key: str
    changed_by: tuple[str, ...]
