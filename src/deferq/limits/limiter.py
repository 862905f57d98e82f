"""The Limits middleware: before a run, the limits that hold for the job (its task's,
its key's, its queue's, the pauses) are asked for a concurrency slot (slots.py) and a
rate's turn (rate.py); a job that must wait is snoozed, its attempt not counted.

A job held for a turn or by a pause is also noted in the store under the limit names
whose change would free it (`limit_hold`): clearing or changing that rate, or ending that
pause, makes every noted job due at once (`limit_release`, runtime.py), and it asks the
limits that hold then when it comes back.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from ..context import current_job
from ..errors import Backoff, Snooze
from ..job import Job
from ..middleware import Middleware
from ..registry import Limited
from ..values import MAX_PAUSE, capped
from .rate import NOW, Rated, Turn, take_turn
from .runtime import Known, pause, queue_limit
from .slots import HeldSlot, holder_of, take_slot

if TYPE_CHECKING:
    from ..backends.base import Backend, Enqueue, Outcome

log = logging.getLogger("deferq.limits")

STORE_DOWN_SNOOZE = 1.0  # seconds a job waits when the store cannot give it a turn
IDLE_TICK = 0.5  # seconds between a worker's keeper ticks, at most (worker.py)
CONCURRENCY_WAIT = 1.0  # seconds a job waits before asking again for a slot of its key


class Limits(Middleware):
    """Installed by every App: a task's declared limits (`limits`, the registry's, by task
    name), the limits set at run time and the pauses (runtime.py: a copy read again at
    most once a second). A job with neither costs a dict lookup. A concurrency slot is
    taken before a rate's turn (a turn is never spent on a job that cannot run), and
    given back after the run, whatever its outcome.

    Idle (the chain skips it: a job runs without entering limits/) while no task declares
    a limit and none was set at run time or paused since this process started; the
    worker's keeper then reads the store's limits every second (`worker_tick`), and a limit set
    at run time (`deferq limits set`, the console, `app.limits`) wakes it for good.
    `changed`: the chain's, told when it wakes."""

    needs_settled_job = False  # after_settle reads the job's id and the exception alone

    def __init__(self, limits: dict[str, Limited], backend: Callable[[], Backend],
                 changed: Callable[[], None] = lambda: None) -> None:
        self.limits = limits
        self.backend = backend
        self.changed = changed
        self.awake = False  # a limit was set or paused while it ran: never idle again
        self.known = Known()
        self.held: dict[str, list[HeldSlot]] = {}  # holder -> the slots its run took (dict ops are atomic)
        self._plain: dict[str, Limited] = {}  # task name -> no declared limit (keys: the task's name)
        self.holding = False  # a job was held on the current copy of the store's limits

    @property
    def idle(self) -> bool:  # type: ignore[override]
        return not self.awake and not self.limits

    def wake(self) -> None:
        if not self.awake:
            self.awake = True
            self.changed()

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
            self.take_turns(job, turns, limit.late_ok)
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

    def worker_tick(self) -> None:
        """From a worker's keeper (a few times a second): a worker that held jobs on its
        copy of the store's limits reads them again once the copy is a second old, even if
        no job starts by then (every job it has may be held), and gives back what a limit
        loosened meanwhile. Nothing for a worker that held none. While idle (no job asks
        for limits), it reads them every second, to wake once one is set or paused."""
        known = self.known
        if self.idle:  # a keeper ticks every half second or sooner: each read within a second of the last
            if time.monotonic() >= known.next_read - IDLE_TICK:
                known.next_read = 0.0
                known.refresh(self.backend)
                if not known.empty:
                    self.wake()
            return
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

    def take_turns(self, job: Job, rates: list[Rated], late_ok: float = 0.0) -> None:
        """A turn of each rate (the task's, the queue's); held until the latest when one is
        later than now. Each later turn is reserved for the job, so it runs when it comes
        back; a turn of one rate that came due while it waited for the other's and passed
        by more than half a turn is taken anew (take_turn)."""
        latest, why = NOW, ""
        held_by: tuple[str, ...] = ()
        for rated in rates:
            turn = take_turn(self.backend(), rated.rate, rated.key, job.id, late_ok)
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
        self.wake()  # this worker at once: its next jobs of the key wait too


class Held(Snooze):
    """A job snoozed by a limit until a moment of the store's clock (its outcome's `due`),
    noted under `names`, on the worker's copy of the limits number `read`."""

    def __init__(self, delay: float, reason: str, due: float, names: tuple[str, ...], read: int) -> None:
        super().__init__(delay, reason)
        self.due, self.names, self.read = due, names, read
