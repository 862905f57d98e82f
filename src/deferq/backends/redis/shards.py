"""redis+shards:// — jobs spread over several independent Redis servers (S2-7).

    redis+shards://host1:6379/0,host2:6380/0?prefix=myapp

Each comma-separated part is one server (`[[user]:password@]host:port[/db]`); the
query applies to all of them. One server down affects only the jobs stored there:
producers send new jobs to the healthy servers, workers keep draining the others,
and `get`/`cancel` find a job by asking every server.

- A job without a unique key goes to the next healthy server, round robin per call
  (a batch stays together: still one round trip).
- A job with a unique key always goes to the server its key hashes to, so the key
  stays unique; while that server is down such enqueues fail with StoreUnavailable.
- kv records live on the server their namespace and name hash to.
- A server that failed is skipped for `RETRY_DOWN` seconds, then tried again.
"""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ...errors import ConfigError, StoreUnavailable
from ...job import FINISHED_STATES, Job, JobState
from ..base import Backend, Enqueue, Outcome, QueueStats
from .backend import RedisBackend
from .connection import LOST, Waiter

RETRY_DOWN = 1.0
T = TypeVar("T")


def shard_urls(url: str) -> list[str]:
    parts = urlsplit(url)
    rest = url.split("://", 1)[1].split("?", 1)[0]
    servers = [s for s in rest.split(",") if s]
    if len(servers) < 1:
        raise ConfigError(f"{url!r} names no server: use redis+shards://host1:6379/0,host2:6379/0")
    query = f"?{parts.query}" if parts.query else ""
    return [f"redis://{server}{query}" for server in servers]


