"""Safe deploys of durable code: `job.patched(name)` (docs/steps.md, "Safe deploys").

A patch marker is a checkpoint of its own, `<name>\\tpatch`, that takes no place in the
order of the job's steps (their `index`), so markers can be added, and later removed,
without moving any step. A job decides once, at the point where its code first asks:
- it recorded the marker before: True (it took the new path);
- it has steps, sleeps or waits recorded at or after this point, without the marker: it
  ran past here under older code, so False (it keeps the old path), nothing written;
- else the marker is kept (a fenced write, like a step's) and True.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..job import Job
from .names import KINDS, checked_name

PATCH = "\tpatch"  # + a patch name: the job took the patched path


class Steps(Protocol):
    """What a patch reads and writes of a run's checkpoints (checkpoints.JobSteps)."""

    job: Job
    reached: dict[str, int]
    patches: dict[str, bool]

    def load(self) -> dict[str, dict[str, Any]]: ...

    def now(self) -> float: ...

    def put(self, name: str, record: dict[str, Any], encoded: bytes | None = None) -> dict[str, Any]: ...


def ran_past(records: dict[str, dict[str, Any]], position: int) -> bool:
    """Whether a job recorded a step, sleep or wait at `position` or after it."""
    return any(record.get("kind") in KINDS and record["index"] >= position for record in records.values())


def patched(steps: Steps, name: str) -> bool:
    """The answer of `job.patched(name)` for this run (asked once per run and name)."""
    checked_name(name, "a patch name")
    if name in steps.patches:
        return steps.patches[name]
    records, position = steps.load(), len(steps.reached)
    if name + PATCH in records:
        answer = True
    elif ran_past(records, position):
        answer = False
    else:
        steps.put(name + PATCH, {"kind": "patch", "index": position, "at": steps.now(),
                                 "attempt": steps.job.attempts})
        answer = True
    steps.patches[name] = answer
    return answer
