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
of its own turn, and any window of one period holds at most `count + 1` starts.
A job held for a turn or by a pause is also noted in the store under the limit names
whose change would free it (`limit_hold`): clearing or changing that rate, or ending that
pause, makes every noted job due at once (`limit_release`, runtime.py), and it asks the
limits that hold then when it comes back.
Why GCRA and not a fixed window: a fixed window lets `count` jobs run at the end of one
minute and `count` more at the start of the next (2x in a few seconds), which is what a
provider's quota usually forbids.
"""

from __future__ import annotations

import inspect
import logging
import re
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from ..context import current_job
from ..errors import Backoff, Snooze
from ..job import Job, JobState
from ..middleware import Middleware
from ..values import MAX_PAUSE, capped
from .runtime import Known, pause, queue_limit
from .values import Rate

if TYPE_CHECKING:
    from ..backends.base import Backend, Enqueue, Outcome

log = logging.getLogger("deferq.limits")

GRANTS = "rate-turn"  # kv namespace: "<limit key>|<job id>" -> the turn reserved for that job
EARLY = 0.002  # a turn this close counts as now (clock rounding between store calls)
STORE_DOWN_SNOOZE = 1.0  # seconds a job waits when the store cannot give it a turn
CONCURRENCY_WAIT = 1.0  # seconds a job waits before asking again for a slot of its key


def key_template(value: Any, name: str = "rate_key") -> str:
    """A limit key: text with {argument} fields named after the task's parameters."""
    if not isinstance(value, str) or not 1 <= len(value) <= 200:
        raise ValueError(f"{name} must be text of 1-200 characters, got {value!r:.60}")
    for _, field, spec, conversion in string.Formatter().parse(value):
        if field is not None and (not field.isidentifier() or spec or conversion):
            raise ValueError(f"{name} fields must be plain argument names like {{customer_id}}, got {{{field}}}")
    return value


def fields_of(template: str) -> list[str]:
    return [field for _, field, _, _ in string.Formatter().parse(template) if field]


def could_fill(template: str, key: str) -> bool:
    """Whether some call could fill `template` to make `key` (each {field} any text)."""
    pattern = "".join(re.escape(text) + (".+" if field is not None else "")
                      for text, field, _, _ in string.Formatter().parse(template))
    return re.fullmatch(pattern, key, re.DOTALL) is not None


def check_fields(name: str, template: str | None, task: str, signature: inspect.Signature) -> None:
    """When a task is declared: every {field} of its key template must be one of its parameters."""
    unknown = [f for f in fields_of(template) if f not in signature.parameters] if template else []
    if unknown:
        raise ValueError(f"{name} {template!r} names {unknown[0]!r}, which is not a parameter of {task}")


def filled(template: str, signature: inspect.Signature, task: str, args: Any, kwargs: dict[str, Any],
           what: str) -> str:
    """A key template filled from one call's arguments (limit keys, fair keys); ValueError
    (one sentence) when the call cannot fill it."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"{what} {template!r} of {task}: the call does not fit the task ({exc})") from None
    bound.apply_defaults()
    return template.format_map({name: _text(value) for name, value in bound.arguments.items()})


@dataclass(frozen=True)
class Limited:
    """A task's limits, and how to name their keys from one call."""

    task: str
    signature: inspect.Signature
    rate: Rate | None = None
    rate_key: str | None = None
    concurrency: int | None = None
    concurrency_key: str | None = None

    def key(self, template: str | None, args: Any, kwargs: dict[str, Any]) -> str:
        """A limit's key for one call (the task's name without a template); ValueError
        (one sentence) when the call cannot fill the template."""
        if template is None:
            return self.task
        return filled(template, self.signature, self.task, args, kwargs, "the limit key")

    def pause_key(self, args: Any, kwargs: dict[str, Any]) -> str:
        """What `deferq.Backoff` pauses: the rate's key, else the concurrency's, else the task."""
        return self.key(self.rate_key or self.concurrency_key, args, kwargs)

    def to_dict(self) -> dict[str, Any]:
        """As a worker's heartbeat tells the console (the Limits page) what its code declares."""
        return {"rate": self.rate.text if self.rate else None, "rate_key": self.rate_key,
                "concurrency": self.concurrency, "concurrency_key": self.concurrency_key}

    def check(self, args: Any, kwargs: dict[str, Any]) -> None:
        for template in (self.rate_key, self.concurrency_key):
            if template is not None:
                self.key(template, args, kwargs)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def limited(task: str, fn: Callable[..., Any], **limits: Any) -> Limited:
    """Checked when the task is declared: every {field} must be one of its parameters."""
    signature = inspect.signature(fn)
    for name in ("rate_key", "concurrency_key"):
        check_fields(name, limits.get(name), task, signature)
    return Limited(task, signature, **limits)