class ShardedRedisBackend(Backend):
    schemes = ("redis+shards",)

    def __init__(self, url: str, **options: Any) -> None:
        self.shards = [RedisBackend(u, **options) for u in shard_urls(url)]
        self._down_until = [0.0] * len(self.shards)
        self._turn = itertools.count()
        self._owner: dict[str, int] = {}  # leased job id -> shard, for heartbeat and settle
        self._settled: dict[tuple[str, int, str], bool] = {}  # applied before a partial failure
        self._lock = threading.Lock()
        self._waiter = Waiter()

    # -- choosing servers -------------------------------------------------------------

    def _live(self, start: int = 0) -> list[int]:
        """Shard numbers not known to be down, starting at `start` (round robin)."""
        now = time.monotonic()
        n = len(self.shards)
        return [i % n for i in range(start, start + n) if self._down_until[i % n] <= now]

    def _failed(self, shard: int) -> None:
        self._down_until[shard] = time.monotonic() + RETRY_DOWN

    def _each(self, fn: Callable[[RedisBackend], T], start: int = 0) -> list[tuple[int, T]]:
        """fn on every healthy shard; raises only when none answered."""
        results, errors = [], []
        for shard in self._live(start):
            try:
                results.append((shard, fn(self.shards[shard])))
            except StoreUnavailable as exc:
                self._failed(shard)
                errors.append(exc)
        if not results and (errors or not self._live()):
            raise errors[0] if errors else self._all_down()
        return results

    def _all_down(self) -> StoreUnavailable:
        return StoreUnavailable(f"none of the {len(self.shards)} Redis shards can be reached")

    def _complete(self, fn: Callable[[RedisBackend], T]) -> list[T]:
        """fn on every shard; for answers that must not miss one (e.g. 'no such job')."""
        found = self._each(fn)
        if len(found) < len(self.shards):
            down = sorted(set(range(len(self.shards))) - {s for s, _ in found})
            raise StoreUnavailable(
                f"Redis shard(s) {', '.join(self.shards[s].target.where for s in down)} "
                "cannot be reached, so the answer may be incomplete"
            )
        return [result for _, result in found]

    def _key_shard(self, *parts: str) -> int:
        return zlib.crc32("\0".join(parts).encode()) % len(self.shards)

    # -- producing ------------------------------------------------------------------------

    def enqueue_many(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        self.refuse_connection(connection)
        groups: dict[int | None, list[int]] = {}
        for i, item in enumerate(items):
            shard = self._key_shard(item.job.key) if item.job.key else None
            groups.setdefault(shard, []).append(i)
        stored: list[Job | None] = [None] * len(items)
        for shard, positions in groups.items():
            batch = [items[i] for i in positions]
            jobs = self._enqueue_keyed(shard, batch) if shard is not None else self._enqueue_any(batch)
            for i, job in zip(positions, jobs, strict=True):
                stored[i] = job
        return stored  # type: ignore[return-value]

    def _enqueue_keyed(self, shard: int, batch: list[Enqueue]) -> list[Job]:
        try:
            return self.shards[shard].enqueue_many(batch)
        except StoreUnavailable:
            self._failed(shard)
            raise

    def _enqueue_any(self, batch: list[Enqueue]) -> list[Job]:
        error: StoreUnavailable | None = None
        for shard in self._live(next(self._turn)):
            try:
                return self.shards[shard].enqueue_many(batch)
            except StoreUnavailable as exc:
                self._failed(shard)
                error = exc
        raise error or self._all_down()

    # -- consuming ------------------------------------------------------------------------

    def reserve(
        self, queues: Sequence[str], limit: int, worker: str, lease: float, priorities: Sequence[int]
    ) -> list[Job]:
        """Ask every healthy server which jobs it would give, take the first `limit` of
        the merged order from each, and return them in that order: FIFO and priority
        preference hold across servers as on one."""
        if limit <= 0:
            return []
        rank = {p: i for i, p in enumerate(priorities)}
        candidates = self._each(lambda b: b.peek(queues, limit, priorities), next(self._turn))
        merged = sorted(
            ((rank.get(p, 9), due, job_id, shard) for shard, found in candidates for p, due, job_id in found)
        )[:limit]
        wanted: dict[int, int] = {}
        for *_, shard in merged:
            wanted[shard] = wanted.get(shard, 0) + 1
        jobs: list[Job] = []
        for shard, count in wanted.items():
            try:
                taken = self.shards[shard].reserve(queues, count, worker, lease, priorities)
            except StoreUnavailable:
                self._failed(shard)
                continue
            with self._lock:
                self._owner.update((job.id, shard) for job in taken)
            jobs += taken
        jobs.sort(key=lambda j: (rank.get(j.priority, 9), j.run_at, j.id))
        return jobs

    def _owner_of(self, job_id: str) -> int:
        with self._lock:
            shard = self._owner.get(job_id)
        if shard is None:
            found = self._each(lambda b: b.get(job_id))
            shard = next((s for s, job in found if job is not None), 0)  # unknown: fails its fence
        return shard

    def heartbeat(self, jobs: Sequence[Job], lease: float) -> set[str]:
        lost: set[str] = set()
        for shard, group in self._group(jobs, lambda job: job.id).items():
            try:
                lost |= self.shards[shard].heartbeat(group, lease)
            except StoreUnavailable:
                self._failed(shard)  # its leases run on; nothing is lost if they expire
        return lost

    def settle(self, outcomes: Sequence[Outcome]) -> list[bool]:
        """Per shard; when one is down, the others' results are kept for the retry, so
        a settle that already applied is not reported as a lost lease."""
        error = None
        for shard, group in self._group(outcomes, lambda o: o.job.id).items():
            todo = [o for o in group if _settle_id(o) not in self._settled]
            if not todo:
                continue
            try:
                applied = self.shards[shard].settle(todo)
            except StoreUnavailable as exc:
                self._failed(shard)
                error = exc
                continue
            self._settled.update(zip(map(_settle_id, todo), applied, strict=True))
        if error is not None:
            raise error
        results = [self._settled.pop(_settle_id(o)) for o in outcomes]
        with self._lock:
            for outcome in outcomes:
                self._owner.pop(outcome.job.id, None)
        return results

    def _group(self, items: Sequence[T], id_of: Callable[[T], str]) -> dict[int, list[T]]:
        groups: dict[int, list[T]] = {}
        for item in items:
            groups.setdefault(self._owner_of(id_of(item)), []).append(item)
        return groups

    def recover_expired(self) -> int:
        return sum(n for _, n in self._each(lambda b: b.recover_expired()))

    def wait_for_work(self, queues: Sequence[str], timeout: float) -> None:
        try:
            found = self._each(lambda b: (b.next_due(queues), b.wake_groups(queues)))
        except StoreUnavailable:
            self._waiter.reset()
            raise
        due = [d for _, (d, _) in found if d is not None]
        if due and min(due) <= 0:
            return
        timeout = min([timeout, *due])
        groups = [g for _, (_, shard_groups) in found for g in shard_groups]
        try:
            self._waiter.wait(groups, timeout)
        except LOST as exc:  # a shard died while we watched it (the waiter has reset)
            raise StoreUnavailable(f"a Redis shard stopped answering during wait_for_work: {exc}") from None

    # -- inspecting and managing ----------------------------------------------------------

    def get(self, job_id: str) -> Job | None:
        return next((j for j in self._complete(lambda b: b.get(job_id)) if j), None)

    def get_by_key(self, key: str) -> Job | None:
        return self.shards[self._key_shard(key)].get_by_key(key)

    def cancel(self, job_id: str) -> bool:
        return any(self._complete(lambda b: b.cancel(job_id)))

    def retry_dead(self, job_id: str) -> bool:
        return any(self._complete(lambda b: b.retry_dead(job_id)))

    def list_jobs(self, state: JobState, queue: str | None = None, limit: int = 100) -> list[Job]:
        jobs = [j for _, found in self._each(lambda b: b.list_jobs(state, queue, limit)) for j in found]
        if JobState(state) in FINISHED_STATES:
            jobs.sort(key=lambda j: (j.finished_at or 0, j.id), reverse=True)
        else:
            jobs.sort(key=lambda j: (j.run_at, j.id), reverse=True)
        return jobs[:limit]

    def purge(self, states: Iterable[JobState], older_than: float = 0.0) -> int:
        states = list(states)
        return sum(n for _, n in self._each(lambda b: b.purge(states, older_than)))

    def stats(self) -> dict[str, QueueStats]:
        merged: dict[str, QueueStats] = {}
        for _, per_queue in self._each(lambda b: b.stats()):
            for queue, stats in per_queue.items():
                total = merged.setdefault(queue, QueueStats())
                for state, count in stats.counts.items():
                    total.counts[state] += count
                total.oldest_wait = max(total.oldest_wait, stats.oldest_wait)
        return merged

    def now(self) -> float:
        return self._each(lambda b: b.now())[0][1]

    # -- kv: each record on the server its namespace and name hash to --------------------

    def _kv_shard(self, namespace: str, key: str) -> RedisBackend:
        return self.shards[self._key_shard(namespace, key)]

    def kv_put(
        self, namespace: str, key: str, value: bytes, ttl: float | None = None, only_new: bool = False
    ) -> bool:
        return self._kv_shard(namespace, key).kv_put(namespace, key, value, ttl, only_new)

    def kv_get(self, namespace: str, key: str) -> bytes | None:
        return self._kv_shard(namespace, key).kv_get(namespace, key)

    def kv_delete(self, namespace: str, key: str) -> bool:
        return self._kv_shard(namespace, key).kv_delete(namespace, key)

    def kv_list(self, namespace: str) -> dict[str, bytes]:
        merged: dict[str, bytes] = {}
        for found in self._complete(lambda b: b.kv_list(namespace)):
            merged.update(found)
        return merged

    # -- life cycle ---------------------------------------------------------------------------

    def ping(self) -> None:
        self._complete(lambda b: b.ping())

    def close(self) -> None:
        self._waiter.reset()
        for shard in self.shards:
            shard.close()


def _settle_id(outcome: Outcome) -> tuple[str, int, str]:
    return (outcome.job.id, outcome.job.attempts, outcome.kind)
