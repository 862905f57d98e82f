"""Inspecting and managing jobs, and the kv records: the Redis backend's admin side.

Mixed into RedisBackend (backend.py), which provides the client, the key space and
the script runners (`_run`, `_run_all`, `_queues`, `_repeat`, `now`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ...job import FINISHED_STATES, Job, JobState
from ..base import HOLD_BATCH, HOLD_SLACK, QueueStats, finished_only, grouped
from . import flows, scripts
from .codec import job_from_hash, pairs, record_fields
from .connection import guarded
from .keys import KeySpace, QueueKeys
from .scripts import Call

BATCH = 1000  # jobs per recover/purge script call: bounds how long one call blocks Redis


class Admin:
    keys: KeySpace
    client: Any
    _run: Callable[[Call], Any]
    _run_all: Callable[[list[Call]], list[Any]]
    _lane: scripts.DirectLane | None
    _queues: Callable[[], list[str]]
    _repeat: Callable[[Callable[[str], Call], Sequence[str]], int]
    now: Callable[[], float]
    homes: flows.Homes
    _registered: dict[str, float]

    # -- inspecting and managing ------------------------------------------------------

    def _read(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Plain read commands in one round trip (one per node on a cluster)."""
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            getattr(pipe, command[0])(*command[1:])
        replies: list[Any] = pipe.execute()
        return replies

    def _read_jobs(self, refs: Sequence[tuple[str, str]], read: tuple[str, ...]) -> list[tuple[Any, bytes | None]]:
        """For each (queue, id), in one round trip: `read` of the job's hash (e.g.
        ("hgetall",)), and its record in the queue's `new` hash (None when it has none: a
        job add.lua stored has no hash until something touches it, keys.py)."""
        name, *rest = read
        commands: list[tuple[Any, ...]] = []
        for queue, job_id in refs:
            qk = self.keys.queue(queue)
            commands += [(name, qk.job(job_id), *rest), ("hget", qk.new, job_id)]
        replies = self._read(commands) if commands else []
        return list(zip(replies[::2], replies[1::2], strict=True))

    def _fetch(self, refs: Sequence[tuple[str, str]]) -> list[Job]:
        """Jobs by (queue, id); ids with neither a hash nor a record are skipped."""
        if not refs:
            return []
        replies = self._read_jobs(refs, ("hgetall",))
        now = self.now()
        return [
            job_from_hash(job_id, queue, record_fields(record) if record else fields, now)
            for (queue, job_id), (fields, record) in zip(refs, replies, strict=True)
            if fields or record
        ]

    def _where(self, ids: Sequence[str], *read: str) -> dict[str, tuple[str, Any]]:
        """(queue, reply) of each job id found here, in one round trip: ids carry no
        queue, so each known queue is asked: EXISTS of the job's hash, or `read` of it
        ("hget", <field>; a job whose reply is empty counts as not found); a job with a
        record in `new` answers from that, as `_fetch` and reserve.lua read it first."""
        queues = self._queues()
        spots = [(q, job_id) for job_id in ids for q in queues]
        read = read or ("exists",)
        found: dict[str, tuple[str, Any]] = {}
        for (queue, job_id), (reply, record) in zip(spots, self._read_jobs(spots, read), strict=True):
            if record is not None:
                reply = 1 if read[0] == "exists" else record_fields(record).get(read[1].encode())
            if reply:
                found.setdefault(job_id, (queue, reply))
        return found

    def _locate(self, job_id: str) -> str | None:
        """The queue holding a job id."""
        found = self._where([job_id]).get(job_id)
        return found[0] if found else None

    def queues_of(self, ids: Sequence[str]) -> dict[str, str]:
        """The queue of each job id found here (flows.py)."""
        return {job_id: queue for job_id, (queue, _) in self._where(ids).items()}

    def states_of(self, ids: Sequence[str]) -> dict[str, str]:
        """The stored state of each job id found here (flows.py)."""
        return {job_id: state.decode() for job_id, (_, state) in self._where(ids, "hget", "state").items()}

    @guarded
    def get(self, job_id: str) -> Job | None:
        queue = self._locate(job_id)
        found = self._fetch([(queue, job_id)]) if queue else []
        return found[0] if found else None

    @guarded
    def get_many(self, ids: Sequence[str]) -> list[Job | None]:
        """Two round trips however many: where each id is (every queue asked at once),
        then the hashes."""
        where = self.queues_of(ids)
        found = {job.id: job for job in self._fetch([(where[i], i) for i in ids if i in where])}
        return [found.get(job_id) for job_id in ids]

    @guarded
    def get_by_key(self, key: str) -> Job | None:
        queues = self._queues()
        spots = [(q, index) for q in queues for index in (self.keys.queue(q).unique, self.keys.queue(q).behind)]
        ids = self._read([("hget", index, key) for _, index in spots]) if spots else []
        jobs = self._fetch([(q, i.decode()) for (q, _), i in zip(spots, ids, strict=True) if i])
        return max(jobs, key=lambda j: (j.created_at, j.id), default=None)

    def _on_job(
        self, job_id: str, script: scripts.Script, keys: Callable[[QueueKeys], list[str]], args: Sequence[Any] = ()
    ) -> bool:
        """Run a script on one job, found in whichever queue holds it (ARGV: `args`, else its id)."""
        queue = self._locate(job_id)
        if queue is None:
            return False
        return bool(self._run(Call(script, keys(self.keys.queue(queue)), list(args) or [job_id])))

    @guarded
    def cancel(self, job_id: str) -> bool:
        queue = self._locate(job_id)
        if queue is None:
            return False
        qk = self.keys.queue(queue)
        keys = [qk.job(job_id), *qk.waiting, qk.cancelled, qk.held, qk.blocked, qk.parents(job_id), *qk.fair,
                qk.gone]
        done = self._run(Call(scripts.CANCEL, keys, [job_id]))
        if done:  # a job waiting behind it, if it held a key, takes its place
            self._run(Call(scripts.STEP_UP, list(qk.step_up_keys), []))
        if done == 2:  # jobs run after it: they hear of it now
            flows.release_or_leave([(self, queue, job_id)], self.homes)  # type: ignore[list-item]
        return bool(done)

    @guarded
    def wake(self, job_id: str) -> bool:
        return self.wake_many([job_id]) == 1

    @guarded
    def wake_many(self, job_ids: Sequence[str]) -> int:
        """Two round trips however many: where each id is, then one call per queue."""
        where = self.queues_of(job_ids)
        calls = []
        for queue, ids in grouped(where, where.__getitem__).items():
            qk = self.keys.queue(queue)
            calls.append(Call(scripts.WAKE, [*qk.waiting, qk.wake, *(qk.job(i) for i in ids)], ids))
        return sum(int(woken) for woken in self._run_all(calls)) if calls else 0

    @guarded
    def retry_dead(self, job_id: str) -> bool:
        return self._rerun(job_id, "dead")

    @guarded
    def rerun(self, job_id: str) -> bool:
        return self._rerun(job_id, "")

    def _rerun(self, job_id: str, only: str) -> bool:
        def keys(qk: QueueKeys) -> list[str]:
            return [qk.job(job_id), qk.succeeded, qk.dead, qk.cancelled, *qk.waiting, qk.unique, qk.wake,
                    qk.job_prefix]

        return self._on_job(job_id, scripts.RERUN, keys, [job_id, only])

    @guarded
    def run_now(self, job_id: str) -> bool:
        return self._on_job(job_id, scripts.RUN_NOW, lambda qk: [qk.job(job_id), *qk.waiting, qk.wake])

    @guarded
    def list_jobs(self, state: JobState, queue: str | None = None, limit: int = 100) -> list[Job]:
        state = JobState(state)
        queues = [queue] if queue is not None else self._queues()
        if not queues or limit <= 0:
            return []
        commands = self._list_commands(state, queues, limit)
        scored: list[tuple[float, str, str]] = []
        for (q, _), reply in zip(commands, self._read([c for _, c in commands]), strict=True):
            scored += [(score, member.decode(), q) for member, score in reply]
        if state == JobState.QUEUED:  # and the ready lists' newest (page.lua reads their due times)
            lists = [(q, key) for q in queues for key in self.keys.queue(q).ready]
            calls = [Call(scripts.PAGE, [key, self.keys.queue(q).job_prefix], ["+inf", "-inf", "", "", limit, ""])
                     for q, key in lists]
            for (q, _), reply in zip(lists, self._run_all(calls), strict=True):
                scored += [(float(reply[i + 1]), reply[i].decode(), q) for i in range(0, len(reply), 2)]
        if state == JobState.ACTIVE:  # most recently due first, as for waiting jobs
            jobs = self._fetch([(q, i) for _, i, q in scored])
            jobs.sort(key=lambda j: (j.run_at, j.id), reverse=True)
        else:
            scored.sort(reverse=True)
            jobs = self._fetch([(q, i) for _, i, q in scored[:limit]])
        return [j for j in jobs if j.state == state][:limit]

    def _list_commands(
        self, state: JobState, queues: Sequence[str], limit: int
    ) -> list[tuple[str, tuple[Any, ...]]]:
        now = repr(self.now())
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for q in queues:
            qk = self.keys.queue(q)
            if state in FINISHED_STATES or state == JobState.BLOCKED:
                chosen = qk.blocked if state == JobState.BLOCKED else qk.finished(state)
                commands.append((q, ("zrevrange", chosen, 0, limit - 1, True)))
            elif state == JobState.ACTIVE:
                commands.append((q, ("zrange", qk.active, 0, -1, False, True)))
            else:
                high, low = ("+inf", f"({now}") if state == JobState.SCHEDULED else (now, "-inf")
                waiting = (*qk.waiting, qk.held, *qk.fair)
                commands += [(q, ("zrevrangebyscore", key, high, low, 0, limit, True)) for key in waiting]
        return commands

    @guarded
    def purge(self, states: Iterable[JobState], older_than: float = 0.0) -> int:
        states = finished_only(states)
        total = 0
        for state in states:

            def call(queue: str, state: JobState = state) -> Call:
                qk = self.keys.queue(queue)
                keys = [qk.finished(state), qk.unique, qk.job_prefix]
                return Call(scripts.PURGE, keys, [repr(float(older_than)), BATCH])

            total += self._repeat(call, self._queues())
        return total

    @guarded
    def stats(self) -> dict[str, QueueStats]:
        queues = self._queues()
        calls = []
        for q in queues:
            calls.append(self._stats_call(q))
        result = {}
        names = ("scheduled", "queued", "active", "succeeded", "dead", "cancelled")
        for queue, reply in zip(queues, self._run_all(calls) if calls else [], strict=True):
            counts = dict(zip(names, map(int, reply[:6]), strict=True))
            counts["blocked"] = int(reply[7])
            if any(counts.values()):
                stats = QueueStats()
                stats.counts.update(counts)
                stats.oldest_wait = float(reply[6])
                result[queue] = stats
        return result

    @guarded
    def delete(self, job_id: str) -> bool:
        queue = self._locate(job_id)
        if queue is None:
            return False
        qk = self.keys.queue(queue)
        call = Call(scripts.DELETE, [qk.job(job_id), qk.succeeded, qk.dead, qk.cancelled, qk.unique, qk.released],
                    [job_id])
        done = self._run(call)
        if done == 2:  # its children first: a job gone from the store would cancel them
            flows.release([(self, queue, job_id)], self.homes)  # type: ignore[list-item]
            done = self._run(call)
        return bool(done == 1)

    @guarded
    def set_remark(self, job_id: str, remark: str | None) -> bool:
        return self._on_job(job_id, scripts.REMARK, lambda qk: [qk.job(job_id)], [remark or "", job_id])

    @guarded
    def reseal(self, job_id: str, old: str, new: str) -> bool:
        return self._on_job(job_id, scripts.RESEAL, lambda qk: [qk.job(job_id)], [old, new, job_id])

    # -- pausing queues ------------------------------------------------------------------

    def _pause_call(self, queue: str, action: str) -> bool:
        qk = self.keys.queue(queue)
        return bool(self._run(Call(scripts.PAUSE, [qk.paused, qk.wake], [action])))

    @guarded
    def pause(self, queue: str) -> bool:
        self.client.sadd(self.keys.queues, queue)  # listed (and shown paused) before its first job
        return self._pause_call(queue, "pause")

    @guarded
    def resume(self, queue: str) -> bool:
        return self._pause_call(queue, "resume")

    def _stats_call(self, queue: str) -> Call:
        qk = self.keys.queue(queue)
        keys = [*qk.waiting, qk.active, qk.succeeded, qk.dead, qk.cancelled, qk.held, qk.blocked, *qk.fair,
                *qk.ready, qk.gone]
        return Call(scripts.STATS, keys, [])

    @guarded
    def forget_queue(self, queue: str) -> bool:
        qk = self.keys.queue(queue)
        counts = self._run(self._stats_call(queue))
        if any(int(n) for i, n in enumerate(counts) if i != 6) or self.client.exists(qk.paused, qk.new):
            return False  # reply[6] is the oldest due job's wait, not a count
        self.client.srem(self.keys.queues, queue)
        self._registered.pop(queue, None)  # named again by this process's next job
        return True

    def paused(self) -> dict[str, float]:
        queues = self._queues()
        flags = self._read([("get", self.keys.queue(q).paused) for q in queues]) if queues else []
        return {q: float(flag) for q, flag in zip(queues, flags, strict=True) if flag is not None}

    # -- kv ----------------------------------------------------------------------------

    @guarded
    def kv_put(
        self, namespace: str, key: str, value: bytes, ttl: float | None = None, only_new: bool = False
    ) -> bool:
        ttl_ms = math.ceil(ttl * 1000) if ttl else 0
        keys = [self.keys.kv_record(namespace, key), self.keys.kv_index(namespace)]
        return bool(self._run(Call(scripts.KV_PUT, keys, [key, value, ttl_ms, int(only_new)])))

    @guarded
    def kv_put_many(self, records: Sequence[tuple[str, str, bytes]], only_new: bool = False) -> int:
        """One round trip on a server (pipelined); one per record on a cluster, whose
        records of different namespaces live in different slots."""
        calls = [Call(scripts.KV_PUT, [self.keys.kv_record(namespace, key), self.keys.kv_index(namespace)],
                      [key, value, 0, int(only_new)]) for namespace, key, value in records]
        return sum(int(stored) for stored in self._run_all(calls)) if calls else 0

    @guarded
    def kv_expire(self, namespace: str, ttl: float) -> int:
        keys = [self.keys.kv_index(namespace), self.keys.kv_record_prefix(namespace)]
        return int(self._run(Call(scripts.KV_EXPIRE, keys, [math.ceil(ttl * 1000)])))

    @guarded
    def kv_expire_many(self, namespaces: Sequence[str], ttl: float) -> int:
        """One round trip on a server (pipelined); one per namespace on a cluster."""
        calls = [Call(scripts.KV_EXPIRE, [self.keys.kv_index(ns), self.keys.kv_record_prefix(ns)],
                      [math.ceil(ttl * 1000)]) for ns in namespaces]
        return sum(int(count) for count in self._run_all(calls)) if calls else 0

    @guarded
    def kv_swap(self, namespace: str, key: str, expected: bytes, value: bytes, ttl: float | None = None) -> bool:
        ttl_ms = math.ceil(ttl * 1000) if ttl else 0
        return bool(self._run(Call(scripts.KV_SWAP, [self.keys.kv_record(namespace, key)],
                                   [expected, value, ttl_ms])))

    @guarded
    def rate_take(self, key: str, interval: float) -> tuple[float, float]:
        turn, now = self._run(Call(scripts.RATE_TAKE, [self.keys.rate(key)], [repr(float(interval))]))
        return float(turn), float(now)

    @guarded
    def limit_hold(self, names: Sequence[str], held: Sequence[tuple[Job, float]]) -> None:
        calls = []
        for queue, jobs in grouped(held, lambda pair: pair[0].queue).items():
            qk = self.keys.queue(queue)
            args = [value for job, due in jobs for value in (job.id, repr(float(due)))]
            calls.append(Call(scripts.LIMIT_HOLD, [qk.limited(name) for name in names], args))
        self._run_all(calls)

    @guarded
    def limit_release(self, name: str) -> int:
        """Each queue's notes in turn, a script a batch."""
        released = 0
        for queue in self._queues():
            qk = self.keys.queue(queue)
            keys = [qk.limited(name), *qk.waiting, qk.wake, qk.job_prefix]
            while True:
                taken, woken = self._run(Call(scripts.LIMIT_RELEASE, keys, [HOLD_BATCH, repr(HOLD_SLACK)]))
                released += int(woken)
                if int(taken) < HOLD_BATCH:
                    break
        return released

    @guarded
    def slot_holders(self, scope: str) -> dict[str, int]:
        flat = self._run(Call(scripts.SLOT_HOLDERS, self.keys.slot_keys(scope), []))
        pairs = zip(flat[::2], flat[1::2], strict=True)
        return dict(sorted((holder.decode(), int(fence)) for holder, fence in pairs))

    @guarded
    def slot_take(self, scope: str, limit: int, holder: str, drop: Sequence[str] = ()) -> int:
        return int(self._run(Call(scripts.SLOT_TAKE, self.keys.slot_keys(scope), [limit, holder, *drop])))

    @guarded
    def slot_release(self, scope: str, holder: str) -> bool:
        return bool(self._run(Call(scripts.SLOT_RELEASE, self.keys.slot_keys(scope), [holder])))

    @guarded
    def kv_get(self, namespace: str, key: str) -> bytes | None:
        value: bytes | None = self.client.get(self.keys.kv_record(namespace, key))
        return value

    @guarded
    def kv_delete(self, namespace: str, key: str) -> bool:
        return self.kv_delete_many(namespace, [key]) == 1

    @guarded
    def kv_delete_many(self, namespace: str, keys: Sequence[str]) -> int:
        """One call: a namespace's records share its slot."""
        if not keys:
            return 0
        records = [self.keys.kv_record(namespace, key) for key in keys]
        return int(self._run(Call(scripts.KV_DELETE, [self.keys.kv_index(namespace), *records], list(keys))))

    @guarded
    def kv_list(self, namespace: str) -> dict[str, bytes]:
        keys = [self.keys.kv_index(namespace), self.keys.kv_record_prefix(namespace)]
        return {k.decode(): v for k, v in pairs(self._run(Call(scripts.KV_LIST, keys, []))).items()}

    @guarded
    def kv_list_many(self, namespaces: Sequence[str]) -> dict[str, dict[str, bytes]]:
        """One round trip on a server; on a cluster one pipeline, sent to each node at once."""
        calls = [Call(scripts.KV_LIST, [self.keys.kv_index(ns), self.keys.kv_record_prefix(ns)], [])
                 for ns in namespaces]
        if not calls:
            return {}
        lane = self._lane
        replies = lane.run_many(calls) if lane is not None else scripts.run_pipelined(self.client, calls)
        return {ns: {k.decode(): v for k, v in pairs(reply).items()}
                for ns, reply in zip(namespaces, replies, strict=True) if reply}
