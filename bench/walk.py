"""The path of one job through deferq's rooms at run time: how many times the code
crosses from one part of the package to another while one plain job is enqueued,
leased, run and settled.

    .venv/bin/python -m bench.walk            # hops and rooms: producer, consumer, the job
    .venv/bin/python -m bench.walk --path     # and each thread's sequence of rooms
    PYTHONPATH=/other/tree/src .venv/bin/python -m bench.walk   # another tree's deferq

How it counts:
- The job: `add.enqueue(1, 2)` on an App whose store is a fresh SQLite file, then
  `Worker(app, WorkerConfig(burst=True, concurrency=1)).run()`. One such job runs
  untraced first on the same App and store, so the store's schema and connections and
  the plug-ins' state exist: what is traced is the second job, the steady state.
- The trace: `sys.setprofile` and `threading.setprofile` see every Python call and
  return; after each, the thread's room is that of its innermost frame in deferq's own
  source, value helpers skipped. A frame outside deferq (the task's body, the standard
  library, a driver) leaves the room as it was; a callback from one of them into deferq
  enters the callback's room.
- The rooms: each module of deferq is a room (`app`, `task`, `middleware`;
  `observe/history` and `observe/logs`; a folder's `__init__.py` is the room named for
  the folder: `limits`), except two folders that are one room each: `worker/` (its
  runners, priorities, orders, metrics) is `worker`, and every store internal
  (`backends/**`: the guard, history, each store's code) is `store`.
- Value helpers are no room: `job.py`, `codec.py`, `values.py` and `backends/base.py`.
  A call into them is not a hop; the room stays that of their caller.
- A hop is a change of room along one thread's sequence; a room's count is how many
  times a sequence enters it. A walk's rooms are the distinct rooms it enters.
- The producer walk is the main thread from `add.enqueue` to its return. The consumer
  walk is three threads' walks laid end to end: the lease (the main thread inside the
  worker's lease loop: not the worker's construction, start or shutdown, which are the
  worker's, not the job's), the run (the runner thread) and the settle (the settler
  thread; a worker with no `_lease_loop` has its whole `run()` traced instead). The
  worker's other threads (the keeper's heartbeat) are traced and shown
  (with --path) but not counted.
- The job in all: the producer and the consumer walks; its hops are their sum (a seam
  between two threads' walks is no hop: no code crosses it), its rooms their union.
- Folders as rooms: `walk.folders()` (and the `folders` line printed) counts every
  folder as one room (`limits`, `observe`, `attempt`, ...), the plan of
  `tests/unit/test_layers.py`.

At 2ca684b this gives what the architecture review of that commit measured: producer
20 hops over 7 rooms, consumer 48 over 12, the job 68 over 15.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import deferq
from deferq import App
from deferq.worker import Worker, WorkerConfig

PACKAGE = Path(deferq.__file__).resolve().parent
VALUE_HELPERS = {"job.py", "codec.py", "values.py", "backends/base.py"}
ONE_ROOM = {"backends": "store", "worker": "worker"}  # folders that are one room, by its name
CONSUMER = ("lease", "run", "settle")  # the consumer's threads, in the order their walks are laid

app = App("memory://")


@app.task
def add(a: int, b: int) -> int:
    return a + b


def room_of(filename: str) -> str | None:
    """The room of a source file, or None outside deferq and for a value helper."""
    try:
        rel = Path(filename).resolve().relative_to(PACKAGE).as_posix()
    except ValueError:
        return None
    if rel in VALUE_HELPERS or not rel.endswith(".py"):
        return None
    parts = rel[:-3].split("/")
    if parts[0] in ONE_ROOM and len(parts) > 1:
        return ONE_ROOM[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return "/".join(parts) or "deferq"


Entry = tuple[str, str]  # a room, and the function by which the walk entered it


@dataclass
class Walk:
    """One thread's sequence of rooms, or several laid end to end (`segments`)."""

    segments: list[list[Entry]] = field(default_factory=list)

    @property
    def path(self) -> list[Entry]:
        return [entry for segment in self.segments for entry in segment]

    @property
    def hops(self) -> int:
        """Changes of room within each thread's sequence (a seam between two is none)."""
        return sum(max(0, len(segment) - 1) for segment in self.segments)

    @property
    def rooms(self) -> Counter[str]:
        """How many times the walk enters each room."""
        return Counter(room for room, _ in self.path)

    def enter(self, room: str, function: str) -> None:
        if not self.segments:
            self.segments.append([])
        if not self.segments[-1] or self.segments[-1][-1][0] != room:
            self.segments[-1].append((room, function))

    def __add__(self, other: Walk) -> Walk:
        return Walk([segment for segment in self.segments + other.segments if segment])

    def folders(self) -> Walk:
        """The same walk with every folder one room (`limits/runtime` is `limits`)."""
        out = Walk()
        for segment in self.segments:
            part = Walk()
            for room, function in segment:
                part.enter(room.split("/")[0], function)
            out += part
        return out

    def summary(self) -> str:
        return f"{self.hops} hops over {len(self.rooms)} rooms"


