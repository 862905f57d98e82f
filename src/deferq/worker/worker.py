"""The worker process: lease jobs for free slots, run them, settle outcomes in batches.

Threads, each with one job:
- main: leases as many due jobs as there are free slots and hands each to a runner;
  idle, it blocks in the store's `wait_for_work`. While jobs run shorter than a round
  trip to the store, it leases a few more (`ahead`, at most concurrency): they wait in
  the worker, leased and heartbeated, and a slot that frees starts the next of them at
  once (a runner that finishes a job takes it itself), so slots do not idle through the
  settler's round trip. Their timeout counts from their start; a stop or a quiet
  order gives them back at once, the attempt not counted. Long jobs lease no more than
  the free slots (no job waits behind a long one while another worker idles).
- chunk tasks (deferq.chunks): their leased jobs gather in the worker (gather.py),
  leased and heartbeated, until a call is due (`size` jobs, or the first waited `wait`);
  a call takes one slot, and its jobs' outcomes join the settle batches one by one. A
  worker whose queues hold chunk tasks only claims as many more jobs as their chunks lack.
- runners: a thread per slot for sync tasks, woken one at a time (runners.py: short
  jobs run back to back on one thread); one event-loop thread for async tasks (a sync
  task never runs on the loop thread).
- settler: takes finished outcomes, settles them in one round trip per batch (a small
  batch first waits, at most GATHER, for the jobs still running to end), fires hooks,
  frees the slots; the same round trip leases jobs for the freed slots.
- keeper: renews leases (heartbeats), enforces timeouts, publishes what this worker runs.
- upkeep (upkeep/): takes part in electing the one process that recovers expired leases
  of dead workers, purges old results and fires schedules, and does so while it leads.

Exit codes: 0 after a normal stop, 3 when a sync job overran its timeout (its thread
cannot be killed, so the process asks to be replaced: `deferq run` starts another child,
a plain `deferq worker` starts itself again in place, cli/restart.py), 1 on an
unexpected error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ..attempt.chunk import run_chunk, run_chunk_async
from ..attempt.pauses import ARMED, pause_at
from ..attempt.progress import ProgressWriter
from ..attempt.runner import decide_failure, run_async, run_sync, stopped
from ..backends.base import Outcome, OutcomeKind
from ..backends.guard import STORE_FAILURES, StoreGuard
from ..context import JobControl, Slot
from ..errors import DeferqError, JobTimeout, first_line
from ..job import Job, copier
from ..observe.logs import lines_together
from ..registry import TaskSpec
from ..upkeep import Upkeep
from . import orders
from .gather import RECHECK, ChunkCall, Gather, sort_out
from .memory import Trimmer
from .priorities import PriorityRotation
from .runners import STALL, Runners

if TYPE_CHECKING:
    from ..app import App
    from ..registry import Registry
    from ..task import Runtime

log = logging.getLogger("deferq.worker")

EXIT_OK, EXIT_ERROR, EXIT_OVERRAN = 0, 1, 3
# The longest a small settle batch waits for the jobs still running to end and join it:
# one round trip for several short jobs (a job ending later than that is settled next).
GATHER = 0.0005
# How fast the worker's measures of a job's run time and of a settle's round trip follow
# the latest batch (moving averages): what decides how many jobs it leases ahead.
FOLLOW = 0.25
T = TypeVar("T")
Ended = tuple[Job, Outcome, "BaseException | None", float]  # a sync job that returned, and when
Work = tuple[TaskSpec, Job, JobControl]  # a job for a slot
Ran = tuple[Outcome, "BaseException | None"]  # an outcome to settle, and the run's exception
# what a settled batch reads of each job, each in one C call over the batch
_FIRST, _JOB, _KIND = itemgetter(0), attrgetter("job"), attrgetter("kind")
_ID, _ATTEMPTS, _TASK = attrgetter("id"), attrgetter("attempts"), attrgetter("task")
_with_ran: Callable[[Outcome, float], Outcome] = copier(Outcome, "ran", checked=False)


@dataclass
class WorkerConfig:
    queues: tuple[str, ...] = ("default",)
    concurrency: int = 8
    burst: bool = False  # exit when no job is due
    once: bool = False  # run one job, then exit
    grace: float = 25.0  # seconds running jobs get to finish after a stop signal
    name: str = field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    )
    max_jobs: int | None = None  # exit after this many jobs (the supervisor's recycling)
    # The poll interval (`deferq worker --poll-interval`): the longest an idle worker waits
    # on the store before it asks again. Stores that announce new jobs wake it sooner; a
    # stop signal is noticed within it.
    idle_wait: float = 1.0
    prefetch: int | None = None  # leases beyond concurrency (finished, awaiting settle); None = concurrency
    # Jobs leased beyond the free slots while jobs run shorter than a round trip (they wait
    # in the worker for a slot): at most this many; None = concurrency, 0 = never.
    ahead: int | None = None
    # Take part in the store's upkeep: sweeps and firing schedules, by one process at a time
    # (upkeep/); a --burst or --once worker fires nothing, and sweeps once at its start if
    # no process leads.
    schedules: bool = True


@dataclass(slots=True)
class Running:
    job: Job
    spec: TaskSpec
    started: float
    deadline: float | None
    control: JobControl
    held: bool = False  # leased ahead, waiting in the worker for a slot (not started)
    abandoned: bool = False  # settled as timed out while its thread still runs
    ended: float | None = None  # when the task returned (monotonic)


class Worker:
    def __init__(self, app: App | Runtime[Registry], config: WorkerConfig | None = None) -> None:
        """`app`: an App, or the runtime under it (task.Runtime): all a worker uses of it is
        the store, the tasks and their chain, and the settings."""
        runtime = app.runtime  # the store, the tasks, the chain, the settings (task.Runtime)
        self.backend = runtime.backend
        self.registry = runtime.registry  # the tasks: resolved once per job into a TaskSpec
        self.lease, self.result_ttl = runtime.lease, runtime.result_ttl
        self.chain = runtime.chain  # every feature: the jobs' hooks, and the keeper's (worker_tick)
        if self.chain.sealer is not None:  # an App that encrypts: no worker without its key
            self.chain.sealer.check_ready("the worker")
        self.config = config or WorkerConfig()
        if self.config.once:
            self.config.concurrency = 1
        if self.config.concurrency < 1:
            raise DeferqError("concurrency must be at least 1")
        if self.config.prefetch is None:
            self.config.prefetch = self.config.concurrency
        self.rotation = PriorityRotation(runtime.priority_weights)
        self.running: dict[str, Running] = {}  # leased and not yet settled
        # leased batches in their after_claim hooks (a chord callback reading a thousand
        # results may take longer than a lease): heartbeated before they enter `running`
        self.claiming: list[list[Job]] = []
        self.busy = 0  # jobs executing now: a slot frees when its job returns, before settling
        self.held: deque[Work] = deque()  # leased ahead, not started
        # Chunk tasks (chunks.py): their leased jobs wait in `gather` until a call is due,
        # then as a call in `ready_chunks` for a slot. Leases of their jobs are counted
        # apart (`chunk_leases`). When every task on this worker's queues is a chunk task,
        # a claim asks for up to `chunk_room` more of them (one claim can fill a chunk).
        self.gather = Gather()
        self.ready_chunks: deque[ChunkCall] = deque()
        self.chunk_leases = 0  # jobs of chunk tasks in `running`
        mine = [t for t in runtime.registry.tasks.values() if t.defaults.queue in self.config.queues]
        # a claim asks for more only where no other task's jobs could fill the room instead
        self.chunk_room = sum(t.chunk.size for t in mine if t.chunk) if all(t.chunk for t in mine) else 0
        self.chunk_tasks = frozenset(t.name for t in runtime.registry.tasks.values() if t.chunk)
        self.ahead = 0  # jobs to lease beyond the free slots now (_measure)
        self.job_time: float | None = None  # moving average of a job's run, seconds
        self.trip_time: float | None = None  # moving average of a settle's round trip, seconds
        self.claimed = 0  # slots promised to a reserve call in flight
        self.lock = threading.Lock()
        self.slot_freed = threading.Event()
        self.keeper_done = threading.Event()  # set at shutdown, once no job is left to keep
        # outcomes to settle: one at a time, or a chunk call's as one list (one put and one get a call)
        self.outcomes: queue.SimpleQueue[Ran | list[Ran] | None] = queue.SimpleQueue()
        self.stopping = threading.Event()
        self.quiet = threading.Event()  # ordered quiet (orders.py): take no new job, stay up
        self.exit_code = EXIT_OK
        self.asked_to_stop = False  # by a signal, an order or a caller (not by an overrun)
        self.processed = 0
        self.settling = False  # the settler holds outcomes: it will lease for their slots
        self.to_claim = False  # the settler holds outcomes and has not yet claimed free slots for them
        self.gathering = False  # the settler waits for the running jobs to end (_gather)
        self.gathered = threading.Event()  # set when the last of them ended
        self.in_settle: set[tuple[str, int]] = set()  # (job id, attempt) whose settle call is in flight
        self.runners: Runners[Work | ChunkCall, Ended | list[Ran]] = Runners(
            self.config.concurrency, self._run_sync, self._finished_many, lambda item: item[0].name)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self.guard = StoreGuard(log)
        # This worker's own records (its status for the console, the orders left for it) are
        # side records: on a store of several servers the one keeping them may be down while
        # jobs flow. Said once, as a warning; never a reason to back off (_side_call).
        self.side_guard = StoreGuard(
            log, down="this worker's status and orders cannot be reached (the console may not list it, "
                      "orders to it wait): %s",
            back="this worker's status and orders reached again after %.1fs", down_level=logging.WARNING)
        # a finished job holds its lease until settled: never hold more than concurrency +
        # prefetch leases of jobs that started (crash re-runs), plus those leased ahead
        self.started_leases = self.config.concurrency + (self.config.prefetch or 0)
        if self.config.ahead is None:
            self.config.ahead = 0 if self.config.once else self.config.concurrency
        self.max_leases = self.started_leases + self.config.ahead
        self._half = max(1, self.config.concurrency // 2)  # free slots the lease loop fills itself
        self.last_beat = time.monotonic()  # when a heartbeat last reached the store
        self.trimmer = Trimmer()  # gives freed memory back when the worker goes idle
        # progress reports of running jobs, throttled, on a thread of their own (progress.py)
        self.progress = ProgressWriter(
            lambda jobs: self._store_call(self.backend.record_progress, self.chain.progress_to_store(jobs)))
        self.upkeep = Upkeep(runtime, self.config.name) if self.config.schedules else None

    # -- life cycle -------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped (signal, --burst, --once, max_jobs). Returns the exit code."""
        self._install_signals()
        log.info(
            "worker %s started: queues %s, concurrency %d",
            self.config.name, ",".join(self.config.queues), self.config.concurrency,
        )
        self.runners.start()
        self._store_call(self.chain.worker_tick)  # e.g. limits set at run time: known before the first job
        targets: list[Callable[[], None]] = [self._settle_loop, self._keeper_loop]
        for target in targets:
            thread = threading.Thread(target=target, name=target.__name__, daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.upkeep is not None and (self.config.burst or self.config.once):
            self.upkeep.once()
        elif self.upkeep is not None:
            self._threads.append(self.upkeep.start(self.stopping))
        try:
            self._lease_loop()
        except Exception:
            log.exception("worker %s failed", self.config.name)
            self.exit_code = EXIT_ERROR
        finally:
            self._shutdown()
        return self.exit_code

    def stop(self, asked: bool = True) -> None:
        """Stop taking jobs; running jobs get the grace period to finish. `asked`: not
        the worker's own stop after an overrun (then a plain worker starts again)."""
        self.asked_to_stop |= asked
        if not self.stopping.is_set():
            log.info("worker %s stopping: finishing %d running job(s)", self.config.name, len(self.running))
        self.stopping.set()
        self.slot_freed.set()

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def stop_on(signum: int) -> None:
            if self.stopping.is_set() and signum == signal.SIGINT:
                log.warning("second interrupt: releasing running jobs now")
                self.config.grace = 0
            self.stop()

        def on_signal(signum: int, _frame: object) -> None:
            # A handler runs in the main thread between two bytecodes, perhaps inside a
            # wait on one of the worker's events, holding its lock: setting that event
            # here would wait for the lock forever. So the stop happens on a thread
            # (the ask is noted at once: a restart after an overrun must not miss it).
            self.asked_to_stop = True
            threading.Thread(target=stop_on, args=(signum,), name="deferq-stop", daemon=True).start()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)

    def _shutdown(self) -> None:
        self.stopping.set()
        self._give_back_held()
        deadline = time.monotonic() + self.config.grace
        while self._live_count() and time.monotonic() < deadline:
            self.slot_freed.wait(0.05)
            self.slot_freed.clear()
        with self.lock:
            left = [r.job for r in self.running.values() if not r.abandoned]
        if left:
            log.warning("releasing %d unfinished job(s) back to their queues", len(left))
            self._store_call(self.backend.settle, [Outcome(job, OutcomeKind.RELEASE) for job in left])
        with self.lock:
            self.running.clear()  # released or abandoned: nothing left to heartbeat
            self.chunk_leases = 0
        self.keeper_done.set()  # its sleep ends now, not up to half a second into the exit
        self.outcomes.put(None)
        for thread in self._threads:
            thread.join(timeout=5)
        self.chain.worker_stopped()  # the plug-ins' last words: this worker's last seconds of history
        self._side_call(self.backend.kv_delete, "workers", self.config.name)
        self._side_call(orders.clear, self.backend, self.config.name)
        self.runners.close()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        log.info("worker %s stopped after %d job(s)", self.config.name, self.processed)

    # -- leasing and dispatch ---------------------------------------------------------

    def _live_count(self) -> int:
        with self.lock:
            return sum(1 for r in self.running.values() if not (r.abandoned or r.held))

    def _give_back_held(self) -> None:
        """Stopping or ordered quiet: the jobs leased ahead go back to their queues at
        once, their attempt not counted (another worker runs them now)."""
        with self.lock:
            jobs = self._unhold(None)
        if jobs:
            log.info("giving back %d job(s) leased ahead", len(jobs))
            self._store_call(self.backend.settle, [Outcome(job, OutcomeKind.RELEASE) for job in jobs])

    def _unhold(self, ids: set[str] | None, keep: bool = False) -> list[Job]:
        """Called with the lock held: take the jobs leased ahead (those of `ids`, or all)
        off the waiting line (and the jobs of chunk tasks not started), and unless
        `keep`, forget them."""
        dropped = [job for _, job, _ in self.held if ids is None or job.id in ids]
        if dropped:
            self.held = deque(item for item in self.held if ids is not None and item[1].id not in ids)
        if self.gather or self.ready_chunks:
            dropped += self._unhold_chunks(ids)
        for job in dropped if not keep else ():
            self._forget(job.id)
        return dropped

    def _unhold_chunks(self, ids: set[str] | None) -> list[Job]:
        """Called with the lock held: the jobs of chunk tasks not started, of `ids` or all."""
        dropped = self.gather.drop(ids)
        calls = []
        for call in self.ready_chunks:
            members = [(job, control) for job, control in call.members if ids is not None and job.id not in ids]
            dropped += [job for job, _ in call.members if ids is None or job.id in ids]
            if members:
                calls.append(call._replace(members=members))
        self.ready_chunks = deque(calls)
        return dropped

    def _forget(self, job_id: str) -> Running:
        """Called with the lock held: the job is no longer this worker's."""
        running = self.running.pop(job_id)
        if running.spec.chunk is not None:
            self.chunk_leases -= 1
        return running

    def _claim_slots(self, settling: int = 0, ahead: bool = True, chunk_settling: int = 0) -> int:
        """Promise the free slots to one reserve call, so two threads never over-lease.
        `settling`: leases that the same call ends (a settle's batch; `chunk_settling` of
        them jobs of chunk tasks); `ahead`: and the jobs to lease ahead (not for a wait on
        an empty queue: a burst that ends it is shared with the other workers).

        On queues of chunk tasks only, the call asks for as many more jobs as their
        chunks lack (`chunk_room`): one claim can fill a chunk. A job of another task
        it brings (enqueued there by name) waits as a job leased ahead, and the next
        claims ask for that many fewer."""
        with self.lock:
            if self.stopping.is_set() or self.quiet.is_set() or self._done_taking():
                return 0
            free = (self.config.concurrency + (self.ahead if ahead else 0)
                    - self.busy - len(self.held) - self.claimed)
            # a finished job holds its lease until settled: never hold more than
            # max_leases, however far settling falls behind
            plain = len(self.running) - self.chunk_leases - (settling - chunk_settling)
            free = min(free, self.max_leases - plain - self.claimed)
            if self.chunk_room:
                waiting = self.gather.count + sum(len(call.members) for call in self.ready_chunks)
                free = max(0, free) + max(0, self.chunk_room - waiting)
                free = min(free, self.chunk_room + self.max_leases - plain - self.claimed)
            if self.config.max_jobs is not None:
                free = min(free, self.config.max_jobs - self.processed - len(self.running) - self.claimed)
            free = max(free, 0)
            self.claimed += free
            return free

    def _accept(self, jobs: list[Job] | None, claimed: int, woken: bool = False) -> None:
        """Take leased jobs into the promised slots, give back the rest, and start them.
        `woken`: they came to an idle wait; the first starts before this thread goes on."""
        now = time.monotonic()
        # the chain's after_claim hooks (a workflow step's inputs, durable checkpoints), each job's control
        spec_for, taken = self.registry.spec_for, self._claimed(jobs) if jobs else ()
        started = [(spec_for(job), job, control) for job, control in taken]
        with self.lock:
            self.claimed -= claimed
            for spec, job, control in started:  # a free slot starts it now, else it waits (leased ahead)
                replaced = self.running.get(job.id)  # its last attempt, snoozed, not yet dropped
                if replaced is not None and replaced.spec.chunk is not None:
                    self.chunk_leases -= 1
                self.running[job.id] = Running(job, spec, now, None, control, held=True)
            if self.chunk_tasks and any(item[0].chunk is not None for item in started):
                started = self._gather_chunks(started, now)
            self.held.extend(started)
            work = self._take_held(now, len(self.held) + len(self.ready_chunks))
        if (self.held or self.gather or self.ready_chunks) and (self.stopping.is_set() or self.quiet.is_set()):
            self._give_back_held()
        self._launch(work, woken)

    def _claimed(self, jobs: list[Job]) -> list[tuple[Job, JobControl]]:
        """The chain's after_claim hooks on `jobs`, their leases renewed meanwhile."""
        with self.lock:
            self.claiming.append(jobs)
        try:
            return self.chain.claimed(jobs, self.progress.report)
        finally:
            with self.lock:
                self.claiming.remove(jobs)

    def _gather_chunks(self, started: list[Work], now: float) -> list[Work]:
        """Called with the lock held: the jobs of chunk tasks among `started` wait in
        `gather`, and the calls now due go to `ready_chunks`; the other jobs are returned."""
        plain = [item for item in started if item[0].chunk is None]
        chunked = [item for item in started if item[0].chunk is not None] if plain else started
        self.gather.add_many(chunked, now)
        self.chunk_leases += len(chunked)
        self._ripe_calls(now)
        return plain

    def _ripe_calls(self, now: float, everything: bool = False) -> None:
        """Called with the lock held: the calls now due go to `ready_chunks`; a job whose
        expiry passed while it waited ends cancelled ("expired"), as the store ends one
        that expired before its claim."""
        self.ready_chunks.extend(self.gather.ripe(now, everything, time.time()))
        for job in self.gather.expired:
            if (running := self.running.get(job.id)) is not None:
                running.held, running.ended = False, now
            self.outcomes.put((Outcome(job, OutcomeKind.CANCELLED, error="expired"), None))
        self.gather.expired.clear()

    def _ripen(self, now: float) -> None:
        """The keeper's tick: the chunks whose first job has waited long enough go."""
        with self.lock:
            due = self.gather.next_due()
            if due is None or now < due:
                return
            self._ripe_calls(now, everything=self.stopping.is_set())
            work = self._take_held(now, len(self.ready_chunks))
        self._launch(work)

    def _launch(self, started: list[Work | ChunkCall], hand_over: bool = False) -> None:
        sync = [item for item in started if not item[0].is_async]
        if sync:
            self.runners.submit(sync, hand_over)
        if len(sync) < len(started):
            for item in started:
                if item[0].is_async:
                    self._start_any_async(item)

    def _start_any_async(self, item: Work | ChunkCall) -> None:
        if isinstance(item, ChunkCall):
            self._start_async_chunk(item)
        else:
            self._start_async(*item)

    def _start_async_chunk(self, call: ChunkCall) -> None:
        """One call of an async chunk task on the event loop; its jobs' outcomes go to the
        settler as it ends (its one slot freed with the first)."""
        timeouts = [t for job, _ in call.members if (t := self.registry.spec_for(job).timeout)]

        async def rechecked() -> list[tuple[Outcome, BaseException | None]]:
            kept, left_out = await asyncio.to_thread(self._recheck, call)
            ran = (await run_chunk_async(kept.spec, kept.members, self.chain, min(timeouts) if timeouts else None)
                   if kept.members else [])
            return [(o, None) for o in left_out] + ran

        future = asyncio.run_coroutine_threadsafe(rechecked(), self._event_loop())

        def ended(done: Future[list[tuple[Outcome, BaseException | None]]]) -> None:
            try:
                ran = done.result()
            except BaseException as error:  # noqa: BLE001 - cancelled at shutdown, or a runner bug
                ran = [(decide_failure(call.spec, job, error), error) for job, _ in call.members]
            # (every lease of the call lost: nothing to settle, the slot frees all the same)
            ran, after = self._call_ended(ran, time.monotonic(), self.config.concurrency)
            self._finished_call(ran)
            self._launch(after)

        future.add_done_callback(ended)

    def _done_taking(self) -> bool:
        """Called with the lock held."""
        if self.config.once:
            return self.processed >= 1 or bool(self.running) or self.claimed > 0
        return self.config.max_jobs is not None and self.processed >= self.config.max_jobs

    def _lease_loop(self) -> None:
        """Lease for free slots; when the store has nothing due, wait on it. (The settler
        also leases, in the same round trip as each settle, while jobs keep coming.)"""
        cfg = self.config
        drained = False  # the last lease took fewer jobs than it asked for: wait before the next
        while not self.stopping.is_set():
            claimed = 0 if self._settler_will_lease() else self._claim_slots(ahead=not drained)
            if claimed <= 0:
                with self.lock:
                    finished = self._done_taking() and not self.running and not self.claimed
                if finished:
                    return
                self.slot_freed.wait(cfg.idle_wait)
                self.slot_freed.clear()
                continue
            with self.lock:  # nothing in flight as the store is asked: its answer is final
                idle = not self.running and self.claimed == claimed
            if drained and cfg.burst and not idle:
                # a burst ends once its own jobs have and nothing is due: it waits on them, not
                # on the store (whose wait would keep it up to idle_wait past its last job)
                with self.lock:
                    self.claimed -= claimed
                self.slot_freed.wait(cfg.idle_wait)
                self.slot_freed.clear()
                continue
            order = self.rotation.next_order()
            if drained and not cfg.burst:  # the free slots promised to what the wait brings (Redis leases as
                # it wakes)
                jobs = self._store_call(
                    self.backend.wait_and_reserve, cfg.queues, cfg.idle_wait, claimed, cfg.name, self.lease, order
                )
            else:
                jobs = self._store_call(self.backend.reserve, cfg.queues, claimed, cfg.name, self.lease, order)
            # stopped or ordered quiet while the store was asked (a wait can last idle_wait): not ours to run
            if jobs and (self.stopping.is_set() or self.quiet.is_set()):
                self._store_call(self.backend.settle, [Outcome(job, OutcomeKind.RELEASE) for job in jobs])
                jobs = []
            self._accept(jobs, claimed, woken=drained)
            if jobs is None:  # store unreachable: _store_call logged and backed off
                continue
            if not jobs and cfg.burst and idle:
                return
            drained = len(jobs) < claimed

    def _settler_will_lease(self) -> bool:
        """Finished jobs are waiting to be settled: the settler leases for their slots in
        the same round trip, so the lease loop leaves the free slots to it while its next
        call is about to go out (one round trip settles and refills, not two). While its
        call is in flight, the lease loop leaves it a few, and fills them itself when half
        the slots or more are idle: a second call beside the settler's."""
        if self.to_claim or (not self.settling and not self.outcomes.empty()):
            return True
        if not self.settling:
            return False
        with self.lock:
            free = self.config.concurrency - self.busy - self.claimed
        return free < self._half

    def _start_async(self, spec: TaskSpec, job: Job, control: JobControl) -> None:
        coro = run_async(spec, job, self.chain, control)
        future = asyncio.run_coroutine_threadsafe(coro, self._event_loop())
        future.add_done_callback(lambda f: self._finished(job, *_result(spec, job, f)))

    def _run_sync(self, item: Work | ChunkCall) -> Ended | list[Ran]:
        """On a runner thread (runners.py): one sync job (no futures: they cost on the hot
        path), or one call of a chunk task. Its outcome goes to `_finished_many` with those
        of the short jobs the same runner ran next."""
        if isinstance(item, ChunkCall):
            return self._run_chunk(item)
        spec, job, control = item
        try:
            outcome, exc = run_sync(spec, job, self.chain, control)
        except BaseException as error:  # noqa: BLE001 - a runner bug must not lose the job
            outcome, exc = decide_failure(spec, job, error), error
        at = time.monotonic()
        with self.lock:
            self.busy -= 1  # the slot is free now; its outcome follows with the others this runner ran
            if (running := self.running.get(job.id)) is not None and running.job is job:
                running.ended = at  # returned: no timeout applies while its outcome waits for the others
            after = self._take_held(at, 1) if self.held or self.ready_chunks else ()
        self._next(after)
        return job, outcome, exc, at

    def _next(self, after: Sequence[Work | ChunkCall]) -> None:
        """On a runner thread: what it runs next (an async job: on the event loop)."""
        for item in after:
            if item[0].is_async:
                self._start_any_async(item)
            else:
                self.runners.put(item)

    def _run_chunk(self, call: ChunkCall) -> list[Ran]:
        """On a runner thread: one call of a chunk task, an outcome per job."""
        call, left_out = self._recheck(call)
        try:
            ran = run_chunk(call.spec, call.members, self.chain) if call.members else []
        except BaseException as error:  # noqa: BLE001 - a runner bug must not lose the jobs
            ran = [(decide_failure(call.spec, job, error), error) for job, _ in call.members]
        if left_out:
            ran = [(o, None) for o in left_out] + ran
        ran, after = self._call_ended(ran, time.monotonic(), 1)
        self._next(after)
        return ran

    def _call_ended(self, ran: list[Ran], at: float, most: int) -> tuple[list[Ran], list[Work | ChunkCall]]:
        """A chunk call returned at `at` with its jobs' outcomes (`ran`): its one slot is
        free, and each job's end is noted (no timeout applies while its outcome waits for
        the settler), all under one lock; a job already settled as timed out is left out.
        Also what the freed slot starts next (up to `most`)."""
        dropped: list[int] = []  # positions in `ran`
        with self.lock:
            self.busy -= 1
            running_of = self.running.get
            for i, (outcome, _) in enumerate(ran):
                job = outcome.job
                running = running_of(job.id)
                if running is not None:
                    if running.abandoned:
                        self._forget(job.id)  # already settled as timed out
                        dropped.append(i)
                    elif running.job is job:
                        running.ended = at
            after = self._take_held(at, most) if self.held or self.ready_chunks else []
        if dropped:
            self.slot_freed.set()
            ran = [one for i, one in enumerate(ran) if i not in dropped]
        return ran, after

    def _recheck(self, call: ChunkCall) -> tuple[ChunkCall, list[Outcome]]:
        """A call whose jobs waited in the worker (RECHECK): just before the function sees
        them, the store says which are still this worker's, cancelled, or of a queue
        paused meanwhile (a heartbeat of them and the paused queues: two round trips a
        call, only for calls that waited). Those it must not run are left out, with their
        outcomes (gather.sort_out); a lost lease is forgotten, as a heartbeat does."""
        if time.monotonic() - call.since < RECHECK:
            return call, []
        jobs = [job for job, _ in call.members]
        beat = self._store_call(self.backend.heartbeat, jobs, self.lease)
        paused = self._store_call(self.backend.paused) if beat is not None else None
        if beat is None or paused is None:  # the store is down: its settle will tell
            return call, []
        kept, left_out, lost = sort_out(call, beat, paused, time.time())
        back = [o for o in left_out if o.kind == OutcomeKind.RELEASE]
        if back:  # not run, not processed: given back at once, as the jobs leased ahead at a stop
            log.info("giving back %d job(s) of %s(): their queue was paused", len(back), call.spec.name)
            self._store_call(self.backend.settle, back)
            left_out = [o for o in left_out if o.kind != OutcomeKind.RELEASE]
        with self.lock:
            for job in lost + [o.job for o in back]:
                if (running := self.running.get(job.id)) is not None and running.job is job:
                    self._forget(job.id)
        for job in lost:
            log.warning("job %s: lease lost (%s)", job.id, self._why_lost())
        with self.lock:
            for outcome in left_out:
                if (running := self.running.get(outcome.job.id)) is not None and running.job is outcome.job:
                    running.ended = time.monotonic()
        return call._replace(members=kept), left_out

    def _take_held(self, now: float, most: int) -> list[Work | ChunkCall]:
        """Called with the lock held: start up to `most` jobs leased ahead, or calls of
        chunk tasks (first: their jobs have waited), as slots are free (their timeout
        counts from now), unless stopping or quiet."""
        taken: list[Work | ChunkCall] = []
        while (self.ready_chunks and len(taken) < most and self.busy < self.config.concurrency
               and not (self.stopping.is_set() or self.quiet.is_set())):
            call = self.ready_chunks.popleft()
            # only the jobs still this worker's (a lease lost meanwhile was dropped)
            running_of = self.running.get
            runs = [running for job, _ in call.members
                    if (running := running_of(job.id)) is not None and running.job is job]
            if not runs:
                continue
            if len(runs) < len(call.members):
                kept = {id(running.job) for running in runs}
                call = call._replace(members=[(job, control) for job, control in call.members if id(job) in kept])
            timeouts = [timeout for running in runs if (timeout := running.spec.timeout)]
            # one call, one deadline: the shortest timeout of its jobs
            deadline = now + min(timeouts) if timeouts else None
            for running in runs:
                running.held, running.started, running.deadline = False, now, deadline
            self.busy += 1
            taken.append(call)
        while (self.held and len(taken) < most and self.busy < self.config.concurrency
               and not (self.stopping.is_set() or self.quiet.is_set())
               and len(self.running) - self.chunk_leases - len(self.held) < self.started_leases):
            spec, job, control = item = self.held.popleft()
            running = self.running[job.id]
            running.held, running.started = False, now
            running.deadline = now + spec.timeout if spec.timeout else None
            self.busy += 1
            taken.append(item)
        return taken

    def _start_held(self) -> None:
        """A slot freed by an async job: start the jobs leased ahead that fit."""
        with self.lock:
            items = (self._take_held(time.monotonic(), self.config.concurrency)
                     if self.held or self.ready_chunks else [])
        self._launch(items)

    def _finished_many(self, ended: list[Ended | list[Ran]]) -> None:
        for one in ended:
            if isinstance(one, list):  # a chunk task's call
                self._finished_call(one)
            else:
                self._finished(*one, freed=False)

    def _finished_call(self, ran: list[Ran]) -> None:
        """A chunk call's outcomes, for the settler, as `_finished` gives one job's: their
        slot freed and their ends noted already (_call_ended), given as one list."""
        with self.lock:
            wake = self.settling and self.config.concurrency - self.busy - self.claimed >= self._half
            gathered = self.gathering and not self.busy
        progress = self.progress  # (read without its lock: see ProgressWriter.written)
        if progress.pending or progress.written:  # a job that reported: its last report first
            reported = {o.job.id for o, _ in ran if o.job.id in progress.pending or o.job.id in progress.written}
            for one in ran:
                if one[0].job.id in reported:
                    self.progress.finish(one[0].job.id, partial(self.outcomes.put, one))
            if reported:
                ran = [one for one in ran if one[0].job.id not in reported]
                wake = True  # the settler may not hear of them yet: the lease loop takes the slot
        if ran:
            self.outcomes.put(ran)
        if wake or not ran:
            self.slot_freed.set()
        if gathered:
            self.gathered.set()

    def _finished(self, job: Job, outcome: Outcome, exc: BaseException | None, at: float | None = None,
                  freed: bool = True) -> None:
        """A job's outcome, for the settler. `freed`: its slot is freed here (a sync job's
        was freed as it returned, by _run_sync)."""
        with self.lock:
            if freed:
                self.busy -= 1
            running = self.running.get(job.id)
            abandoned = running is not None and running.abandoned
            if abandoned:
                self._forget(job.id)  # already settled as timed out
            elif running is not None:
                running.ended = at or time.monotonic()
            # the settler leases for this slot when it settles the outcome (an idle one
            # wakes for it); the lease loop only takes slots from a settler in flight when
            # half or more are free (_settler_will_lease)
            wake = (self.settling and self.config.concurrency - self.busy - self.claimed >= self._half
                    ) or abandoned
            gathered = self.gathering and not self.busy
        progress = self.progress  # (read without its lock: see ProgressWriter.written)
        if job.id in progress.pending or job.id in progress.written:  # its last report first, then the outcome
            self.progress.finish(job.id, _nothing if abandoned else lambda: self.outcomes.put((outcome, exc)))
            wake = True  # the settler may not hear of it yet: the lease loop takes the slot
        elif not abandoned:
            self.outcomes.put((outcome, exc))
        if wake:
            self.slot_freed.set()
        if gathered:
            self.gathered.set()
        if freed and (self.held or self.ready_chunks):
            self._start_held()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="deferq-async", daemon=True)
            thread.start()
            self._loop = loop
        return self._loop

    # -- settling ---------------------------------------------------------------------

    def _settle_loop(self) -> None:
        while True:
            item = self.outcomes.get()
            self.settling = self.to_claim = True
            if item is not None and self.outcomes.qsize() < self._half - 1:
                self._gather()
            batch: list[Ran] = []
            while item is not None:
                if type(item) is list:  # a chunk call's outcomes
                    batch += item
                else:
                    batch.append(item)  # type: ignore[arg-type]
                try:
                    item = self.outcomes.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._settle(batch)
            self.settling = self.to_claim = False
            self._wake_for_free_slots()  # slots the settler could not fill are the lease loop's again
            if item is None:
                return

    def _wake_for_free_slots(self) -> None:
        """Wake the lease loop when slots are free that no outcome waiting to be settled
        will lease for (the settler leases for those): while every slot is busy or about
        to be refilled by the settler, the lease loop sleeps on (a wake-up a batch saved)."""
        with self.lock:
            free = self.config.concurrency - self.busy - len(self.held) - self.claimed
            done = not self.running and not self.claimed
        if free > self.outcomes.qsize() or done or self.stopping.is_set():
            self.slot_freed.set()

    def _gather(self) -> None:
        """Wait, at most GATHER, for the jobs running now to end, so that their outcomes
        share the round trip (woken once, by the last of them)."""
        self.gathered.clear()
        with self.lock:
            self.gathering = self.busy > 0
        if self.gathering:
            self.gathered.wait(GATHER)
            self.gathering = False

    def _settle(self, batch: list[tuple[Outcome, BaseException | None]]) -> None:
        """Settle a batch and, in the same round trip, lease jobs for the free slots."""
        if ARMED:  # a freeze-and-kill test's point (attempt/pauses.py)
            pause_at("settle.before")
        outcomes = self._counted_from_the_end(list(map(_FIRST, batch)))
        applied = None
        settling = list(map(_JOB, outcomes))
        attempts = set(zip(map(_ID, settling), map(_ATTEMPTS, settling), strict=True))
        with self.lock:
            self.in_settle |= attempts
        chunked = sum(map(self.chunk_tasks.__contains__, map(_TASK, settling))) if self.chunk_tasks else 0
        while True:
            # the batch's leases end in the call that takes the new ones: they are not counted
            claimed = self._claim_slots(len(outcomes), chunk_settling=chunked)
            self.to_claim = False
            sent = time.perf_counter()
            reply = self._store_call(self._settle_and_reserve, outcomes, claimed)
            trip = time.perf_counter() - sent
            applied, jobs = reply if reply is not None else (None, None)
            # the store is gone during shutdown: leases will expire, nothing lost
            if applied is not None or self.stopping.is_set():
                break
            self._accept(jobs, claimed)
        ran = self._drop_settled(outcomes, attempts)  # first: a job may be leased anew by this call
        self._accept(jobs, claimed)  # starts the jobs leased ahead that the dropped leases allow too
        if applied is not None:
            self._measure(trip, ran)
        self._wake_for_free_slots()
        settled = []
        for (o, exc), ok, seconds in zip(batch, applied or [False] * len(batch), ran, strict=True):
            if ok:  # as settled, with how long it ran (a copy: checked as it was made)
                settled.append((_with_ran(o, seconds or 0.0), exc))
            else:
                log.warning("job %s (%s) finished after losing its lease (%s); outcome dropped",
                            o.job.id, o.job.task, self._why_lost())
        if len(settled) > 1:
            with lines_together():  # the batch's job lines: one write
                # the chain's settle hooks: durable steps' ends and wakes (a call a batch), history, log lines
                self.chain.settled(settled)
        elif settled:
            self.chain.settled(settled)

    def _settle_and_reserve(self, outcomes: list[Outcome], claimed: int) -> tuple[list[bool], list[Job]]:
        """The batch's settle and the next leases in one call; a batch the store refuses
        (an outcome it cannot keep, not an outage) settles one by one, leasing nothing:
        one job's outcome never fails the others'."""
        cfg = self.config
        outcomes = self.chain.to_store(outcomes)  # sealed when the App encrypts
        try:
            return self.backend.settle_and_reserve(outcomes, cfg.queues, claimed, cfg.name, self.lease,
                                                   self.rotation.next_order())
        except STORE_FAILURES:
            raise
        except Exception as exc:  # noqa: BLE001 - the store refused the batch: each outcome alone
            log.warning("the store refused a settle of %d job(s) (%s); settling each alone",
                        len(outcomes), first_line(str(exc)) or type(exc).__name__)
        return self.backend.settle_each(outcomes), []

    def _drop_settled(self, outcomes: list[Outcome], attempts: set[tuple[str, int]]) -> list[float | None]:
        """The settled jobs are no longer this worker's: how long each ran, in the order
        of `outcomes` (None: not this worker's lease). A job that waits unstarted under
        the same id is a new lease of it, not the one settled: a snoozed job (its attempt
        not counted) leased again by a claim beside this settle."""
        ran: list[float | None] = []  # seconds each ran
        with self.lock:
            running_of, forget = self.running.get, self.running.pop
            chunk_leases = 0
            for outcome in outcomes:
                job = outcome.job
                running = running_of(job.id)
                if (running is not None and running.job.attempts == job.attempts
                        and not (running.held and running.job is not job)):
                    forget(job.id)  # _forget, inline: a settled batch holds the lock once
                    chunk_leases += running.spec.chunk is not None
                    ran.append((running.ended or time.monotonic()) - running.started)
                else:
                    ran.append(None)
            self.chunk_leases -= chunk_leases
            self.processed += len(outcomes)
            self.in_settle -= attempts
        return ran

    def _measure(self, trip: float, ran: list[float | None]) -> None:
        """Follow a settle's round trip and the jobs' run time; lease ahead as many jobs as
        the slots would finish during one round trip (at most `ahead`): none for jobs that
        run longer than a round trip, so a long job never holds jobs another worker could run."""
        runs = [seconds for seconds in ran if seconds is not None]
        if runs:
            mean = sum(runs) / len(runs)
            self.job_time = mean if self.job_time is None else self.job_time + FOLLOW * (mean - self.job_time)
        self.trip_time = trip if self.trip_time is None else self.trip_time + FOLLOW * (trip - self.trip_time)
        most = self.config.ahead or 0
        if self.job_time is not None:
            per_trip = self.config.concurrency * self.trip_time / self.job_time if self.job_time > 0 else most
            self.ahead = min(most, int(per_trip))

    def _counted_from_the_end(self, outcomes: list[Outcome]) -> list[Outcome]:
        """A snooze waits from when the job ended, not from when its settle reaches the
        store: a job given a rate limit's turn comes back at that turn, however long it
        waited in the settle batch."""
        if OutcomeKind.SNOOZE not in set(map(_KIND, outcomes)):
            return outcomes
        now = time.monotonic()
        with self.lock:
            ended = {o.job.id: r.ended for o in outcomes if (r := self.running.get(o.job.id)) is not None}
        return [dataclasses.replace(o, delay=max(0.0, o.delay - (now - (ended.get(o.job.id) or now))))
                if o.kind == OutcomeKind.SNOOZE else o for o in outcomes]

    # -- keeper: heartbeats, timeouts, this worker's limits ------------------------------

    def _keeper_loop(self) -> None:
        beat_every = max(self.lease / 3, 0.2)
        next_beat = time.monotonic()
        while not (self.stopping.is_set() and not self.running):
            now = time.monotonic()
            self._enforce_timeouts(now)
            if self.gather:
                self._ripen(now)
            self.runners.nudge()
            if now >= next_beat:
                self._heartbeat()
                next_beat = now + beat_every
            if self.guard.up:  # it mostly answers without the store: no sign that an outage ended
                self._store_call(self.chain.worker_tick)
            if not self.running:
                self.trimmer.idle(self.processed, now)
            self.keeper_done.wait(STALL if self._ticks_often() else min(beat_every, 0.5))

    def _ticks_often(self) -> bool:
        """Jobs run: timeouts to enforce, and queued jobs a runner may have to be woken for."""
        with self.lock:
            return bool(self.running)

    def _heartbeat(self) -> None:
        with self.lock:
            jobs = [r.job for r in self.running.values() if not r.abandoned]
            jobs += [job for batch in self.claiming for job in batch]  # renewed only: not yet ours to lose
            doing = [
                {"id": r.job.id, "task": r.job.task, "started": r.started}
                for r in self.running.values() if not r.held
            ]
        if jobs:
            beat = self._store_call(self.backend.heartbeat, jobs, self.lease)
            if beat is not None:
                with self.lock:  # a job settled since the snapshot, or being settled, was not lost:
                    # its settle says so if it was (an SQL store commits the settle before
                    # the lease of the same call, so the heartbeat can see it first)
                    lost = {j.id for j in jobs if j.id in beat and self._holds(j)
                            and (j.id, j.attempts) not in self.in_settle}
                    stop = [self.running[j.id] for j in jobs if j.id in beat.cancel_requested and self._holds(j)]
                    limited = [(r.job, r.control.slot) for j in sorted(lost)
                               if (r := self.running[j]).control.slot is not None]
                    if lost and (self.held or self.gather or self.ready_chunks):
                        # not started: never will be (another worker has it, or it ended)
                        self._unhold(lost)
                    if (self.held or self.gather or self.ready_chunks) and (
                            unstarted := {r.job.id for r in stop if r.held}):
                        self._unhold(unstarted, keep=True)  # cancelled before it started: not run
                        stop = [r for r in stop if r.job.id not in unstarted]
                        for job_id in sorted(unstarted):
                            self.running[job_id].held, self.running[job_id].ended = False, time.monotonic()
                            self.outcomes.put((stopped(self.running[job_id].job), None))
                for job_id in sorted(lost):
                    log.warning("job %s: lease lost (%s)", job_id, self._why_lost())
                for job, slot in limited:
                    self._check_slot(job, slot)
                for running in stop:
                    if not running.control.cancelled:
                        log.info("job %s %s: cancel requested, stopping it", running.job.id, running.job.task)
                        running.control.request_cancel()
                self.last_beat = time.monotonic()
        self._obey(self._side_call(orders.read, self.backend, self.config.name))
        status = {
            "name": self.config.name, "pid": os.getpid(), "host": socket.gethostname(),
            "queues": list(self.config.queues), "concurrency": self.config.concurrency,
            "processed": self.processed, "running": doing, "seen": time.time(),
            "monotonic": time.monotonic(), "quiet": self.quiet.is_set(), "stopping": self.stopping.is_set(),
            "limits": self._declared_limits(),
        }
        self._side_call(
            self.backend.kv_put, "workers", self.config.name, orjson.dumps(status),
            self.lease * 2,
        )

    def _declared_limits(self) -> dict[str, dict[str, Any]]:
        """What the code declares, for the console's Limits page: task -> its limits and queue."""
        tasks = self.registry.tasks
        return {name: {**limit.to_dict(), "queue": tasks[name].defaults.queue}
                for name, limit in self.registry.limits.items() if name in tasks}

    def _obey(self, order: dict[str, Any] | None) -> None:
        """An order left in the store (orders.py): quiet, or stop. One that comes while
        the worker winds down after an overrun is kept for what follows (cli/restart.py)."""
        if not order or self.asked_to_stop:
            return
        if not self.quiet.is_set():
            log.info("worker %s: ordered %s by %s: taking no new job", self.config.name, order["order"],
                     order.get("by", "?"))
            self.quiet.set()
            self._give_back_held()
        if order["order"] == "stop":
            self.stop()

    def _holds(self, job: Job) -> bool:
        """Called with the lock held: this attempt of the job is still ours to settle."""
        running = self.running.get(job.id)
        return running is not None and running.job.attempts == job.attempts and not running.abandoned

    def _check_slot(self, job: Job, slot: Slot | None) -> None:
        """A run that lost its lease may have lost its concurrency slot too: then
        another job of the same key may be running beside it (a slot is a lease)."""
        if slot is not None and self._store_call(slot.held) is False:
            slot.report_lost(job, f"after being paused {time.monotonic() - self.last_beat:.0f}s")

    def _why_lost(self) -> str:
        silent = time.monotonic() - self.last_beat
        if silent > self.lease:
            return f"this worker could not renew it: no heartbeat reached the store for {silent:.0f}s"
        return "the store gave it to another worker, or it was cancelled"

    def _enforce_timeouts(self, now: float) -> None:
        overran = []
        with self.lock:
            for running in self.running.values():
                is_sync = not running.spec.is_async
                if (is_sync and running.deadline and now > running.deadline and not running.abandoned
                        and running.ended is None):
                    running.abandoned = True
                    overran.append(running)
        for running in overran:
            job, timeout = running.job, running.spec.timeout or 0
            exc = JobTimeout(f"timed out after {timeout:g}s")
            log.error("job %s %s overran its timeout of %gs: failing the attempt and "
                      "replacing this worker", job.id, job.task, timeout)
            self.outcomes.put((decide_failure(running.spec, job, exc), exc))
            self.exit_code = EXIT_OVERRAN
            self.stop(asked=False)

    # -- store errors -----------------------------------------------------------------

    def _side_call(self, fn: Callable[..., T], *args: Any) -> T | None:
        """A call for this worker's own records (side_guard): None when it failed, said once
        while the store otherwise answers (when it is down as a whole, `guard` says so)."""
        try:
            result = fn(*args)
        except STORE_FAILURES as exc:
            if self.guard.up:
                self.side_guard.failed(exc)
            return None
        self.side_guard.succeeded()
        return result

    def _store_call(self, fn: Callable[..., T], *args: Any) -> T | None:
        """Call the store; while it is down, say so once, back off and return None."""
        ok, result = self.guard.call(fn, *args)
        if not ok:
            self.stopping.wait(self.guard.backoff())
        return result


def _nothing() -> None:
    pass


def _result(spec: TaskSpec, job: Job, future: Future[tuple[Outcome, BaseException | None]]
            ) -> tuple[Outcome, BaseException | None]:
    try:
        return future.result()
    except BaseException as exc:  # noqa: BLE001 - cancelled at shutdown, or a runner bug
        return decide_failure(spec, job, exc), exc
