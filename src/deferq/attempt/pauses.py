"""Named points of a job's attempt (and of firing a schedule) where a test can hold this
process, to freeze it (SIGSTOP) or kill it exactly there: the freeze-and-kill tests
(tests/attack/, docs/development.md "Freeze and kill").

`DEFERQ_TEST_PAUSE_AT` names one of POINTS. The first time the process reaches it,
`pause_at` appends "<point> <pid>" to the file `DEFERQ_TEST_PAUSE_FILE` names, then
waits there until "<that file>.go" exists (at most HOLD seconds): meanwhile the test
stops or kills the process. Unset, as everywhere but in those tests, a call compares
one string and returns.
"""

from __future__ import annotations

import os
import threading
import time

POINTS = (
    "step.before",  # a run reached a step it has not kept, before the lease check
    "step.run",  # the lease held: the step's function is called next
    "step.after",  # the step's result is kept, before the task goes on
    "children.before",  # a gather's children are planned, before their ids are kept
    "children.store",  # the ids kept and the lease held: the children are stored next
    "children.stored",  # the children are stored, before that is written
    "settle.before",  # the run ended, before its outcome goes to the store
    "undo.after",  # an undo handler's outcome is kept, before the next handler (steps/undo.py)
    "chunk.call",  # a chunk task's jobs are gathered into a call: the function is called next
    "schedule.claim",  # a schedule's tick was claimed, before its job is looked for
    "schedule.enqueue",  # no job has the tick's key: it is enqueued next
    "rotate.reseal",  # deferq encryption rotate opened a value and sealed it anew, before it swaps it in
)
HOLD = 120.0  # seconds a held process waits for the test at most, then goes on

_point = os.environ.get("DEFERQ_TEST_PAUSE_AT") or None
ARMED = _point is not None  # a hot path may skip its pause_at calls when False (as everywhere but in those tests)
_lock = threading.Lock()


def pause_at(point: str) -> None:
    """Hold here if the test asked for `point` and this process has not held there yet."""
    if point == _point:
        _hold(point)


def _hold(point: str) -> None:
    global _point
    with _lock:
        if _point != point:  # another thread held here first: once a process
            return
        _point = None
    path = os.environ.get("DEFERQ_TEST_PAUSE_FILE", "deferq-pause")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{point} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    deadline = time.monotonic() + HOLD
    while not os.path.exists(path + ".go") and time.monotonic() < deadline:
        time.sleep(0.01)
