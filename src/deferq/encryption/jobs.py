"""Which fields of a job are sealed, and the one place each is sealed and opened.

Sealed: the arguments (args and kwargs, one value), the result, the error and the
progress message. Kept readable: everything a store sorts, counts or finds by (task,
queue, state, times, key, tags, fair key, priority, attempts) and the meta (trace
context, the ids a job runs after).

- The arguments: the stored payload `[[], {"$enc": <sealed [args, kwargs]>}, meta]`,
  a valid payload on every store, so no store changes.
- The result: `{"$enc": <sealed JSON>}`; the error and progress message: the sealed text.

Each value is bound to its job id and field (envelope.py). A sharded Redis marks ids
(job.mark_id: two characters moved, two appended): the binding leaves those out, so a
job keeps its values when it moves. The arguments of an enqueue that may replace those of
the waiting job holding its unique key (on_conflict replace or debounce) are bound to
that key instead: the store gives them to a job whose id the producer cannot know.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import orjson

from ..backends.base import Enqueue, OnConflict, Outcome
from ..errors import ConfigError
from ..job import Job, carried, carry, copier, dumps, encode_payload, id_core
from .envelope import MARK, Keyring, Unreadable, key_of, sealed, size_of
from .keys import Encryption


class _Defaults(Protocol):
    @property
    def encrypt(self) -> bool | None: ...


class _Task(Protocol):
    """A task as the sealer asks it (task.Task): whether it chose to be encrypted."""

    @property
    def defaults(self) -> _Defaults: ...

ARGS = "$enc"  # the kwargs key of sealed arguments (no Python parameter can be named so)
SEALED_ARGS_BEFORE, SEALED_ARGS_AFTER = b'[[],{"' + ARGS.encode() + b'":"', b'"}]'  # the payload around them
ERRORS_KEPT = 1000  # Sealer.sealed_error's values waiting for the attempt log
UNREADABLE = "_unreadable_payload"  # the runner's marker: the job ends dead with this sentence


def event_bound(topic: str) -> bytes:
    """The associated data of an event's data: its event and key ("<event>\t<key>"), so
    that the data sealed once serves every job waiting for it."""
    return f"event/{topic}".encode()


# The copies sealing and opening make, one per job each: field by field (Job.evolve, a
# job's 28 fields, took 1.6 µs; dataclasses.replace 3)
with_payload: Callable[[Enqueue, bytes], Enqueue] = copier(Enqueue, "payload")
with_arguments: Callable[[Job, tuple[Any, ...], dict[str, Any]], Job] = copier(Job, "args", "kwargs")
with_sealed: Callable[[Outcome, str | None, Any], Outcome] = copier(Outcome, "error", "result", checked=False)


CHECKPOINT_FIELDS = ("result", "error")  # what a durable job's checkpoint may hold of its own data
CHILD_END = "\tchild\t"  # a gather's child's end (steps/children.py): the child's own values
ANSWER = "\tdone"  # a wait's answer (steps/checkpoints.py): the event's data as its sender sealed it


def checkpoint_fields(name: str) -> tuple[str, ...]:
    """The fields of the checkpoint `name` that are sealed bound to its job and name: none
    of a wait's answer (the event's data, bound to the event) nor of a child's end (the
    child's result or error, bound to the child: as the child job keeps them)."""
    return () if name.endswith(ANSWER) or CHILD_END in name else CHECKPOINT_FIELDS


def step_bound(job_id: str, name: str, field: str) -> bytes:
    """The associated data of a field of a durable job's checkpoint."""
    return bound(job_id, f"step/{name}/{field}")


def bound(job_id: str, what: str) -> bytes:
    """The associated data of a job's field: its id without a shard's mark."""
    return f"{id_core(job_id)}/{what}".encode()


def key_bound(key: str) -> bytes:
    """The associated data of arguments that may replace the waiting holder's of `key`
    (a job id holds no tab: never the same as `bound`'s)."""
    return f"key\t{key}/args".encode()


def args_bound(item: Enqueue) -> bytes:
    """What an enqueued job's arguments are bound to: its unique key when they may go to
    the job that holds it (on_conflict replace or debounce), else its id."""
    job = item.job
    if job.key and item.on_conflict is not OnConflict.IGNORE:
        return key_bound(job.key)
    return f"{id_core(job.id)}/args".encode()  # bound(job.id, "args"), one call less for every enqueue


