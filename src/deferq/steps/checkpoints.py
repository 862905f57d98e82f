"""A running job's durable steps: named checkpoints kept in the store, so that a task
sleeps and waits for events without holding a worker, and resumes after a crash without
redoing a step that finished (`job.step`, `job.sleep`, `job.wait_for`; docs/steps.md).

Everything is kept in the store's small records (`Records`), so it works on every store:
- `deferq.steps:<job id>`: one record per checkpoint, keyed by its name: a step's result,
  a sleep's due time, a wait's event, key and deadline; `<name>\\tdone` the wait's answer
  (the event's data, or a timeout); `<name>\\tfailed` the failed tries of a step with
  its own retries (`StepRetry`). Each is written once: the first writer wins
  (`only_new`), and only by an attempt that still holds the job's lease (the write is
  fenced: `kv_put_leased`, one store call), so every later run reads the same answer.
- `deferq.waiters:<event>\\t<key>`: `<job id>\\t<wait name>` of each job waiting for it.
- `deferq.events`: `<event>\\t<key>` -> the last event sent, kept `keep` seconds, so an
  event sent before a job starts waiting is not lost.

A sleep or a wait leaves the worker as a snooze (`Suspend`): the job is stored again,
due at the end of the sleep or the wait's timeout, its attempt not counted; a wait's
snooze also stores its event and key on the job (`Job.waits_for`: lists filter
`waiting` by it). An event makes a waiting job due at once (`wake`).
"""

from __future__ import annotations

import inspect
import logging
import math
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ..attempt.pauses import pause_at
from ..backends.base import STEPS as STEPS  # re-exported: + a job id
from ..backends.base import Backend, Outcome, OutcomeKind
from ..context import StepRetry
from ..encryption.envelope import Unreadable
from ..encryption.jobs import Sealer, checkpoint_fields, event_bound, sealed_result, step_bound
from ..errors import ConfigError, DeferqError, PayloadError, Snooze, StepMismatch
from ..job import Job, carried, dumps, loads
from .names import KINDS as KINDS  # re-exported
from .names import NAME_LIMIT as NAME_LIMIT
from .names import checked_name as checked_name
from .names import function_name as function_name
from .patches import patched
from .undo import COMPENSATING, Compensating, checked_undo, compensate, must_compensate, with_undo

log = logging.getLogger("deferq.worker")

WAITERS = "deferq.waiters:"  # + event \t key
EVENTS = "deferq.events"
DONE = "\tdone"  # + the name of a wait: its answer
FAILED = "\tfailed"  # + the name of a step with its own retries: its failed tries so far
RESULT_LIMIT = 64 * 1024  # bytes of a step's stored result (JSON)
EVENT_LIMIT, KEY_LIMIT = 60, 100  # characters (the SQL stores' key columns)
CLOCK_REUSE = 30.0  # seconds a remote store's clock offset is reused (store_now)
_clock_offsets: weakref.WeakKeyDictionary[Backend, tuple[float, float]] = weakref.WeakKeyDictionary()
# Outcomes after which a job's checkpoints are kept only as long as its result (a dead
# job keeps them: `deferq dead retry` resumes it where it stopped).
ENDS_STEPS = frozenset({OutcomeKind.SUCCEEDED.value, OutcomeKind.CANCELLED.value})


class Suspend(Snooze):
    """The job leaves the worker until its sleep ends or its event comes (a snooze:
    the attempt is not counted). Let it through: a task that catches it stays here.
    `waits_for`: "<event>\t<key>" of a wait, stored on the job by its outcome's settle
    (what lists filter as `waiting`); `wait`: the wait's name (`wake_answered`)."""

    def __init__(self, delay: float, reason: str = "snoozed", waits_for: str | None = None,
                 due: float | None = None, wait: str | None = None) -> None:
        super().__init__(delay, reason)
        self.waits_for, self.due, self.wait = waits_for, due, wait


class StepTaken(DeferqError):
    """Another attempt kept this step's result first: the caller's transaction, which
    holds this attempt's writes, must be rolled back."""


class LeaseLost(DeferqError):
    """This attempt lost its lease (another worker runs the job now): its step result
    is not kept."""