class Limits(Middleware):
    """Installed by every App: a task's declared limits (`limits`, the registry's, by task
    name), the limits set at run time and the pauses (runtime.py: a copy read again at
    most once a second). A job with neither costs a dict lookup. A concurrency slot is
    taken before a rate's turn (a turn is never spent on a job that cannot run), and
    given back after the run, whatever its outcome."""

    needs_settled_job = False  # after_settle reads the job's id and the exception alone

    def __init__(self, limits: dict[str, Limited], backend: Callable[[], Backend]) -> None:
        self.limits = limits
        self.backend = backend
        self.known = Known()
        self.held: dict[str, list[HeldSlot]] = {}  # holder -> the slots its run took (dict ops are atomic)
        self._plain: dict[str, Limited] = {}  # task name -> no declared limit (keys: the task's name)
        self.holding = False  # a job was held on the current copy of the store's limits

    def before_enqueue(self, items: list[Enqueue]) -> list[Enqueue]:
        for item in items:  # a key that cannot be named is refused now, not at run time
            limit = self.limits.get(item.job.task)
            if limit is not None:
                limit.check(item.job.args, item.job.kwargs)
        return items

    def limit_of(self, job: Job) -> Limited:
        limit = self.limits.get(job.task) or self._plain.get(job.task)
        if limit is None:
            limit = self._plain[job.task] = Limited(job.task, inspect.Signature())
        return limit

    def before_run(self, job: Job) -> None:
        known = self.known
        known.refresh(self.backend)
        if known.loosened:
            self.give_back(known)
        if known.empty and job.task not in self.limits:
            return
        limit = self.limit_of(job)
        try:
            limit.check(job.args, job.kwargs)
        except ValueError:
            return  # the call does not fit the task: running it says so
        rate_key = limit.key(limit.rate_key, job.args, job.kwargs)
        slot_key = limit.key(limit.concurrency_key, job.args, job.kwargs)
        queue_key = queue_limit(job.queue)
        names = (rate_key, slot_key, job.task)  # the most specific first
        left, paused = known.pause_left((*names, queue_key))
        if left > 0:
            self.hold(job, (paused,), Turn(left, time.time() + left + known.offset),
                      f"the limits of {job.task} are paused for {left:.3g}s")
        on_queue = known.overrides.get(queue_key)
        slots = [(slot_key, known.concurrency(names, limit.concurrency)),
                 (queue_key, on_queue.concurrency if on_queue else None)]
        keys = [limit.key(t, job.args, job.kwargs) for t in (limit.rate_key, limit.concurrency_key) if t]
        turns: list[Rated] = []
        override, set_on = known.rate(keys, job.task)
        if override is not None and override.rate is not None:  # set at run time: turns of its own
            # a rate set on a key changes with that key; one set on the task with the task or a key
            changed_by = (set_on,) if set_on else tuple(dict.fromkeys((*keys, job.task)))
            turns.append(Rated(override.rate, (set_on or rate_key) + override.turns, changed_by))
        elif limit.rate is not None:
            turns.append(Rated(limit.rate, rate_key, tuple(dict.fromkeys((*keys, job.task)))))
        if on_queue is not None and on_queue.rate is not None:
            turns.append(Rated(on_queue.rate, queue_key + on_queue.turns, (queue_key,)))
        try:
            self.take_slots(job, [(key, n) for key, n in slots if n is not None])
            self.take_turns(job, turns)
        except Snooze:
            raise  # the slots taken are given back after the run (after_run), as for any run
        except Exception as exc:  # noqa: BLE001 - no turn, no run: try again shortly
            log.warning("job %s (%s): its limits could not be checked (%s); trying again in %gs",
                        job.id, job.task, exc, STORE_DOWN_SNOOZE)
            raise Snooze(STORE_DOWN_SNOOZE, "limits: store unreachable") from None

    def give_back(self, known: Known) -> None:
        """A limit loosened (its rate changed, its pause ended): `app.limits` gave back the
        jobs it held then, but this worker may have held more on its older copy since:
        those settled are given back now, those not yet when they are (after_settle)."""
        names, known.loosened = known.loosened, set()
        for name in sorted(names):
            try:
                self.backend().limit_release(name)
            except Exception as exc:  # noqa: BLE001 - they wait their time; the next worker may try
                log.warning("limits: the jobs held by %s could not be given back (%s)", name, exc)

    def hold(self, job: Job, names: tuple[str, ...], turn: Turn, why: str) -> NoReturn:
        """Snooze the job until its turn (the store's clock), noted in the store as held by
        `names`: the limit names whose clear, resume or new rate gives it back at once
        (`limit_release`). A store that does not take the note still gets the snooze."""
        try:
            self.backend().limit_hold(names, [(job, turn.at)])
        except Exception as exc:  # noqa: BLE001 - it waits its turn all the same
            log.warning("job %s (%s): its wait could not be noted (%s); a clear or resume of %s will "
                        "not give it back early", job.id, job.task, exc, names[0])
        self.holding = True
        raise Held(turn.wait, why, turn.at, names, self.known.reads)

    def after_settle(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        """A job held on a copy of the limits older than a change that frees it, and
        settled after this worker gave back what that change freed: due now."""
        if isinstance(exc, Held) and self.known.loosened_after(exc.read, exc.names):
            try:
                self.backend().wake(job.id)
            except Exception as exc:  # noqa: BLE001 - it waits its time
                log.warning("job %s (%s) could not be given back (%s)", job.id, job.task, exc)

    def tick(self) -> None:
        """From a worker's keeper (a few times a second): a worker that held jobs on its
        copy of the store's limits reads them again once the copy is a second old, even if
        no job starts by then (every job it has may be held), and gives back what a limit
        loosened meanwhile. Nothing for a worker that held none."""
        known = self.known
        if not self.holding or time.monotonic() < known.next_read:
            return
        self.holding = False
        known.refresh(self.backend)
        if known.loosened:
            self.give_back(known)

    def take_slots(self, job: Job, wanted: list[tuple[str, int]]) -> None:
        """A slot of each concurrency limit in `wanted` (the task's, then the queue's); a
        Snooze when one is full (after_run gives back those taken before it)."""
        if not wanted:
            return
        backend, holder = self.backend(), holder_of(job)
        held = self.held[holder] = []
        for key, limit in wanted:
            fence = take_slot(backend, key, limit, job)
            if not fence:
                raise Snooze(CONCURRENCY_WAIT, f"all {limit} slot(s) of {key} are taken")
            held.append(HeldSlot(backend, key, holder, fence))
        running = current_job()
        if running is not None:  # its fence and holds_slot() for the task and its worker (the first slot)
            running.control.slot = held[0]

    def take_turns(self, job: Job, rates: list[Rated]) -> None:
        """A turn of each rate (the task's, the queue's); held until the latest when one is
        later than now. Each later turn is reserved for the job, so it runs when it comes
        back; a turn of one rate that came due while it waited for the other's and passed
        by more than half a turn is taken anew (take_turn)."""
        latest, why = NOW, ""
        held_by: tuple[str, ...] = ()
        for rated in rates:
            turn = take_turn(self.backend(), rated.rate, rated.key, job.id)
            if turn.wait > latest.wait:
                latest, held_by = turn, rated.changed_by
                why = f"rate {rated.rate.text} of {rated.key.partition('@')[0]}: its turn is in {turn.wait:.3g}s"
        if latest.wait > 0:
            self.hold(job, held_by, latest, why)

    def after_run(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        if isinstance(exc, Backoff):
            self.back_off(job, exc.delay)
        for slot in self.held.pop(holder_of(job), ()) if self.held else ():  # most runs hold no slot
            if not self.backend().slot_release(slot.key, slot.holder):
                slot.report_lost(job, "while it ran")

    def back_off(self, job: Job, seconds: float) -> None:
        """Pause the job's limit key for every worker (this one at once, the others within
        a second); a store that does not answer leaves the pause to this job alone. At
        most MAX_PAUSE: a Retry-After of inf, or of a date in the year 9999, pauses that long
        (the job's runner said so when it clamped the job's own wait)."""
        seconds = capped(seconds, MAX_PAUSE)
        try:
            name = self.limit_of(job).pause_key(job.args, job.kwargs)
        except ValueError:
            return
        try:
            pause(self.backend(), name, seconds)
        except Exception as exc:  # noqa: BLE001 - the job still waits; others find out on their own
            log.warning("job %s (%s): the pause of %s could not be stored (%s)", job.id, job.task, name, exc)
            return
        self.known.paused[name] = max(self.known.paused.get(name, 0.0), time.time() + seconds)


def take_turn(backend: Backend, rate: Rate, key: str, job_id: str) -> Turn:
    """This job's turn (a wait of 0: run now). A job that holds a reservation runs on it;
    otherwise it takes the next turn, reserved for it if in the future. A turn reserved
    under a faster rate than today's (declared lower since) is given up, so the lower
    rate holds from then on: the job takes a turn at the new rate."""
    name = f"{key}|{job_id}"
    held = backend.kv_get(GRANTS, name)
    if held is not None:
        reserved, _, interval = held.decode().partition(" ")
        wait = float(reserved) - backend.now()
        slower = float(interval or rate.interval) < rate.interval * (1 - 1e-9)
        if wait > EARLY and not slower:
            return Turn(wait, float(reserved))  # back too early (e.g. released by a stopping worker)
        backend.kv_delete(GRANTS, name)
        if -wait <= rate.interval / 2 and not slower:
            return NOW
        # back more than half a turn late (busy workers, a polling store): running now
        # would start close to the next turn's run, so it takes a new turn instead
    turn, now = backend.rate_take(key, rate.interval)
    if turn - now <= EARLY:
        return NOW
    backend.kv_put(GRANTS, name, f"{turn!r} {rate.interval!r}".encode(), ttl=turn - now + rate.period)
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


class Held(Snooze):
    """A job snoozed by a limit until a moment of the store's clock (its outcome's `due`),
    noted under `names`, on the worker's copy of the limits number `read`."""

    def __init__(self, delay: float, reason: str, due: float, names: tuple[str, ...], read: int) -> None:
        super().__init__(delay, reason)
        self.due, self.names, self.read = due, names, read


def holder_of(job: Job) -> str:
    return f"{job.id}:{job.attempts}"


@dataclass
class HeldSlot:
    """The concurrency slot a run took, and the fence it was granted with."""

    backend: Backend
    key: str
    holder: str
    fence: int
    reported: bool = False  # its loss was logged (once: by the heartbeat or at the end)

    def held(self) -> bool:
        """Still ours: a holder whose run was declared over (its lease expired) is
        dropped by the next job of the key, and a later grant has a larger fence."""
        return self.backend.slot_holders(self.key).get(self.holder) == self.fence

    def report_lost(self, job: Job, when: str) -> None:
        if not self.reported:
            self.reported = True
            log.warning("job %s of task %s lost its concurrency slot %s (fence %d) %s; another job may "
                        "be running under the same key", job.id, job.task, self.key, self.fence, when)


def take_slot(backend: Backend, key: str, limit: int, job: Job) -> int:
    """A slot of the concurrency limit `key` for this run of `job`. Holders whose run
    is over (the job is no longer active with that attempt: finished, or its worker died
    and its lease expired) are dropped first, so no slot outlives its lease. A slot is
    a lease like any other: a worker frozen past its lease may still be running the
    job it lost. Its worker warns when it resumes (Worker._heartbeat), and the fence
    lets the systems the task writes to refuse the stale writer.
    Returns the slot's fence (0: all are taken)."""
    holder = holder_of(job)
    gone = [h for h in backend.slot_holders(key) if h != holder and not _runs(backend, h)]
    return backend.slot_take(key, limit, holder, gone)


def _runs(backend: Backend, holder: str) -> bool:
    job_id, _, attempt = holder.rpartition(":")
    job = backend.get(job_id)
    return job is not None and job.state == JobState.ACTIVE and str(job.attempts) == attempt
