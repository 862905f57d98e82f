"""The worker's runner threads for sync jobs, woken one at a time.

Handing each job to a thread of its own costs a thread wake-up (and a turn of the GIL)
per job: the largest part of a short job's CPU. Here jobs wait in one queue and a
submit wakes one parked runner. A runner that takes a job while others still wait
decides by the job's task:
- a task whose runs have been short (under SHORT, a moving average per task) and
  busy (running Python for at least half of that time, not waiting on I/O or a lock),
  while the next job has waited less than SHORT: it runs the job and comes back for
  the next, so short busy jobs run back to back on one thread (side by side they would
  only take turns on the GIL);
- any other (long, waiting on I/O, not seen yet, or jobs queued behind it for SHORT
  already): it first wakes the next runner, which does the same, so such jobs start
  side by side within a wake-up each, and their waits overlap.

What a runner's jobs return goes to `done` in one call per run of short jobs: when it
is about to park, to run a job that is not short, or when the first of them ended
SHORT ago (so the settler hears of a batch of short jobs at once, not job by job).

A "short" task that suddenly runs long holds the jobs queued behind it until the keeper
thread's next tick (`nudge`, at most STALL apart while jobs run), which wakes a runner.

There are as many runners as slots and the worker submits a job only for a free slot,
so a submitted job always has a runner; a job `put` by a runner inside its `run` is the
one that runner takes next.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

SHORT = 0.001  # seconds: a busy task whose runs average less runs back to back with the next jobs
# seconds a hand-over (submit(hand_over=True)) waits at most for the runner to take its job
HAND_OVER = 0.002
STALL = 0.05  # seconds: how often the keeper nudges while jobs run (the longest a queued job waits)


class Runners(Generic[T, R]):
    def __init__(self, count: int, run: Callable[[T], R], done: Callable[[list[R]], None],
                 task_of: Callable[[T], str], name: str = "deferq-run", short: float = SHORT) -> None:
        self._run = run
        self._short = short
        self._done = done
        self._task_of = task_of
        self._typical: dict[str, float] = {}  # task name -> moving average of its run time
        self._pending: deque[tuple[T, float]] = deque()  # (job, when queued)
        self._parked: list[threading.Lock] = []  # one held lock per parked runner, the latest last
        self._waking = False  # a parked runner was released and has not yet looked for work
        self._handing = False  # a submit waits for the woken runner to take its job (hand_over)
        self._handed = threading.Event()
        self._closed = False
        self._mutex = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
                         for i in range(count)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, items: list[T], hand_over: bool = False) -> None:
        """Queue `items` and wake a parked runner for them. `hand_over`: then wait (at most
        HAND_OVER) until that runner has taken the first of them: the caller lets go of the
        interpreter at once, so the job starts now, not when the caller's next blocking
        call lets the woken runner in (an idle worker's pickup: the caller goes back to
        preparing its next wait, tens of microseconds of Python)."""
        now = time.perf_counter()
        with self._mutex:
            self._pending.extend((item, now) for item in items)
            park = self._next_to_wake()
            handing = self._handing = hand_over and park is not None
            if handing:
                self._handed.clear()
        if park is not None:
            park.release()
        if handing:
            self._handed.wait(HAND_OVER)

    def put(self, item: T) -> None:
        """From a runner, inside `run`: the job it takes next (no runner is woken for it)."""
        with self._mutex:
            self._pending.append((item, time.perf_counter()))

    def nudge(self) -> None:
        """Jobs still queued (behind a run longer than its task's usual): wake a runner."""
        if self._pending:
            with self._mutex:
                park = self._next_to_wake()
            if park is not None:
                park.release()

    def close(self) -> None:
        """Let every runner exit once the queue is empty (a running job is not waited for)."""
        with self._mutex:
            self._closed = True
            parked, self._parked = self._parked, []
        for park in parked:
            park.release()

    def _next_to_wake(self) -> threading.Lock | None:
        """With the mutex held: the parked runner to wake for the queued jobs, if any.
        The most recently parked one: its stack and caches are the warmest."""
        if self._waking or not self._pending or not self._parked:
            return None
        self._waking = True
        return self._parked.pop()

    def _loop(self) -> None:
        park = threading.Lock()
        park.acquire()
        woken = False
        typical, limit = self._typical, self._short
        ended: list[R] = []  # what the short jobs run since the last `done` returned
        first_end = 0.0  # when the first of them ended
        while True:
            with self._mutex:
                if woken:
                    self._waking = woken = False
                took = bool(self._pending)
                handed = took and self._handing
                if took:
                    self._handing = False
                    item, _ = self._pending.popleft()
                    task = self._task_of(item)
                    short = typical.get(task, limit) < limit
                    # more jobs queued behind this one: the next runner takes them, unless
                    # this one will be back for them soon
                    soon = short and not (self._pending and time.perf_counter() - self._pending[0][1] >= limit)
                    after = None if soon else self._next_to_wake()
                elif not ended:
                    if self._closed:
                        return
                    self._parked.append(park)
            if ended and not (took and short and time.perf_counter() - first_end < limit):
                self._done(ended)
                ended = []
                if not took:
                    continue  # look again before parking: the queue may have changed meanwhile
            if not took:
                park.acquire()  # released by submit, nudge, a runner taking a job, or close
                woken = True
                continue
            if after is not None:
                after.release()
            if handed:
                self._handed.set()
            started, cpu = time.perf_counter(), time.thread_time()
            result = self._run(item)
            now = time.perf_counter()
            if not ended:
                first_end = now
            ended.append(result)
            ran = now - started
            # a run that waited for half its time or more counts as long: such jobs gain
            # from running side by side, however short
            cost = ran if time.thread_time() - cpu >= ran / 2 else ran + limit
            typical[task] = cost if task not in typical else typical[task] * 0.75 + cost * 0.25