def open_args(keyring: Keyring, job: Job, value: str) -> tuple[bytes, bytes]:
    """The plain arguments `value` of `job` and what they are bound to: its id, else (the
    arguments of an enqueue that replaced its own, or may have) its key. Unreadable, with
    the sentence of its id, when neither opens them."""
    where = bound(job.id, "args")
    plain = keyring.opened(value, where)
    if plain is not None:
        return plain, where
    what = f"the arguments of job {job.id}"
    failed = keyring.refusal(value, where, what)
    if not job.key:
        raise failed
    where = key_bound(job.key)
    plain = keyring.opened(value, where)
    if plain is None:
        raise failed
    return plain, where


def sealed_args(job: Job) -> str | None:
    """The sealed arguments of a job read from a store, else None."""
    value = job.kwargs.get(ARGS) if not job.args and len(job.kwargs) == 1 else None
    return value if sealed(value) else None


def sealed_result(result: Any) -> str | None:
    if type(result) is dict and len(result) == 1:
        value = result.get(ARGS)
        return value if sealed(value) else None
    return None


def hidden(value: str) -> str:
    """What a process without the key shows for a sealed value."""
    return f"encrypted ({size_of(value)} bytes)"


class Sealer:
    """An App's encryption at work: which jobs are sealed, and sealing and opening them.
    `keyring` is None in a process without keys (it opens nothing, seals nothing)."""

    def __init__(self, encryption: Encryption, tasks: Mapping[str, _Task]) -> None:
        self.encryption = encryption
        self.tasks = tasks
        self.keyring = Keyring(encryption) if encryption.has_keys else None
        # job id -> (error, sealed) of the last outcomes sealed with an error: the attempt
        # log's entry of the same error is that value, not sealed a second time
        self._errors: dict[str, tuple[str, str]] = {}

    def wants(self, task: str) -> bool:
        """Whether jobs of `task` are sealed: its own `encrypt`, else the App's `every_task`."""
        known = self.tasks.get(task)
        chosen = known.defaults.encrypt if known is not None else None
        return self.encryption.every_task if chosen is None else chosen

    def writer(self) -> Keyring:
        if self.keyring is None:
            raise ConfigError("this App encrypts jobs but this process has no encryption key: set "
                              "DEFERQ_ENCRYPTION_KEYS (deferq encryption new-key makes one) or give the App its "
                              "keys")
        return self.keyring

    def check_ready(self, who: str) -> None:
        """ConfigError (one sentence) when this process cannot seal and open: a worker
        without the key never starts against an App that declares encryption."""
        if self.keyring is None:
            raise ConfigError(f"{who} cannot start: this App encrypts jobs (deferq.Encryption) and this process "
                              "has no encryption key: set DEFERQ_ENCRYPTION_KEYS to the App's keys")

    # -- writing -------------------------------------------------------------------------

    def seal_items(self, items: list[Enqueue]) -> list[Enqueue]:
        """Items as the store keeps them: the arguments of each job that is sealed, sealed.
        Without a key, refused before anything is stored."""
        out = items
        for i, item in enumerate(items):
            job = item.job
            if not self.wants(job.task):
                continue
            if ARGS in job.kwargs:
                raise ConfigError(f"{job.task}() takes a keyword argument named {ARGS!r}, which deferq keeps for "
                                  "encrypted arguments: rename it")
            # the producer's payload is [args, kwargs] already when the job has no meta
            plain = item.payload if not job.meta and item.payload else dumps([job.args, job.kwargs],
                                                                              f"the arguments of {job.task}()")
            if out is items:
                out = list(items)
            # a sealed text is JSON as it is (key id and base64 characters): no encoder needed
            keyring, where = self.keyring or self.writer(), args_bound(item)
            payload = (keyring.seal_ascii(plain, where, SEALED_ARGS_BEFORE, SEALED_ARGS_AFTER) if not job.meta
                       else encode_payload(job.task, (), {ARGS: keyring.seal(plain, where)}, job.meta))
            out[i] = with_payload(item, payload)
        return out

    def seal_outcomes(self, outcomes: Sequence[Outcome]) -> list[Outcome]:
        """Outcomes as the store keeps them (their result and error sealed); the worker's
        hooks keep the plain ones."""
        out = list(outcomes)
        for i, o in enumerate(outcomes):
            result, error = o.result, o.error
            if (result is None and error is None) or not self.wants(o.job.task):
                continue
            keyring, core = self.keyring or self.writer(), id_core(o.job.id)  # bound(): the id read once
            if result is not None:
                result = {ARGS: keyring.seal(orjson.dumps(result), f"{core}/result".encode())}
            if error is not None:
                plain, error = error, keyring.seal(error.encode(), f"{core}/error".encode())
                if len(self._errors) >= ERRORS_KEPT:  # entries no attempt log took (it was off)
                    self._errors.clear()
                self._errors[o.job.id] = (plain, error)
            out[i] = with_sealed(o, error, result)
        return out

    def sealed_error(self, job_id: str, error: str) -> str:
        """`error` of job `job_id` sealed: the value its outcome was stored with when that
        sealed the same text (a failed attempt's log entry), else sealed now."""
        kept = self._errors.pop(job_id, None)
        if kept is not None and kept[0] == error:
            return kept[1]
        return self.writer().seal(error.encode(), bound(job_id, "error"))

    def as_given(self, items: Sequence[Enqueue], stored: Sequence[Enqueue], jobs: list[Job]) -> list[Job]:
        """The jobs a store answered an enqueue with, each that holds its item's arguments
        (stored from it, or the holder of its key that took them) with the item's plain
        ones: a store that reads its payload back answers them sealed, not opened again.
        `stored`: the items as sealed for the store."""
        for i, (item, job) in enumerate(zip(items, jobs, strict=False)):
            if job.args or ARGS not in job.kwargs:  # most often: the store answered the item's own job
                continue
            value = sealed_args(job)
            if value is not None and (job.id == item.job.id or value.encode() in stored[i].payload):
                jobs[i] = with_arguments(job, item.job.args, item.job.kwargs)
        return jobs

    def seal_progress(self, jobs: Sequence[Job]) -> list[Job]:
        out = list(jobs)
        for i, job in enumerate(jobs):
            if job.progress_message is not None and self.wants(job.task):
                message = self.writer().seal(job.progress_message.encode(), bound(job.id, "progress"))
                out[i] = job.evolve(progress_message=message)
        return out

    def seal_value(self, value: Any, where: bytes) -> dict[str, str]:
        """A JSON value kept apart from the job record (a step's result, an event's data), sealed."""
        return {ARGS: self.writer().seal(dumps(value, "the value"), where)}

    # -- reading -------------------------------------------------------------------------

    def open_value(self, value: Any, where: bytes, what: str) -> Any:
        """`value` opened if `seal_value` sealed it (else as it is); Unreadable if it cannot be."""
        inner = sealed_result(value)
        if inner is None:
            return value
        if self.keyring is None:
            raise Unreadable(f"{what} is encrypted with key {key_of(inner)[:40]!r} and this process has no "
                             "encryption key: set DEFERQ_ENCRYPTION_KEYS")
        return orjson.loads(self.keyring.open(inner, where, what))

    def open_claimed(self, jobs: list[Job]) -> list[Job]:
        """Leased jobs as their tasks see them: arguments opened. One that cannot be opened
        carries the runner's marker, so it ends dead with the sentence; its stored payload
        is left as it is (nothing lost: retried once the key is there)."""
        out = jobs
        for i, job in enumerate(jobs):
            kwargs = job.kwargs  # sealed_args, written out: every claimed job passes here
            if job.args or len(kwargs) != 1:
                continue
            value = kwargs.get(ARGS)
            if type(value) is not str or not value.startswith(MARK):
                continue
            try:
                opened = self._args(job, value)
            except Unreadable as exc:
                opened = job.evolve(kwargs={UNREADABLE: str(exc)})
            checkpoints = carried(job)
            if checkpoints is not None:  # what the claim brought stays with the job (no read again)
                carry(opened, checkpoints)
            if out is jobs:
                out = list(jobs)
            out[i] = opened
        return out

    def open_job(self, job: Job) -> Job:
        """A job as this process may show it: every sealed field it can open, opened; the
        others left sealed (`shown` tells what to print for them)."""
        if ((job.args or ARGS not in job.kwargs) and job.result is None and job.error is None
                and job.progress_message is None):
            return job  # most often (every enqueue): a producer's job as stored, its own plain values
        value, result = sealed_args(job), sealed_result(job.result)
        if value is None and result is None and not sealed(job.error) and not sealed(job.progress_message):
            return job
        changes: dict[str, Any] = {}
        if value is not None and self.keyring is not None:
            try:
                opened = self._args(job, value)
                changes.update(args=opened.args, kwargs=opened.kwargs)
            except Unreadable:
                pass
        if result is not None:
            opened_result = self.open_text(result, job.id, "result")
            if opened_result is not None:
                changes["result"] = orjson.loads(opened_result)
        for name, what in (("error", "error"), ("progress_message", "progress")):
            text = getattr(job, name)
            if sealed(text):
                opened_text = self.open_text(text, job.id, what)
                if opened_text is not None:
                    changes[name] = opened_text.decode()
        return job.evolve(**changes) if changes else job

    def open_text(self, value: str, job_id: str, what: str) -> bytes | None:
        if self.keyring is None:
            return None
        try:
            return self.keyring.open(value, bound(job_id, what), f"the {what} of job {job_id}")
        except Unreadable:
            return None

    def _args(self, job: Job, value: str) -> Job:
        keyring = self.keyring
        if keyring is None:
            raise Unreadable(f"the arguments of job {job.id} are encrypted with key {key_of(value)[:40]!r} and "
                             "this process has no encryption key: set DEFERQ_ENCRYPTION_KEYS")
        plain = keyring.opened(value, f"{id_core(job.id)}/args".encode())  # bound(job.id, "args")
        if plain is None:  # bound to the job's key (open_args), or not to be opened: why
            plain = keyring.opened(value, key_bound(job.key)) if job.key else None
            if plain is None:
                raise keyring.refusal(value, bound(job.id, "args"), f"the arguments of job {job.id}")
        try:
            args, kwargs = orjson.loads(plain)
        except (orjson.JSONDecodeError, ValueError, TypeError):
            raise Unreadable(f"the arguments of job {job.id} decrypt to no [args, kwargs]") from None
        if type(args) is not list or type(kwargs) is not dict:
            raise Unreadable(f"the arguments of job {job.id} decrypt to no [args, kwargs]")
        return with_arguments(job, tuple(args), kwargs)


