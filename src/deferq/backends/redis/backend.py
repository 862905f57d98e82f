"""redis://, rediss://, unix://, redis+cluster:// — jobs in Redis, every change one Lua script.

Layout and reasons: keys.py and docs/redis.md. In short: per queue, one sorted set
of waiting jobs per priority (score = due time; the part due now is the ready
queue, so no timer has to move jobs and none can be moved twice), beside it a list of
plain jobs due at their creation (first in, first out), a sorted set of
leases, sorted sets of finished jobs, a unique-key index, a wake list that idle
workers block on, and one hash per job. All keys of a queue share a hash tag, so
each script runs in one Cluster slot; operations over several queues make one
script call per slot (one round trip in all on a single server).
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar
from urllib.parse import parse_qsl, urlsplit

from redis.exceptions import NoScriptError

from ...errors import StoreUnavailable
from ...job import Job, carry, dumps, stored_now
from .. import fair
from ..base import STEPS, Backend, Enqueue, Heartbeat, Outcome, OutcomeKind
from ..history import recovered
from . import flows, scripts
from .admin import BATCH, Admin
from .codec import (
    MAX_ATTEMPTS,
    AddKind,
    add_args,
    add_groups,
    add_kind_args,
    add_one,
    enqueue_args,
    job_from_hash,
    leased_job,
    leased_record,
    pairs,
)
from .connection import (
    CLIENT_DEFAULTS,
    Target,
    Waiter,
    WakeGroup,
    async_client,
    guarded,
    parse_url,
    reported,
    sync_client,
)
from .history import RedisHistory
from .keys import KeySpace, QueueKeys
from .scripts import Call
from .search import RedisSearch

T = TypeVar("T")
# settle.lua: where an outcome's target zset is in its queue's block of keys (_settle_keys)
_FINISHED_AT = {"cancelled": 3, "succeeded": 5, "dead": 6}
_WAITING_AT = 7  # + the job's priority
_BACK = frozenset(("retry", "release", "snooze"))  # outcomes that put the job back to waiting
SWEEP_BATCHES = 10  # at most this many BATCHes of marks per sweep (the next sweep goes on)
WAIT_SLICE = 5.0  # seconds one blocking wait for a job's finish may last (below socket_timeout)
# seconds a producer trusts that its queues are still named in the registry: a server that
# lost its data (restarted without persistence) has them named again within this, so
# the recovery sweep and the console see their jobs (docs/guarantees.md)
REGISTER_AGAIN = 30.0


class _EnqueuePlan(NamedTuple):
    """enqueue_many as script calls: one per queue, with the items' positions; `linked`
    when some item runs after other jobs (flows.py stores those)."""

    calls: list[Call]
    positions: list[list[int]]
    new_queues: list[str]
    linked: bool = False
    plain: bool = False  # one add.lua call


def claim_order(taken: list[list[Job]], priorities: Sequence[int]) -> list[Job]:
    """The jobs of a claim over several slot groups (each group's in its own claim order)
    as one claim order: priority preference, due time, then creation order across
    queues, each group's order kept. A worker's chunk calls are made of jobs in this
    order, so the same due jobs make the same calls on a cluster as on one server."""
    if len(taken) == 1:
        return taken[0]
    rank = {p: i for i, p in enumerate(priorities)}
    return list(heapq.merge(*taken, key=lambda job: (rank.get(job.priority, len(rank)), job.run_at, job.id)))


class RedisBackend(Admin, RedisHistory, RedisSearch, Backend):
    schemes = ("redis", "rediss", "unix", "redis+cluster")
    wakes_waiters = True  # changes() blocks until the job's finish pushes a token
    keys_per_queue = True  # the key check shares its queue's slot (docs/guarantees.md)

    def __init__(self, url: str = "redis://localhost:6379/0", prefix: str | None = None, **_: Any):
        self.target: Target = parse_url(url)
        self.keys = KeySpace(prefix or self.target.prefix)
        self.cluster = self.target.cluster
        self.client = sync_client(self.target)
        self._lane = None if self.cluster else scripts.DirectLane(self.client.connection_pool)
        # a claim brings its jobs' checkpoints when they live on its server (not on a
        # cluster's other slots, nor on a shard set's other servers: shards.py says so)
        self.steps_in_reserve = not self.cluster
        # per event loop: its redis.asyncio client and script lane (their connections
        # hold the loop, so a weak key would never let go: closed loops are dropped instead)
        self._async: dict[asyncio.AbstractEventLoop, tuple[Any, scripts.AsyncLane | None]] = {}
        self._registered: dict[str, float] = {}  # queue -> when to name it again (REGISTER_AGAIN)
        self._add_heads: dict[AddKind, bytes] = {}  # _add_one's packed calls, but for the job
        self._waiter = Waiter()
        self._wait_lock = threading.Lock()
        # The backends that may hold a job id (flows.py): this one; shards.py says more.
        self.homes: flows.Homes = lambda _job_id: (self,)
        self.transactions = not self.cluster  # MULTI/EXEC may span queues: one server
        # a blocking wait must end well before a reply is overdue (socket_timeout)
        reply_within = dict(parse_qsl(urlsplit(self.target.url).query)).get("socket_timeout")
        self._wait_slice = min(WAIT_SLICE, float(reply_within or CLIENT_DEFAULTS["socket_timeout"]) / 2)

    # -- running scripts ------------------------------------------------------------

    def _run(self, call: Call) -> Any:
        if self._lane is not None:
            return self._lane.run(call)
        return scripts.run(self.client, call)

    def _run_all(self, calls: list[Call]) -> list[Any]:
        """Calls for different slots: one round trip on a server, one per call on a cluster."""
        if len(calls) == 1 or self.cluster:
            return [self._run(call) for call in calls]
        return scripts.run_pipelined(self.client, calls)

    def run_calls(self, calls: list[Call]) -> list[Any]:
        """Script calls for any slots (flows.py), as `_run_all`, reported as store errors."""
        with reported(self.target, "workflow"):
            return self._run_all(calls)

    def run_transaction(self, calls: list[Call]) -> list[Any]:
        """Script calls in one MULTI/EXEC (one server): all run, or none. By source
        (EVAL), so that a server that does not know a script yet cannot skip one."""
        with reported(self.target, "workflow"):
            pipe = self.client.pipeline(transaction=True)
            for call in calls:
                pipe.execute_command(*call.eval())
            replies: list[Any] = pipe.execute()
            return replies

    def _by_slot(self, queues: Iterable[str]) -> list[list[str]]:
        """Queues that one script call may serve together."""
        queues = list(dict.fromkeys(queues))
        if not self.cluster:
            return [queues]
        groups: dict[int, list[str]] = {}
        for queue in queues:
            groups.setdefault(self.client.keyslot(self.keys.queue(queue).tag), []).append(queue)
        return list(groups.values())

    def _queues(self) -> list[str]:
        return sorted(q.decode() for q in self.client.smembers(self.keys.queues))

    # -- producing --------------------------------------------------------------------

    def _add_call(self, job: Job, args: list[Any]) -> Call:
        qk = self.keys.queue(job.queue)
        return Call(scripts.ADD, [qk.waiting[job.priority], qk.new, qk.wake, qk.ready[job.priority]], args)

    def enqueue_plan(self, items: Sequence[Enqueue]) -> _EnqueuePlan:
        job = items[0].job
        queue = job.queue
        if (plain := add_args(items)) is not None:  # the commonest calls: add.lua, lean
            new = [] if self._registered.get(queue, 0.0) > time.monotonic() else [queue]
            return _EnqueuePlan([self._add_call(job, plain)], [list(range(len(items)))], new, plain=True)
        if (groups := add_groups(items)) is not None:  # plain jobs of a few queues or priorities
            calls = [self._add_call(items[positions[0]].job, args) for positions, args in groups]
            queues = dict.fromkeys(items[positions[0]].job.queue for positions, _ in groups)
            new = self._unregistered(queues)
            return _EnqueuePlan(calls, [positions for positions, _ in groups], new, plain=True)
        if all(item.job.queue == queue for item in items):  # the usual case, kept lean
            by_queue = {queue: list(range(len(items)))}
        else:
            by_queue = {}
            for i, item in enumerate(items):
                by_queue.setdefault(item.job.queue, []).append(i)
        calls = []
        linked = False
        for queue, positions in by_queue.items():
            qk = self.keys.queue(queue)
            keys = [*qk.enqueue_keys]
            args: list[Any] = []
            links: list[Any] = []
            for number, i in enumerate(positions, 1):
                if items[i].after:
                    links += flows.link_section(number, items[i])
                keys.append(qk.job_prefix + items[i].job.id)
                args += enqueue_args(items[i])
            if links:  # after every item's ARGV (enqueue.lua)
                args += links
                linked = True
            calls.append(Call(scripts.ENQUEUE, keys, args))
        new = self._unregistered(by_queue)
        return _EnqueuePlan(calls, list(by_queue.values()), new, linked)

    def _unregistered(self, queues: Iterable[str]) -> list[str]:
        """Those of `queues` to name in the registry before their jobs go in."""
        now = time.monotonic()
        return [q for q in queues if self._registered.get(q, 0.0) <= now]

    def _registered_now(self, queues: Iterable[str]) -> None:
        again = time.monotonic() + REGISTER_AGAIN
        self._registered.update(dict.fromkeys(queues, again))

    def register_queues(self, queues: list[str]) -> None:
        """Name new queues in the registry (before their first job goes in), and again
        every REGISTER_AGAIN seconds."""
        if queues:
            self.client.sadd(self.keys.queues, *queues)
            self._registered_now(queues)

    def enqueue_results(self, items: Sequence[Enqueue], plan: _EnqueuePlan, replies: list[Any]) -> list[Job]:
        if plan.plain and len(replies) == 1:  # add.lua: all stored, its reply is when (µs)
            return self._added(items, int(replies[0]) / 1e6)
        stored: list[Job | None] = [None] * len(items)
        if plan.plain:  # one add.lua a kind
            for positions, reply in zip(plan.positions, replies, strict=True):
                added = self._added([items[i] for i in positions], int(reply) / 1e6)
                for i, job in zip(positions, added, strict=True):
                    stored[i] = job
            return stored  # type: ignore[return-value]
        for positions, reply in zip(plan.positions, replies, strict=True):
            now = float(reply[0])
            if len(reply) == len(positions) + 1 and reply.count(0) == len(positions):  # all stored: no holder
                for i in positions:
                    stored[i] = items[i].stored(now)
                continue
            for i, entry in zip(positions, reply[1:], strict=True):
                if entry == 0:
                    stored[i] = items[i].stored(now)
                else:  # the unfinished job holding this unique key
                    holder_id, fields = entry
                    stored[i] = job_from_hash(holder_id.decode(), items[i].job.queue, pairs(fields), now)
        return stored  # type: ignore[return-value]

    def _add_one(self, lane: scripts.DirectLane, items: Sequence[Enqueue], kind: AddKind,
                 record: bytes) -> list[Job]:
        """One plain job due at once (codec.add_one), on this server's lane: add.lua's
        call is packed once per kind of job (queue and settings) and each job's id and
        record appended to it, with no Call nor ARGV made and nothing packed again
        (~4 µs of a call's ~14 µs of Python)."""
        job = items[0].job
        head = self._add_heads.get(kind)
        if head is None:
            head = self._add_heads[kind] = scripts.packed_head(self._add_call(job, [*add_kind_args(kind)]), 2)
        job_id = job.id.encode()

        def source() -> tuple[Any, ...]:  # the call as EVAL, for a server that lost its scripts
            return self._add_call(job, [*add_kind_args(kind), job.id, record]).eval()

        reply = lane.run_packed([head + scripts.packed_arg(job_id) + scripts.packed_arg(record)], source)
        return self._added(items, int(reply) / 1e6)

    @staticmethod
    def _added(items: Sequence[Enqueue], now: float) -> list[Job]:
        """Jobs of one add.lua call as stored at `now` (they share their due time)."""
        first = items[0]
        if not first.job.run_at and not first.delay:  # all due at once (add_args): stamped here
            return stored_now([item.job for item in items], now)
        return [item.stored(now) for item in items]

    @guarded
    def enqueue_many(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        self.refuse_connection(connection)
        if not items:
            return []
        if len(items) == 1:  # task.enqueue(): the commonest call
            job = items[0].job
            if self._lane is not None and (one := add_one(items[0])) is not None:
                self._register_soon(job.queue)
                return self._add_one(self._lane, items, *one)
            if (plain := add_args(items)) is not None:
                self._register_soon(job.queue)
                return self._added(items, int(self._run(self._add_call(job, plain))) / 1e6)
        return self._enqueue_planned(items)

    def _register_soon(self, queue: str) -> None:
        """Name `queue` in the registry if it is not known to be there (REGISTER_AGAIN)."""
        if self._registered.get(queue, 0.0) <= time.monotonic():
            self.register_queues([queue])

    def _enqueue_planned(self, items: Sequence[Enqueue]) -> list[Job]:
        plan = self.enqueue_plan(items)
        if plan.linked:
            return flows.enqueue_linked([(self, items)], self.homes)[0]
        if plan.new_queues:
            self.register_queues(plan.new_queues)
        return self.enqueue_results(items, plan, self._run_all(plan.calls))

    async def enqueue_many_async(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        self.refuse_connection(connection)
        if not items:
            return []
        client, lane = self._async_client()
        plan = self.enqueue_plan(items)
        if plan.linked:
            return await asyncio.to_thread(self.enqueue_many, items)
        with reported(self.target, "enqueue"):
            if plan.new_queues:
                register = ("SADD", self.keys.queues, *plan.new_queues)
                await (lane.command(register) if lane is not None else client.execute_command(*register))
                self._registered_now(plan.new_queues)
            if lane is not None:
                replies = [await lane.run(call) for call in plan.calls]
            else:
                replies = [await scripts.arun(client, call) for call in plan.calls]
        return self.enqueue_results(items, plan, replies)

    def _async_client(self) -> tuple[Any, scripts.AsyncLane | None]:
        """redis.asyncio clients belong to one event loop: one client per loop, and on one
        server a lane for its script calls."""
        loop = asyncio.get_running_loop()
        found = self._async.get(loop)
        if found is None:
            for ended in [other for other in self._async if other.is_closed()]:
                del self._async[ended]  # each asyncio.run() has a loop of its own: its sockets go with it
            client = async_client(self.target)
            lane = None if self.cluster else scripts.AsyncLane(client.connection_pool)
            found = self._async[loop] = (client, lane)
        return found

    # -- consuming --------------------------------------------------------------------

    @staticmethod
    def _reserve_keys(qk: QueueKeys) -> list[str]:
        return [*qk.waiting, qk.active, qk.wake, qk.job_prefix, qk.cancelled, qk.paused, *qk.ready, qk.gone]

    def _reserve_call(
        self, group: list[str], want: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> Call:
        keys = [k for q in group for k in self._reserve_keys(self.keys.queue(q))]
        mode = self.keys.kv_tag(STEPS)[:-1] if self.steps_in_reserve else "take"  # "{P:kv:deferq.steps:"
        return Call(scripts.RESERVE, keys, [want, worker, repr(lease), mode, *fair.levels_of(priorities)])

    def _leased(self, group: list[str], worker: str, reply: list[Any]) -> list[Job]:
        now_text, lease_until = reply[0], reply[1]
        now = float(now_text)
        jobs = []
        expired = []
        stride = 5 if self.steps_in_reserve else 4  # the fifth: the job's checkpoints
        until, name = float(lease_until), worker or None
        for i in range(2, len(reply), stride):
            q, body = reply[i], reply[i + 3]
            if q < 0:  # expired: cancelled instead of leased (reserve.lua)
                expired.append((group[-q - 1], pairs(body).get(b"task", b"").decode(), "expired"))
                continue
            job_id, queue, job = reply[i + 1].decode(), group[q - 1], None
            if type(body) is bytes:  # a record add.lua stored
                job = leased_record(job_id, queue, body, reply[i + 2], until, name, now)
            if job is None:
                job = leased_job(job_id, queue, body, now, worker, lease_until, reply[i + 2], now_text)
            if stride == 5 and reply[i + 4] != 0:  # 0: never leased before (carried already)
                carry(job, {k.decode(): v for k, v in pairs(reply[i + 4]).items()})
            jobs.append(job)
        if expired:
            self.count_ended(expired)
        return jobs

    @guarded
    def reserve(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> list[Job]:
        taken: list[list[Job]] = []
        priorities = fair.levels_of(priorities)  # one order for every slot group
        for group in self._by_slot(queues):
            want = limit - sum(map(len, taken))
            if want <= 0:
                break
            reply = self._run(self._reserve_call(group, want, worker, lease, priorities))
            taken.append(self._leased(group, worker, reply))
        return claim_order(taken, priorities)

    @guarded
    def settle_and_reserve(
        self,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        priorities: Sequence[int],
    ) -> tuple[list[bool], list[Job]]:
        """On one server: both scripts in one round trip. A cluster spreads queues over
        slots, so there it is settle, then reserve."""
        if self._lane is None or not outcomes or limit <= 0:
            return super().settle_and_reserve(outcomes, queues, limit, worker, lease, priorities)
        group = list(dict.fromkeys(queues))
        settle_call = self._settle_calls(outcomes)[1][0]  # one slot group on one server
        reserve_call = self._reserve_call(group, limit, worker, lease, priorities)
        flags, reply = self._lane.run_many([settle_call, reserve_call])
        self._after_settle(outcomes, flags)
        return [bool(ok) for ok in flags], self._leased(group, worker, reply)

    @guarded
    def peek(self, queues: Sequence[str], limit: int, priorities: Sequence[int]) -> list[tuple[int, float, str]]:
        """(priority, due time, id) of the jobs `reserve` would take now, in its order."""
        found: list[tuple[int, float, str]] = []
        for group in self._by_slot(queues):
            keys = [k for q in group for k in self._reserve_keys(self.keys.queue(q))]
            reply = self._run(Call(scripts.RESERVE, keys, [limit, "", "0", "peek", *fair.levels_of(priorities)]))
            found += [(int(reply[i]), float(reply[i + 1]), reply[i + 2].decode()) for i in range(1, len(reply), 3)]
        return found

    def _per_slot(self, items: Sequence[T], queue_of: Callable[[T], str]) -> list[list[int]]:
        """Positions of items grouped so that each group is one script call."""
        if not self.cluster:
            return [list(range(len(items)))]
        groups: dict[str, list[int]] = {}
        for i, item in enumerate(items):
            groups.setdefault(queue_of(item), []).append(i)
        return list(groups.values())

    @guarded
    def heartbeat(self, jobs: Sequence[Job], lease: float) -> Heartbeat:
        def keys(job: Job, qk: QueueKeys) -> tuple[Any, ...]:
            return (qk.job(job.id), qk.active)

        return self._fenced(scripts.HEARTBEAT, jobs, keys, lambda job: (), [repr(lease)])

    @guarded
    def kv_put_leased(self, job: Job, lease: float, namespace: str, key: str,
                      value: bytes) -> tuple[bool, bytes | None]:
        """One script on a server; a cluster keeps the job and the record in different
        slots: the heartbeat, then the record, as the base does."""
        if self.cluster:
            return super().kv_put_leased(job, lease, namespace, key, value)
        keys = [self.keys.queue(job.queue).job(job.id), self.keys.kv_record(namespace, key),
                self.keys.kv_index(namespace)]
        reply = self._run(Call(scripts.KV_PUT_LEASED, keys, [job.worker or "", job.attempts, key, value]))
        return bool(reply[0]), bytes(reply[1]) if len(reply) > 1 else None

    @guarded
    def record_progress(self, jobs: Sequence[Job]) -> set[str]:
        def args(job: Job) -> tuple[Any, ...]:
            return ("" if job.progress is None else repr(job.progress), job.progress_message or "")

        return self._fenced(scripts.PROGRESS, jobs, lambda job, qk: (qk.job(job.id),), args, [])

    def _fenced(
        self, script: scripts.Script, jobs: Sequence[Job], keys_of: Callable[[Job, QueueKeys], tuple[Any, ...]],
        args_of: Callable[[Job], tuple[Any, ...]], head: list[Any],
    ) -> Heartbeat:
        """A script that acts on leased jobs under their fence (id, worker, attempts),
        one call per slot group; returns the ids whose lease was lost (flag 0), and those
        whose cancel was requested (flag 2)."""
        if not jobs:
            return Heartbeat()
        groups = self._per_slot(jobs, lambda job: job.queue)
        calls = []
        for positions in groups:
            keys: list[str] = []
            args: list[Any] = list(head)
            for i in positions:
                job = jobs[i]
                keys += keys_of(job, self.keys.queue(job.queue))
                args += (job.id, job.worker or "", job.attempts, *args_of(job))
            calls.append(Call(script, keys, args))
        answer = Heartbeat()
        for positions, flags in zip(groups, self._run_all(calls), strict=True):
            for i, flag in zip(positions, flags, strict=True):
                if flag == 0:
                    answer.add(jobs[i].id)
                elif flag == 2:
                    answer.cancel_requested.add(jobs[i].id)
        return answer

    def _settle_calls(self, outcomes: Sequence[Outcome]) -> tuple[list[list[int]], list[Call]]:
        """One SETTLE call per slot group, and which outcomes each carries: each queue's
        keys once, then runs of outcomes alike but for their job and result, each run's
        shared values once (settle.lua): a chunk's items, a batch of one task's jobs."""
        for outcome in outcomes:
            if outcome.kind not in Outcome.KINDS:
                raise ValueError(f"unknown outcome {outcome.kind!r}")
        groups = self._per_slot(outcomes, lambda outcome: outcome.job.queue)
        calls = []
        for positions in groups:
            keys: list[str] = []
            blocks: dict[str, int] = {}  # queue -> KEYS index of its block's first key
            args: list[Any] = []
            shared: tuple[Any, ...] = ()
            count_at = 0  # where the current run's count is in args
            for i in positions:
                outcome = outcomes[i]
                job = outcome.job
                first = blocks.get(job.queue)
                if first is None:
                    first = blocks[job.queue] = len(keys) + 1
                    keys += self._settle_keys(self.keys.queue(job.queue))
                kind = outcome.kind
                target = first + (_WAITING_AT + job.priority if kind in _BACK else _FINISHED_AT[kind])
                error = (outcome.waits_for if kind == OutcomeKind.SNOOZE else outcome.error) or ""
                delay = repr(outcome.delay) if outcome.due is None else f"@{outcome.due!r}"
                alike = (target, kind, job.worker or "", job.attempts, delay, error, outcome.chunk_call or "")
                if alike != shared:
                    shared, count_at = alike, len(args)
                    args += (0, *alike)
                args[count_at] += 1
                args += (job.id, "" if outcome.result is None else dumps(outcome.result, "the task's result"))
            calls.append(Call(scripts.SETTLE, keys, args))
        return groups, calls

    @staticmethod
    def _settle_keys(qk: QueueKeys) -> tuple[str, ...]:
        """A queue's block of KEYS in settle.lua, in its order (_FINISHED_AT, _WAITING_AT)."""
        return (qk.job_prefix, qk.active, qk.wake, qk.cancelled, qk.behind, qk.succeeded, qk.dead, *qk.waiting)

    @guarded
    def settle(self, outcomes: Sequence[Outcome]) -> list[bool]:
        if not outcomes:
            return []
        groups, calls = self._settle_calls(outcomes)
        flags: list[int] = [0] * len(outcomes)
        for positions, replies in zip(groups, self._run_all(calls), strict=True):
            for i, flag in zip(positions, replies, strict=True):
                flags[i] = flag
        self._after_settle(outcomes, flags)
        return [bool(flag) for flag in flags]

    def _after_settle(self, outcomes: Sequence[Outcome], flags: Sequence[int]) -> None:
        """What settle.lua's flags ask for (none, for most settles): jobs that finished
        while another waits behind them for their key (flags 2, 4): that one takes its
        place (step_up.lua); jobs that finished with jobs running after them (flags 3,
        4): those are released (flows.py). Round trips of their own, after the settle (a
        pipeline may run a call again out of order: NoScriptError)."""
        if all(flag <= 1 for flag in flags):
            return
        keys: dict[str, set[str]] = {}
        parents: list[flows.Ref] = []
        for outcome, flag in zip(outcomes, flags, strict=True):
            if flag in (2, 4) and outcome.job.key:
                keys.setdefault(outcome.job.queue, set()).add(outcome.job.key)
            if flag >= 3:
                parents.append((self, outcome.job.queue, outcome.job.id))
        if keys:
            self._run_all([self._step_up_call(queue, sorted(names)) for queue, names in keys.items()])
        if parents:
            flows.release_or_leave(parents, self.homes)

    def _step_up_call(self, queue: str, keys: Sequence[str] = ()) -> Call:
        """step_up.lua for some keys of a queue, or for all (the sweep)."""
        return Call(scripts.STEP_UP, list(self.keys.queue(queue).step_up_keys), list(keys))

    def _repeat(
        self, make: Callable[[str], Call], queues: Sequence[str], count: Callable[[str, Any], int] | None = None
    ) -> int:
        """Run a BATCH-bounded script per queue until each reports less than a full batch
        (`count(queue, reply)` reads how many a reply did; default: the reply is the count)."""
        total = 0
        pending = list(queues)
        while pending:
            replies = self._run_all([make(q) for q in pending])
            counts = [count(q, r) if count else int(r) for q, r in zip(pending, replies, strict=True)]
            total += sum(counts)
            pending = [q for q, n in zip(pending, counts, strict=True) if n >= BATCH]
        return total

    @guarded
    def recover_expired(self) -> int:
        """Also the sweep for jobs waiting behind a holder that ended some other way
        (expired at a claim, say): they step up here at the latest."""

        def call(queue: str) -> Call:
            qk = self.keys.queue(queue)
            keys = [*qk.waiting, qk.active, qk.dead, qk.wake, qk.job_prefix, qk.cancelled]
            return Call(scripts.RECOVER, keys, [BATCH, MAX_ATTEMPTS])

        def counted(queue: str, reply: list[Any]) -> int:  # {how many, {state, task, ...}}: history
            n, ended = reply
            self.count_ended(cell for i in range(0, len(ended), 2)
                             for cell in recovered(queue, ended[i + 1].decode(), ended[i].decode()))
            return int(n)

        queues = self._queues()
        count = self._repeat(call, queues, counted)
        if queues:
            self._run_all([self._step_up_call(queue) for queue in queues])
            self.release_due(queues)
        return count

    def release_due(self, queues: Sequence[str]) -> int:
        """The sweep's part in dependencies: jobs a producer stored but died before
        linking are linked; children of jobs that finished without their release (a
        backend that died between the two, an expiry or a recovery here) hear of them
        now (flows.py). Returns how many children moved."""
        moved = 0
        try:
            moved += flows.relink_due(self, queues, self.homes, BATCH)
        except StoreUnavailable as exc:  # a parent's server: the next sweep tries again
            flows.log.warning("linking jobs a producer left half stored waits for the next sweep: %s", exc)
        for _ in range(SWEEP_BATCHES):
            marks = flows.due_marks(self, queues, BATCH)
            moved += flows.release_or_leave(marks, self.homes) if marks else 0
            if len(marks) < BATCH:
                break
        return moved

    # -- dependencies and waiting (flows.py) ------------------------------------------------

    def read(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        with reported(self.target, "read"):
            return self._read(commands)

    def fetch(self, refs: Sequence[tuple[str, str]]) -> list[Job]:
        with reported(self.target, "read"):
            return self._fetch(refs)

    @guarded
    def dependents(self, job_id: str) -> list[str]:
        queue = self._locate(job_id)
        return flows.dependents(self, queue, job_id) if queue else []

    @guarded
    def count_states(self, ids: list[str]) -> dict[str, int]:
        """How many of the jobs `ids` are in each state (a batch's summary)."""
        return flows.count_states(ids, self.homes) if ids else {}

    @guarded
    def changes(self, job_id: str, timeout: float) -> bool:
        """Blocks until the job finishes (a token its finishing script pushes, only for
        a job someone waits for: watch.lua, on_finish), at most `timeout` seconds (and
        half the reply timeout, WAIT_SLICE at most). The token stays in the list (BLMOVE
        onto itself), so every waiter of the job wakes; the list expires a minute after
        the finish."""
        queue = self._locate(job_id)
        if queue is None:
            return True  # gone: the caller's look says so
        qk = self.keys.queue(queue)
        if self._run(Call(scripts.WATCH, [qk.job(job_id), qk.done(job_id)], [job_id])):
            return True
        slice_ = max(0.01, min(timeout, self._wait_slice))
        return self.client.blmove(qk.done(job_id), qk.done(job_id), slice_, "RIGHT", "LEFT") is not None

    @guarded
    def promote_due(self) -> int:
        """Nothing to move: waiting jobs sit in sets ordered by due time, and reserve
        takes those due. It still asks the server, so that the upkeep sweep that
        calls it sees whether the store is reachable."""
        self.client.ping()
        return 0

    @guarded
    def next_due(self, queues: Sequence[str]) -> float | None:
        """Seconds until the earliest waiting job of `queues` is due (<= 0: now), or None."""
        calls = [
            Call(scripts.NEXT_DUE, [k for q in group for k in self._next_due_keys(self.keys.queue(q))], [])
            for group in self._by_slot(queues)
        ]
        due = [float(reply) for reply in self._run_all(calls) if reply]
        return min(due, default=None)

    @staticmethod
    def _next_due_keys(qk: QueueKeys) -> tuple[str, ...]:
        return (*qk.waiting, *qk.fair, *qk.ready, qk.paused)

    def wake_groups(self, queues: Sequence[str]) -> list[WakeGroup]:
        """The wake lists of `queues`, grouped so that one BLPOP watches each group."""
        groups = []
        for group in self._by_slot(queues):
            keys = tuple(self.keys.queue(q).wake for q in group)
            if self.cluster:
                node = self.client.get_node_from_key(keys[0])
                pool = node.redis_connection.connection_pool
            else:
                pool = self.client.connection_pool
            groups.append(WakeGroup((self.target.where, *keys), keys, functools.partial(scripts.unpooled, pool)))
        return groups

    def _wait_time(self, queues: Sequence[str], timeout: float) -> float:
        """How long to wait: `timeout`, or less when a waiting job falls due sooner (0: one is due)."""
        due_in = self.next_due(queues)
        return timeout if due_in is None else max(0.0, min(timeout, due_in))

    @guarded
    def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        with self._wait_lock:
            try:
                if timeout := self._wait_time(queues, timeout):
                    self._waiter.wait(self.wake_groups(queues), timeout)
            except BaseException:
                self._waiter.reset()  # its blocked connections may be stale now
                raise

    @guarded
    def wait_and_reserve(
        self,
        queues: Sequence[str],
        timeout: float,
        limit: int,
        worker: str,
        lease: float,
        priorities: Sequence[int],
    ) -> list[Job]:
        """On one server, reserve.lua is sent right behind the BLPOP on the waiter's
        connection: the server leases the moment a wake token arrives, and an idle
        worker gets its job one round trip after the enqueue instead of two."""
        if self.cluster or limit <= 0:
            return super().wait_and_reserve(queues, timeout, limit, worker, lease, priorities)
        [group] = self._by_slot(queues)  # one server: one group
        call = self._reserve_call(group, limit, worker, lease, priorities)
        answer = None
        with self._wait_lock:
            try:
                if timeout := self._wait_time(queues, timeout):
                    [wake] = self.wake_groups(queues)
                    answer = self._waiter.wait_then(wake, timeout, call.evalsha(), self.client.client_unblock)
                    if answer is None:  # a BLPOP of an earlier wait is still pending: wait on it
                        self._waiter.wait([wake], timeout)
            except BaseException:
                self._waiter.reset()
                raise
        if answer is None:  # a job was due already, or the plain wait ended
            return self.reserve(queues, limit, worker, lease, priorities)
        reply = answer[1]
        if isinstance(reply, NoScriptError):  # the server forgot the script: it ran nothing
            reply = self._run(call)
        elif isinstance(reply, Exception):
            raise reply
        return self._leased(group, worker, reply)

    @guarded
    def now(self) -> float:
        reply = self.client.time()
        if isinstance(reply, dict):  # a cluster answers per node
            reply = next(iter(reply.values()))
        seconds: int
        micros: int
        seconds, micros = reply
        return seconds + micros / 1_000_000

    # -- life cycle ------------------------------------------------------------------------

    @guarded
    def ping(self) -> None:
        self.client.ping()

    @guarded
    def describe(self) -> dict[str, Any]:
        info = self.client.info()
        if "redis_version" not in info:  # a cluster answers per node: the first one speaks
            info = next(iter(info.values()), {})
        return {"version": info.get("redis_version"), "memory_bytes": info.get("used_memory")}

    def close(self) -> None:
        self._waiter.reset()
        if self._lane is not None:
            self._lane.close()
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing a broken client
            pass

    def __repr__(self) -> str:
        return f"<RedisBackend {self.target.where} prefix={self.keys.prefix!r}>"