def store_now(store: Backend) -> float:
    """The store's clock without a round trip in every run: a store whose clock is not
    this machine's (Redis, PostgreSQL, MySQL) is asked at most every CLOCK_REUSE seconds,
    and its offset from this process's clock is used in between."""
    if store.local_clock:
        return store.now()
    now = time.time()
    offset, asked = _clock_offsets.get(store, (0.0, -math.inf))
    if now - asked > CLOCK_REUSE:
        offset = store.now() - time.time()
        _clock_offsets[store] = (offset, now)
    return now + offset


def expire_ended(store: Backend, settled: Iterable[Outcome]) -> None:
    """The checkpoints of jobs just settled as succeeded or cancelled (`Outcome.steps_keep`,
    `JobSteps.ended`) expire as long after as their results, in one store call per batch
    (the worker's settler, after the settle: an outcome dropped as its lease was lost
    leaves them be), unless the store's settle did it (`Backend.settles_steps`). A store
    error is logged (the checkpoints then stay), never the jobs'."""
    if store.settles_steps:
        return
    ended = [o for o in settled if o.steps_keep is not None]
    if not ended:
        return
    namespaces, keep = [STEPS + o.job.id for o in ended], max(o.steps_keep or 0.0 for o in ended)
    try:
        store.kv_expire_many(namespaces, max(keep, 1.0))
    except DeferqError as exc:
        log.warning("could not set the expiry of the checkpoints of %d job(s): %s", len(namespaces), exc)


def wake_answered(store: Backend, settled: Iterable[tuple[Outcome, BaseException | None]]) -> None:
    """Jobs just settled into a durable wait whose event came while they were settling
    wake now. A sender writes each waiter's answer, then wakes the waiters the store holds
    as waiting for their due time: a job between registering as a waiter and its settle
    is still running then, and would sleep to its wait's timeout. Its answer was written
    before that wake, so after the settle it is found here (one read per wait; a wake
    that comes after the settle finds the job waiting and needs none of this)."""
    for outcome, exc in settled:
        if isinstance(exc, Suspend) and exc.wait is not None:
            try:
                if store.kv_get(STEPS + outcome.job.id, exc.wait + DONE) is not None:
                    store.wake(outcome.job.id)
            except DeferqError as error:
                log.warning("job %s: could not look for an answer to its wait %r (%s); it resumes at the "
                            "wait's timeout or its event", outcome.job.id, exc.wait, error)