def opener(sealer: Sealer | None) -> Callable[[Job], Job]:
    """`sealer.open_job`, or the job as it is when the App encrypts nothing."""
    return sealer.open_job if sealer is not None else _same


def _same(job: Job) -> Job:
    return job


__all__ = ["ARGS", "MARK", "Sealer", "bound", "hidden", "opener", "sealed", "sealed_args", "sealed_result"]


def for_display(job: Job, sealer: Sealer | None) -> tuple[Job, dict[str, int]]:
    """A job as a console or the API shows it: what this process can open, opened; what it
    cannot, replaced by "encrypted (N bytes)" (the arguments: emptied), with the sizes of
    those fields by name ({} when nothing is hidden)."""
    if sealer is not None:
        job = sealer.open_job(job)
    sizes: dict[str, int] = {}
    changes: dict[str, Any] = {}
    value = sealed_args(job)
    if value is not None:
        sizes["args"] = size_of(value)
        changes.update(args=(), kwargs={})
    value = sealed_result(job.result)
    if value is not None:
        sizes["result"] = size_of(value)
        changes["result"] = hidden(value)
    for name in ("error", "progress_message"):
        text = getattr(job, name)
        if sealed(text):
            sizes[name] = size_of(text)
            changes[name] = hidden(text)
    return (job.evolve(**changes) if changes else job), sizes