class Tracer:
    """Keeps, per thread, the sequence of rooms of its innermost deferq frame."""

    def __init__(self) -> None:
        self.walks: dict[int, Walk] = {}
        self.names: dict[int, str] = {}
        self._rooms: dict[CodeType, str | None] = {}

    def _room(self, code: CodeType) -> str | None:
        try:
            return self._rooms[code]
        except KeyError:
            room = self._rooms[code] = room_of(code.co_filename)
            return room

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            at: FrameType | None = frame
        elif event == "return":
            at = frame.f_back
        else:  # c_call, c_return, c_exception: no Python frame changes
            return
        room = None
        while at is not None and (room := self._room(at.f_code)) is None:
            at = at.f_back
        if at is None or room is None:
            return
        thread = threading.get_ident()
        walk = self.walks.get(thread)
        if walk is None:
            walk = self.walks[thread] = Walk()
            self.names[thread] = threading.current_thread().name
        walk.enter(room, at.f_code.co_qualname)

    def traced(self, call: Callable[[], Any], threads: bool = False, main: bool = True) -> Any:
        """call(), traced on this thread unless not `main`, and on every thread it starts
        if `threads`."""
        if threads:
            threading.setprofile(self)
        if main:
            sys.setprofile(self)
        try:
            return call()
        finally:
            if main:
                sys.setprofile(None)
            if threads:
                threading.setprofile(None)  # type: ignore[arg-type,unused-ignore]  # None removes it

    def by_part(self) -> dict[str, Walk]:
        """Each thread's walk under the name of its part: lease (the main thread), run
        (the runner thread), settle (the settler), or the thread's own name."""
        out: dict[str, Walk] = {}
        for thread, walk in self.walks.items():
            name = self.names[thread]
            part = ("lease" if thread == threading.main_thread().ident else "run" if name.startswith("deferq-run")
                    else "settle" if name == "_settle_loop" else name)
            out[part] = out[part] + walk if part in out else walk
        return out


@dataclass
class Walks:
    producer: Walk
    parts: dict[str, Walk]  # the consumer's threads: lease, run, settle, and the uncounted others

    @property
    def consumer(self) -> Walk:
        walk = Walk()
        for part in CONSUMER:
            walk = walk + self.parts.get(part, Walk())
        return walk

    @property
    def job(self) -> Walk:
        return self.producer + self.consumer


def one_job(tracer: Tracer | None = None) -> Walks | None:
    """Enqueue `add(1, 2)` and run a burst worker of one thread until it is done; traced
    by `tracer` if given: the enqueue, the worker's threads and its lease loop."""
    if tracer is None:
        add.enqueue(1, 2)
        code = Worker(app, WorkerConfig(burst=True, concurrency=1)).run()
    else:
        producer = Tracer()
        producer.traced(lambda: add.enqueue(1, 2))
        worker = Worker(app, WorkerConfig(burst=True, concurrency=1))
        lease_loop = getattr(worker, "_lease_loop", None)
        if lease_loop is None:  # a worker without it: its whole run() on the main thread
            code = tracer.traced(worker.run, threads=True)
        else:
            worker._lease_loop = lambda: tracer.traced(lease_loop)  # type: ignore[method-assign]
            code = tracer.traced(worker.run, threads=True, main=False)
    if code != 0:
        raise RuntimeError(f"the worker exited {code}")
    if tracer is None:
        return None
    return Walks(producer.walks.get(threading.get_ident(), Walk()), tracer.by_part())


def walks(folder: str | Path | None = None) -> Walks:
    """One plain job traced from enqueue to settle, after an untraced one on the same App
    and store: a SQLite file in `folder` (a temporary one if None)."""
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="deferq-walk-") as temporary:
            return walks(temporary)
    app.close()
    app.url = f"sqlite:///{folder}/walk.db"
    try:
        one_job()
        found = one_job(Tracer())
    finally:
        app.close()
    assert found is not None
    return found


def walk(folder: str | Path | None = None) -> Walk:
    """The job in all: `.hops`, `.rooms` (a Counter of entries per room), `.folders()`."""
    return walks(folder).job


def show(name: str, walk: Walk, path: bool = False) -> list[str]:
    rooms = ", ".join(f"{room} {n}" for room, n in walk.rooms.most_common())
    lines = [f"{name}: {walk.summary()}: {rooms}"]
    if path:
        lines += [f"    {room:<18} {function}" for room, function in walk.path]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.walk", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", action="store_true", help="print each thread's sequence of rooms")
    args = parser.parse_args(argv)
    found = walks()
    lines = [f"deferq from {PACKAGE}"]
    lines += show("producer", found.producer, args.path)
    for part in CONSUMER:
        lines += show(f"  consumer, {part}", found.parts.get(part, Walk()), args.path)
    lines += show("consumer", found.consumer)
    lines += show("the job", found.job)
    lines += show("the job, folders as rooms", found.job.folders())
    for part, walk in found.parts.items():
        if part not in CONSUMER:
            lines += show(f"  (not counted) {part}", walk, args.path)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