class JobSteps:
    """The checkpoints of one running job: brought by its claim (or read once when the
    job first reaches one), kept here, written as new ones finish. One per run (JobControl makes it)."""

    def __init__(self, store: Backend, lease: float, keep: float, job: Job, sealer: Sealer | None = None) -> None:
        self.store, self.lease, self.keep, self.job = store, lease, keep, job
        self.sealer = sealer  # the App's encryption at rest: a step's result and error, an event's data
        self.sealing = sealer is not None and sealer.wants(job.task)
        self.namespace = STEPS + job.id
        self.records: dict[str, dict[str, Any]] | None = None
        self.reached: dict[str, int] = {}  # names reached in this run -> their order
        self.patches: dict[str, bool] = {}  # `patched` answers of this run (patches.py)
        self.undos: dict[str, Callable[[Any], Any]] = {}  # undo handlers of the steps reached (undo.py)
        self.clock = (0.0, 0.0)  # (store time, monotonic time) when the records were read

    # -- reading ----------------------------------------------------------------------

    def load(self) -> dict[str, dict[str, Any]]:
        """The checkpoints as the job's claim brought them (`Backend.with_checkpoints`),
        else read now (one store call)."""
        if self.records is None:
            raw = carried(self.job, take=True)
            if raw is None:
                raw = self.store.kv_list(self.namespace)
            self.clock = (store_now(self.store), time.monotonic())
            self.records = {name: self.opened(name, loads(value)) for name, value in raw.items()}
        return self.records

    def sealed(self, name: str, record: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint as the store keeps it: its result and error (a step's, a failed
        try's, an undo's, how a compensating job ends) sealed when the job's task is
        encrypted (encryption/jobs.py checkpoint_fields)."""
        sealer = self.sealer
        if not self.sealing or sealer is None:
            return record
        fields = [f for f in checkpoint_fields(name) if record.get(f) is not None]
        if not fields:
            return record
        return {**record, **{f: sealer.seal_value(record[f], step_bound(self.job.id, name, f)) for f in fields}}

    def opened(self, name: str, record: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint as read, its sealed fields opened; PayloadError (the job ends dead with
        the sentence) when one cannot be."""
        fields = [f for f in checkpoint_fields(name) if sealed_result(record.get(f)) is not None]
        if not fields:
            return record
        return {**record, **{f: self.open(record[f], step_bound(self.job.id, name, f),
                                          f"the {f} of checkpoint {name!r} of job {self.job.id}") for f in fields}}

    def open(self, value: Any, where: bytes, what: str) -> Any:
        try:
            if self.sealer is None:
                raise Unreadable(f"{what} is encrypted and this App declares no encryption: give it its keys")
            return self.sealer.open_value(value, where, what)
        except Unreadable as exc:
            raise PayloadError(str(exc)) from None

    def data(self, name: str, answer: dict[str, Any]) -> Any:
        """A wait's answer: the event's data (sealed once by its sender, bound to event and key)."""
        value = answer.get("data")
        if sealed_result(value) is None:
            return value
        record = self.load()[name]
        return self.open(value, event_bound(f"{record['event']}\t{record['key']}"),
                         f"the data of event {record['event']!r} for job {self.job.id}")

    def now(self) -> float:
        """The store's clock, read once a run and carried on by this process's."""
        self.load()
        return self.clock[0] + time.monotonic() - self.clock[1]

    def left(self, until: float) -> float:
        """Seconds until `until` by the store's clock; none once the store made the job due
        at or after it (it leased the job by its own clock, which this process's estimate
        may trail by a round trip: the job would sleep again for a millisecond)."""
        return 0.0 if until <= self.job.run_at else until - self.now()

    def reach(self, name: str, kind: str, fn: Callable[..., Any] | None = None) -> dict[str, Any] | None:
        """The checkpoint `name` as a run reaches it: its record if it has one (checked
        against the code that reaches it now), else None."""
        checked_name(name)
        if name in self.reached:
            raise StepMismatch(f"the step name {name!r} is reached twice in one run of job {self.job.id}: "
                               "each step, sleep and wait of a job needs a name of its own")
        index = self.reached[name] = len(self.reached)
        record = self.load().get(name)
        if record is None:
            if COMPENSATING in self.load():  # resumed mid-compensation: nothing new runs (undo.py)
                raise Compensating(f"job {self.job.id} compensates: it runs no new step ({name!r})")
            return None
        if record["kind"] != kind:
            raise StepMismatch(f"{name!r} was a {record['kind']} when job {self.job.id} first reached it, "
                               f"and is a {kind} now: rename it to change what it does")
        if fn is not None and record.get("fn") != function_name(fn):
            raise StepMismatch(f"step {name!r} of job {self.job.id} ran {record.get('fn')} and now names "
                               f"{function_name(fn)}: rename the step to change its function")
        if record["index"] != index:
            raise StepMismatch(f"step {name!r} of job {self.job.id} was checkpoint {record['index'] + 1} "
                               f"and is checkpoint {index + 1} now: the steps were reordered; "
                               "add new steps under new names after the old ones")
        return record

    # -- writing ----------------------------------------------------------------------

    def fence(self, before: str | None = None) -> None:
        """Raise LeaseLost unless this attempt still holds the job, its lease renewed (a
        heartbeat: one store round trip). `before`: the step about to start, if one is."""
        if self.job.id not in self.store.heartbeat([self.job], self.lease):
            return
        if before is None:
            raise LeaseLost(f"job {self.job.id} attempt {self.job.attempts} lost its lease: "
                            "another worker runs it, and this attempt's step is not kept")
        log.warning("job %s (%s) attempt %d lost its lease before step %r: another worker runs the job "
                    "now; this attempt stops without running the step", self.job.id, self.job.task,
                    self.job.attempts, before)
        raise LeaseLost(f"job {self.job.id} attempt {self.job.attempts} lost its lease before step {before!r}: "
                        "another worker runs the job, and this attempt ran no more of it")

    def start(self, name: str, fn: Callable[..., Any]) -> dict[str, Any] | None:
        """Step `name` as a run reaches it: its record if it was kept, else None once
        this attempt has renewed its lease and so still holds the job (`fence`). A worker
        frozen past its lease between two steps (a GC pause, a suspended VM) stops here,
        the step not run, as another worker owns the job (docs/steps.md)."""
        record = self.reach(name, "step", fn)
        if record is None:
            pause_at("step.before")
            self.fence(before=name)
            pause_at("step.run")
        return record

    def write(self, name: str, record: dict[str, Any]) -> dict[str, Any]:
        """Keep a checkpoint unless one is there already; the one kept is returned."""
        if not self.store.kv_put(self.namespace, name, dumps(self.sealed(name, record),
                                                             f"the result of step {name!r}"), only_new=True):
            raw = self.store.kv_get(self.namespace, name)
            record = self.opened(name, loads(raw)) if raw is not None else record
        self.load()[name] = record
        return record

    def put(self, name: str, record: dict[str, Any], encoded: bytes | None = None) -> dict[str, Any]:
        """`fence` then `write`, in one store call (`kv_put_leased`: one statement or
        script where the store can): a checkpoint only an attempt that still holds the
        job may keep. The one kept is returned (`encoded`: the record as JSON, if made)."""
        if encoded is None or self.sealing:
            encoded = dumps(self.sealed(name, record), f"the result of step {name!r}")
        held, raw = self.store.kv_put_leased(self.job, self.lease, self.namespace, name, encoded)
        if not held:
            raise LeaseLost(f"job {self.job.id} attempt {self.job.attempts} lost its lease: "
                            "another worker runs it, and this attempt's step is not kept")
        if raw is not None:
            record = self.opened(name, loads(raw))
        self.load()[name] = record
        return record

    def started(self, name: str, kind: str, **fields: Any) -> dict[str, Any]:
        fields.update(kind=kind, index=self.reached[name], at=self.now(), attempt=self.job.attempts)
        return fields

    def encoded(self, name: str, fn: Callable[..., Any], result: Any, started: float) -> bytes:
        """A step's checkpoint as stored: its result, refused past the size limit."""
        record = self.started(name, "step", fn=function_name(fn), result=result)
        record.update(at=started, took=round(self.now() - started, 6))
        encoded = dumps(record, f"the result of step {name!r}")
        if len(encoded) > RESULT_LIMIT:
            raise PayloadError(f"the result of step {name!r} is {len(encoded)} bytes as JSON, over the "
                               f"{RESULT_LIMIT}-byte limit: keep large data elsewhere and return its id")
        return encoded

    def kept(self, name: str, fn: Callable[..., Any], result: Any, started: float) -> Any:
        """A step's result, kept (or the one another run kept first)."""
        encoded = self.encoded(name, fn, result, started)
        record = self.put(name, loads(encoded), encoded)
        pause_at("step.after")
        return record["result"]

    def step_within(self, connection: Any, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
        """`step`, its checkpoint written on the caller's `connection`, inside the transaction
        where `fn` wrote its own rows: both are committed together, or neither."""
        record = self.start(name, fn)
        if record is not None:
            return record["result"]
        started = self.now()
        result = fn(*args, **kwargs)
        encoded = self.encoded(name, fn, result, started)
        self.fence()
        kept = encoded if not self.sealing else dumps(self.sealed(name, loads(encoded)), "the step's result")
        if not self.store.kv_put_within(connection, self.namespace, name, kept):
            raise StepTaken(f"step {name!r} of job {self.job.id} was kept by another attempt first: "
                            "roll this transaction back (the job's next run reads the kept result)")
        self.load()[name] = loads(encoded)
        return self.load()[name]["result"]

    def ended(self, outcome: Outcome) -> Outcome:
        """This run's `outcome`, saying to expire the checkpoints with it when the job
        succeeded or was cancelled (it keeps them as long as its result): unchanged for
        any other outcome, or a run that reached no checkpoint. The settle (or
        `expire_ended`, after it) expires a batch's together."""
        if must_compensate(self.records, outcome):  # its undo handlers first (undo.py)
            outcome = compensate(self, outcome)
        if outcome.kind in ENDS_STEPS and self.records:
            o = outcome  # built, not dataclasses.replace: a third of the cost
            return Outcome(o.job, o.kind, o.delay, o.error, o.result, o.ran, o.waits_for, o.due, self.keep,
                           o.chunk_call)
        return outcome

    def patched(self, name: str) -> bool:
        return patched(self, name)

    def step_with_undo(self, name: str, undo: Callable[[Any], Any], fn: Callable[..., Any],
                       args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """`step`, its undo handler registered for this run and named in its checkpoint."""
        checked_undo(undo)
        record = self.start(name, fn)
        if record is not None:
            self.undos[name] = undo
            return record["result"]
        started = self.now()
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            raise ConfigError(f"step {name!r} returned an awaitable: use `await job.step_with_undo_async(...)`")
        return self.kept_with_undo(name, fn, undo, result, started)

    def kept_with_undo(self, name: str, fn: Callable[..., Any], undo: Callable[[Any], Any], result: Any,
                       started: float) -> Any:
        record = self.put(name, with_undo(loads(self.encoded(name, fn, result, started)), undo))
        self.undos[name] = undo
        pause_at("step.after")
        return record["result"]

    def undo_on(self, name: str, undo: Callable[[Any], Any]) -> None:
        """Register the undo handler of step `name`, replayed (its result was kept)."""
        self.undos[name] = checked_undo(undo)

    # -- the three checkpoints ----------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             retry: StepRetry | None = None) -> Any:
        record = self.start(name, fn)
        if record is not None:
            return record["result"]
        started = self.now()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self.failed(name, retry, exc)
            raise
        if inspect.isawaitable(result):
            raise ConfigError(f"step {name!r} returned an awaitable: use `await job.step_async(...)`")
        return self.kept(name, fn, result, started)

    def failed(self, name: str, retry: StepRetry | None, exc: Exception) -> None:
        """A try of step `name` raised `exc` (deferq's own signals, such as a time limit,
        pass through). With tries of its own left, keep the count and leave the worker
        until the next (Suspend); else return, and the caller raises `exc` (the count is
        dropped: the task's next run gives the step its tries again)."""
        if retry is None or isinstance(exc, DeferqError) or not isinstance(exc, retry.retry_on):
            return
        failures = int(self.load().get(name + FAILED, {}).get("failures", 0)) + 1
        if failures >= retry.max_attempts:
            self.store.kv_delete(self.namespace, name + FAILED)
            return
        self.fence()
        record = {"failures": failures, "error": f"{type(exc).__name__}: {exc}"[:500], "at": self.now(),
                  "index": self.reached[name]}
        kept = dumps(self.sealed(name + FAILED, record), "a step's failure")
        self.store.kv_put(self.namespace, name + FAILED, kept)
        self.load()[name + FAILED] = record
        delay = max(0.0, float(retry.backoff(failures)))
        raise Suspend(delay, f"step {name!r} failed (try {failures} of {retry.max_attempts}): retrying") from exc

    def sleep(self, name: str, delay: float | None = None, until: float | None = None) -> None:
        record = self.reach(name, "sleep")
        if record is None:
            due = self.now() + (delay or 0.0) if until is None else until
            record = self.put(name, self.started(name, "sleep", until=due))
        left = self.left(record["until"])
        if left > 0:
            raise Suspend(left, f"sleeping in {name!r}", due=record["until"])

    def wait_for(self, name: str, event: str, key: str, timeout: float) -> Any:
        checked_name(event, "an event name", EVENT_LIMIT)
        checked_name(key, "an event key", KEY_LIMIT)
        record = self.reach(name, "wait")
        if record is None:
            record = self.put(name, self.started(name, "wait", event=event, key=key, until=self.now() + timeout))
        if (answer := self.load().get(name + DONE)) is not None:
            return self.data(name, answer)
        topic, waiter = f"{record['event']}\t{record['key']}", f"{self.job.id}\t{name}"
        left = self.left(record["until"])
        self.store.kv_put(WAITERS + topic, waiter, b"1", ttl=max(left, 0) + 60)
        sent = self.store.kv_get(EVENTS, topic)
        event_record = loads(sent) if sent is not None else None
        if event_record is not None and self.unconsumed(event_record):
            return self.answer(name, waiter, topic, {"data": event_record["data"], "event": event_record["id"],
                                                     "at": self.now()})
        if left <= 0:
            return self.answer(name, waiter, topic, {"data": None, "timeout": True, "at": self.now()})
        raise Suspend(left, f"waiting for {record['event']} {record['key']} in {name!r}", topic, record["until"],
                      name)

    def unconsumed(self, sent: dict[str, Any]) -> bool:
        """An event this job has not had yet, sent since the job was created."""
        if sent["at"] < self.job.created_at:
            return False
        answers = (record for name, record in self.load().items() if name.endswith(DONE))
        return all(answer.get("event") != sent["id"] for answer in answers)

    def answer(self, name: str, waiter: str, topic: str, answer: dict[str, Any]) -> Any:
        kept = self.write(name + DONE, answer)
        self.store.kv_delete(WAITERS + topic, waiter)
        return self.data(name, kept)