def shown_value(value: Any, where: bytes, sealer: Sealer | None) -> Any:
    """A value `Sealer.seal_value` may have sealed, as it may be shown: opened, or
    "encrypted (N bytes)"."""
    if sealed(value):  # a text sealed as such (an error)
        keyring = sealer.keyring if sealer is not None else None
        try:
            return keyring.open(value, where).decode() if keyring is not None else hidden(value)
        except Unreadable:
            return hidden(value)
    inner = sealed_result(value)
    if inner is None:
        return value
    try:
        return sealer.open_value(value, where, "the value") if sealer is not None else hidden(inner)
    except Unreadable:
        return hidden(inner)


def shown_text(text: str | None, job_id: str, what: str, sealer: Sealer | None) -> str | None:
    """A text field kept apart from the job (an attempt's error) as it may be shown."""
    if not sealed(text) or text is None:
        return text
    opened = sealer.open_text(text, job_id, what) if sealer is not None else None
    return hidden(text) if opened is None else opened.decode()


def shown_dict(job: Job, sealer: Sealer | None = None) -> dict[str, Any]:
    """`job.to_dict()` as a command prints it: a field this process cannot open as
    "encrypted (N bytes)" (the arguments too), `encrypted` naming them with their sizes."""
    job, sizes = for_display(job, sealer)
    data = job.to_dict()
    if sizes:
        if "args" in sizes:
            data["args"] = f"encrypted ({sizes['args']} bytes)"
        data["encrypted"] = sizes
    return data
