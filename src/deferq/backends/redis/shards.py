"""redis+shards:// — jobs spread over several independent Redis servers (S2-7).

    redis+shards://host1:6379/0,host2:6380/0?prefix=myapp

Each comma-separated part is one server (`[[user]:password@]host:port[/db]`); the
query applies to all of them. One server down affects only the jobs stored there:
producers send new jobs to the healthy servers, workers keep draining the others,
and `get`/`cancel`/`retry_dead` answer for every job on a server that answers.

- A job's id names its server: the backend re-marks the id it is given with the
  server's number (its position in the URL, then the order shards were added at run
  time; `job.mark_id`, `shard_of_id`; docs/redis.md "Shards"), so a look-up by id asks
  that server alone. Servers may be added at the end of the URL, never removed or
  reordered; at run time, through `add_shard`, `drain_shard` and `remove_shard`
  (topology.py: the record every process re-reads).
- A job without a unique key goes to the next healthy live server, round robin per
  call (a batch stays together: still one round trip); a draining one takes none.
- A job with a unique key always goes to the URL's server (an anchor) its key hashes
  to, so the key stays unique across shards coming and going, and `get_by_key` asks
  one server; while that server is down such enqueues fail with StoreUnavailable.
- `stats()` and `list_jobs()` answer from the servers that answered and name the
  others in `missing` (base.Stats, base.JobList).
- kv records live on the anchor their namespace and name hash to.
- A server that failed is skipped for `RETRY_DOWN` seconds, then tried again.
"""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ...errors import ConfigError, StoreFull, StoreUnavailable
from ...job import FINISHED_STATES, MARKS, Job, JobState, mark_id, mark_of
from .. import fair
from ..base import Backend, Enqueue, Heartbeat, JobList, JobStore, Outcome, QueueStats, Stats, grouped
from ..history import Row
from ..search import JobPage, JobQuery, scan_page
from . import flows, reshard, topology
from .backend import RedisBackend
from .connection import LOST, Waiter
from .search import is_position
from .topology import DRAINING, LIVE, REFRESH, REMOVED, Topology

RETRY_DOWN = 1.0
T = TypeVar("T")

# -- which server a job is on, from its id ----------------------------------------------
#
# The shard backend stores a job under its id marked with the number of the server it
# goes to (job.mark_id): its position in the URL (0 = the first), then the order shards
# were added at run time. A look-up reads the number back (`shard_of_id`, job.mark_of).

MAX_SHARDS = MARKS
shard_of_id = mark_of  # the server number a marked job id names, or None (docs/redis.md)


def _positions(value: Any) -> bool:
    """A page's position: each server's own (search.is_position), by its index."""
    return type(value) is dict and all(type(k) is str and k.isdigit() and is_position(v) for k, v in value.items())


def shard_urls(url: str) -> list[str]:
    parts = urlsplit(url)
    rest = url.split("://", 1)[1].split("?", 1)[0]
    servers = [s for s in rest.split(",") if s]
    if len(servers) < 1:
        raise ConfigError(f"{url!r} names no server: use redis+shards://host1:6379/0,host2:6379/0")
    if len(servers) > MAX_SHARDS:
        raise ConfigError(f"{url!r} names {len(servers)} servers: at most {MAX_SHARDS} can be sharded over")
    query = f"?{parts.query}" if parts.query else ""
    return [f"redis://{server}{query}" for server in servers]


class ShardedRedisBackend(Backend):
    schemes = ("redis+shards",)
    keys_per_queue = True  # as on each shard

    def __init__(self, url: str, **options: Any) -> None:
        self.shards: list[RedisBackend] = []
        self._down_until: list[float] = []
        self._full_until: list[float] = []  # out of memory: no new jobs for a while
        self._options = options
        self._query = urlsplit(url).query
        for u in shard_urls(url):
            self._open(u)
        self.anchors = len(self.shards)  # the URL's: keys and kv are routed over these alone
        self.state = [LIVE] * self.anchors  # per shard number: live, draining or removed
        self.topology_seen = Topology()
        self._next_read = 0.0
        self._turn = itertools.count()
        self._owner: dict[str, int] = {}  # leased job with an unmarked id -> shard
        self._settled: dict[tuple[str, int, str], bool] = {}  # applied before a partial failure
        self._lock = threading.Lock()
        self._waiter = Waiter()

    def server_url(self, server: str) -> str:
        """A redis:// URL for one server part, with this store's query (prefix, timeouts)."""
        return f"redis://{server}" + (f"?{self._query}" if self._query else "")

    def open_server(self, server: str) -> RedisBackend:
        """A store on one server (host:port[/db]) with this store's options, not one of its shards."""
        return RedisBackend(self.server_url(server), **self._options)

    def resharding(self) -> reshard.Shards:
        return reshard.Shards(self)

    def _open(self, url: str) -> None:
        shard = RedisBackend(url, **self._options)
        shard.steps_in_reserve = False  # a job's checkpoints are spread over the servers by name
        shard.history_home = self  # what a shard ends by itself is counted where all history is
        shard.homes = self._homes  # a workflow's jobs may sit on several servers (flows.py)
        self._down_until.append(0.0)
        self._full_until.append(0.0)
        self.shards.append(shard)

    # -- the shards added at run time (topology.py) -------------------------------------

    def present(self) -> list[int]:
        """Numbers of the shards in the set (not removed)."""
        self.sync()
        return [i for i, state in enumerate(self.state) if state != REMOVED]

    def sync(self, force: bool = False, max_age: float = REFRESH) -> None:
        """Follow the topology record (when the last read is `max_age` old, or now): the
        newest version any anchor that answers holds."""
        now = time.monotonic()
        if not force and now < self._next_read - REFRESH + max_age:
            return
        self._next_read = now + REFRESH
        found = self.newest_topology(skip_down=not force)
        if found.version > self.topology_seen.version:
            self._follow(found)

    def newest_topology(self, skip_down: bool = False) -> Topology:
        """The newest version of the record among the anchors that answer (one that lost
        its data answers an older one, or none)."""
        found = Topology()
        now = time.monotonic()
        for anchor in range(self.anchors):
            if skip_down and self._down_until[anchor] > now:
                continue  # known down: not waited for again until RETRY_DOWN is over
            try:
                seen = Topology.decode(self.shards[anchor].kv_get(topology.NAMESPACE, "current"))
            except StoreUnavailable as exc:
                self._failed(anchor, exc)
                continue
            if seen.version > found.version:
                found = seen
        return found

    def _follow(self, seen: Topology) -> None:
        with self._lock:
            if seen.version <= self.topology_seen.version:
                return
            for added in seen.added:
                if added.number == len(self.shards):
                    self._open(self.server_url(added.server))
                    self.state.append(added.state)
                elif added.number < len(self.shards):
                    self.state[added.number] = added.state
            self.topology_seen = seen

    def _homes(self, job_id: str) -> Sequence[RedisBackend]:
        """The servers that may hold a job: the one its id is marked for, else every one
        (a server that is down then fails the call, rather than be passed over)."""
        home = self._home(job_id)
        return (self.shards[home],) if home is not None else [self.shards[i] for i in self.present()]

    # -- choosing servers -------------------------------------------------------------

    def name(self, shard: int) -> str:
        """A server as the answers' `missing` lists name it: host:port/db (or a socket path)."""
        target = self.shards[shard].target
        return f"{target.where}/{target.db}" if ":" in target.where else target.where

    def _live(self, start: int = 0, new: bool = False) -> list[int]:
        """Shard numbers in the set and not known to be down, starting at `start` (round
        robin); for `new` jobs, only live ones (not draining)."""
        present = self.present()
        now = time.monotonic()
        n = len(present)
        taking = (LIVE,) if new else (LIVE, DRAINING)
        turn = [present[i % n] for i in range(start, start + n)]
        return [s for s in turn if self._down_until[s] <= now and self.state[s] in taking]

    def _failed(self, shard: int, exc: StoreUnavailable | None = None) -> None:
        """A call to `shard` failed: skip it for a while (only for new jobs when it is full)."""
        until = time.monotonic() + RETRY_DOWN
        if isinstance(exc, StoreFull):
            self._full_until[shard] = until
        else:
            self._down_until[shard] = until

    def _each(self, fn: Callable[[RedisBackend], T], start: int = 0) -> list[tuple[int, T]]:
        """fn on every healthy shard; raises only when none answered."""
        results, errors = [], []
        for shard in self._live(start):
            try:
                results.append((shard, fn(self.shards[shard])))
            except StoreUnavailable as exc:
                self._failed(shard, exc)
                errors.append(exc)
        if not results and (errors or not self._live()):
            raise errors[0] if errors else self._all_down()
        return results

    def _missing(self, answered: Iterable[tuple[int, Any]]) -> list[str]:
        """Names of the shards without an answer among `answered`."""
        found = {shard for shard, _ in answered}
        return [self.name(s) for s in self.present() if s not in found]

    def _all_down(self) -> StoreUnavailable:
        return StoreUnavailable(f"none of the {len(self.present())} Redis shards can be reached")

    def _complete(self, fn: Callable[[RedisBackend], T]) -> list[T]:
        """fn on every shard; for answers that must not miss one (e.g. 'no such record')."""
        found = self._each(fn)
        missing = self._missing(found)
        if missing:
            raise StoreUnavailable(
                f"Redis shard(s) {', '.join(missing)} cannot be reached, so the answer may be incomplete"
            )
        return [result for _, result in found]

    def _key_shard(self, *parts: str) -> int:
        """The anchor a key (or a kv name) belongs to: over the URL's servers alone, so
        it stays where it is whatever shards are added or removed."""
        return zlib.crc32("\0".join(parts).encode()) % self.anchors

    def _home(self, job_id: str) -> int | None:
        """The shard a job id names, if it names one in the set (a shard added by
        another process since the last read is looked up first)."""
        shard = shard_of_id(job_id)
        if shard is not None and shard >= len(self.shards) and shard < MAX_SHARDS:
            self.sync(max_age=0.1)  # not at every look-up of an id that names no shard at all
        return shard if shard is not None and shard < len(self.shards) and self.state[shard] != REMOVED else None

    def _by_id(self, job_id: str, fn: Callable[[RedisBackend], T], found: Callable[[T], bool]) -> T:
        """fn on the shard holding `job_id`. An id that names no shard (not made by this
        backend) is looked for on each: found on one that answers, it is answered; not
        found while a shard is missing, it may be there, so that raises."""
        home = self._home(job_id)
        if home is not None:
            try:
                return fn(self.shards[home])
            except StoreUnavailable as exc:
                self._failed(home, exc)
                raise
        answers = self._each(fn)
        hit = next((answer for _, answer in answers if found(answer)), None)
        if hit is not None:
            return hit
        missing = self._missing(answers)
        if missing:
            raise StoreUnavailable(
                f"job {job_id} may be on Redis shard(s) {', '.join(missing)}, which cannot be reached"
            )
        return answers[0][1]

    # -- producing ------------------------------------------------------------------------

    def enqueue_many(self, items: Sequence[Enqueue], connection: Any = None) -> list[Job]:
        self.refuse_connection(connection)
        groups: dict[int | None, list[int]] = {}
        linked = False
        for i, item in enumerate(items):
            shard = self._key_shard(item.job.key) if item.job.key else None
            groups.setdefault(shard, []).append(i)
            linked = linked or bool(item.after)
        if linked:
            return self._enqueue_linked(items, groups)
        stored: list[Job | None] = [None] * len(items)
        for shard, positions in groups.items():
            batch = [items[i] for i in positions]
            jobs = self._enqueue_keyed(shard, batch) if shard is not None else self._enqueue_any(batch)
            for i, job in zip(positions, jobs, strict=True):
                stored[i] = job
        return stored  # type: ignore[return-value]

    def _store_on(self, shard: int, batch: list[Enqueue]) -> list[Job]:
        """The batch stored on `shard`, each job under its id marked for that shard."""
        marked = [replace(item, job=item.job.evolve(id=mark_id(item.job.id, shard))) for item in batch]
        try:
            return self.shards[shard].enqueue_many(marked)
        except StoreUnavailable as exc:
            self._failed(shard, exc)
            raise

    def _enqueue_linked(self, items: Sequence[Enqueue], groups: dict[int | None, list[int]]) -> list[Job]:
        """Jobs some of which run after others (jobs without a key all on the next
        healthy server), stored and linked across servers (flows.py). Their ids stay as
        given, unmarked: a workflow names its jobs before they are stored (in each
        other's `after`, in meta for results, in a batch's record), so a look-up of one
        asks every server."""
        unkeyed = self._live(next(self._turn), new=True)
        if not unkeyed:
            raise self._all_down()
        place: dict[int, list[int]] = {}
        for shard, positions in groups.items():
            place.setdefault(shard if shard is not None else unkeyed[0], []).extend(positions)
        parts = [(self.shards[shard], [items[i] for i in positions]) for shard, positions in place.items()]
        try:
            stored_parts = flows.enqueue_linked(parts, self._homes)
        except StoreUnavailable as exc:
            for shard in place:
                if not self._live_now(shard):
                    self._failed(shard, exc)
            raise
        stored: list[Job | None] = [None] * len(items)
        for positions, jobs in zip(place.values(), stored_parts, strict=True):
            for i, job in zip(positions, jobs, strict=True):
                stored[i] = job
        return stored  # type: ignore[return-value]

    def _live_now(self, shard: int) -> bool:
        try:
            self.shards[shard].ping()
        except StoreUnavailable:
            return False
        return True

    def is_new(self, item: Enqueue, job: Job) -> bool:
        shard = shard_of_id(job.id)
        return job.id == (item.job.id if shard is None else mark_id(item.job.id, shard))

    def _enqueue_keyed(self, shard: int, batch: list[Enqueue]) -> list[Job]:
        return self._store_on(shard, batch)

    def _enqueue_any(self, batch: list[Enqueue]) -> list[Job]:
        """On the next healthy shard; full ones last (they may have room again)."""
        live = self._live(next(self._turn), new=True)
        now = time.monotonic()
        error: StoreUnavailable | None = None
        for shard in sorted(live, key=lambda s: self._full_until[s] > now):
            try:
                return self._store_on(shard, batch)
            except StoreUnavailable as exc:
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
        priorities = fair.levels_of(priorities)  # every server asked in one order
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
            except StoreUnavailable as exc:
                self._failed(shard, exc)
                continue
            unmarked = [job.id for job in taken if self._home(job.id) != shard]
            if unmarked:
                with self._lock:
                    self._owner.update((job_id, shard) for job_id in unmarked)
            jobs += taken
        jobs.sort(key=lambda j: (rank.get(j.priority, 9), j.run_at, j.id))
        return jobs

    def _owner_of(self, job_id: str) -> int:
        home = self._home(job_id)
        if home is not None:
            return home
        with self._lock:
            shard = self._owner.get(job_id)
        if shard is None:
            found = self._each(lambda b: b.get(job_id))
            shard = next((s for s, job in found if job is not None), 0)  # unknown: fails its fence
        return shard

    def heartbeat(self, jobs: Sequence[Job], lease: float) -> Heartbeat:
        answer = Heartbeat()
        for shard, group in self._group(jobs, lambda job: job.id).items():
            try:
                beat = self.shards[shard].heartbeat(group, lease)
            except StoreUnavailable as exc:
                self._failed(shard, exc)  # its leases run on; nothing is lost if they expire
                continue
            answer |= beat
            answer.cancel_requested |= beat.cancel_requested
        return answer

    def record_progress(self, jobs: Sequence[Job]) -> set[str]:
        lost: set[str] = set()
        for shard, group in self._group(jobs, lambda job: job.id).items():
            try:
                lost |= self.shards[shard].record_progress(group)
            except StoreUnavailable as exc:
                self._failed(shard, exc)  # progress is informative: this report is dropped
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
                self._failed(shard, exc)
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
        return self._by_id(job_id, lambda b: b.get(job_id), lambda job: job is not None)

    def dependents(self, job_id: str) -> list[str]:
        return self._by_id(job_id, lambda b: b.dependents(job_id), bool)

    def count_states(self, ids: list[str]) -> dict[str, int]:
        return flows.count_states(ids, self._homes) if ids else {}

    wakes_waiters = True

    def changes(self, job_id: str, timeout: float) -> bool:
        """Woken by the job's server (RedisBackend.changes); for an id that names no
        server (a workflow's), the server that holds it, found first."""
        homes = self._homes(job_id)
        holder = next((home for home in homes if len(homes) == 1 or home.queues_of([job_id])), None)
        if holder is None:
            return True  # gone: the caller's look says so
        return holder.changes(job_id, timeout)

    def get_many(self, ids: Sequence[str]) -> list[Job | None]:
        """Each server asked once for the ids that may be on it."""
        found: dict[str, Job] = {}
        groups: dict[int, list[str]] = {}
        for job_id in dict.fromkeys(ids):
            home = self._home(job_id)
            for shard in [home] if home is not None else self.present():
                groups.setdefault(shard, []).append(job_id)
        for shard, group in groups.items():
            for job in self.shards[shard].get_many(group):
                if job is not None:
                    found.setdefault(job.id, job)
        return [found.get(job_id) for job_id in ids]

    def get_by_key(self, key: str) -> Job | None:
        return self.shards[self._key_shard(key)].get_by_key(key)

    def cancel(self, job_id: str) -> bool:
        return self._by_id(job_id, lambda b: b.cancel(job_id), bool)

    def wake(self, job_id: str) -> bool:
        return self._by_id(job_id, lambda b: b.wake(job_id), bool)

    def wake_many(self, job_ids: Sequence[str]) -> int:
        """Each server once for the ids it holds; an id that names no server, alone."""
        homes = grouped(job_ids, self._home)
        strays = homes.pop(None, [])
        return (sum(self.shards[shard].wake_many(ids) for shard, ids in homes.items() if shard is not None)
                + sum(self.wake(job_id) for job_id in strays))

    def retry_dead(self, job_id: str) -> bool:
        return self._by_id(job_id, lambda b: b.retry_dead(job_id), bool)

    def rerun(self, job_id: str) -> bool:
        return self._by_id(job_id, lambda b: b.rerun(job_id), bool)

    def run_now(self, job_id: str) -> bool:
        return self._by_id(job_id, lambda b: b.run_now(job_id), bool)

    def delete(self, job_id: str) -> bool:
        return self._by_id(job_id, lambda b: b.delete(job_id), bool)

    def set_remark(self, job_id: str, remark: str | None) -> bool:
        return self._by_id(job_id, lambda b: b.set_remark(job_id, remark), bool)

    def reseal(self, job_id: str, old: str, new: str) -> bool:
        return self._by_id(job_id, lambda b: b.reseal(job_id, old, new), bool)

    def pause(self, queue: str) -> bool:
        """On every server (each leases its own jobs); raises, after pausing those that
        answer, when one does not: pausing again is safe."""
        return any(self._complete(lambda b: b.pause(queue)))

    def resume(self, queue: str) -> bool:
        return any(self._complete(lambda b: b.resume(queue)))

    def paused(self) -> dict[str, float]:
        """Paused on any server that answers (each is paused on every one, see pause)."""
        found: dict[str, float] = {}
        for _, per_shard in self._each(lambda b: b.paused()):
            for queue, since in per_shard.items():
                found[queue] = min(since, found.get(queue, since))
        return found

    def list_jobs(self, state: JobState, queue: str | None = None, limit: int = 100) -> JobList:
        """From the servers that answer; `missing` names the others."""
        answers = self._each(lambda b: b.list_jobs(state, queue, limit))
        jobs = [j for _, found in answers for j in found]
        if JobState(state) in FINISHED_STATES:
            jobs.sort(key=lambda j: (j.finished_at or 0, j.id), reverse=True)
        else:
            jobs.sort(key=lambda j: (j.run_at, j.id), reverse=True)
        return JobList(jobs[:limit], self._missing(answers))

    def find_jobs(self, query: JobQuery) -> JobPage:
        """Every server's pages merged in their common order (state, then score and id,
        highest first); the position holds each server's own."""
        pagers = [(i, self.shards[i].job_pages(query)) for i in self.present()]

        def pages(position: dict[str, Any] | None, size: int) -> list[tuple[Job | None, dict[str, Any]]]:
            position = dict(position or {})
            merged = []
            for i, pager in pagers:
                merged += [(job, after, str(i)) for job, after in pager(position.get(str(i)), size)]
            merged.sort(key=lambda entry: (-entry[1][0], entry[1][1], entry[1][2]), reverse=True)
            taken = []
            for job, after, shard in merged[:size]:
                position = {**position, shard: after}
                taken.append((job, position))
            return taken

        return scan_page(query, pages, _positions)

    def purge(self, states: Iterable[JobState], older_than: float = 0.0) -> int:
        states = list(states)
        return sum(n for _, n in self._each(lambda b: b.purge(states, older_than)))

    def stats(self) -> Stats:
        """Counts summed over the servers that answer; `missing` names the others."""
        answers = self._each(lambda b: b.stats())
        merged = Stats(missing=self._missing(answers))
        for _, per_queue in answers:
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

    def kv_swap(self, namespace: str, key: str, expected: bytes, value: bytes, ttl: float | None = None) -> bool:
        return self._kv_shard(namespace, key).kv_swap(namespace, key, expected, value, ttl)

    def kv_get(self, namespace: str, key: str) -> bytes | None:
        return self._kv_shard(namespace, key).kv_get(namespace, key)

    def rate_take(self, key: str, interval: float) -> tuple[float, float]:
        return self._kv_shard("rate", key).rate_take(key, interval)

    def limit_hold(self, names: Sequence[str], held: Sequence[tuple[Job, float]]) -> None:
        for shard, group in grouped(held, lambda pair: self._owner_of(pair[0].id)).items():
            self.shards[shard].limit_hold(names, group)  # beside the jobs

    def limit_release(self, name: str) -> int:
        """The servers that answer (a server that is down keeps its jobs to their times)."""
        return sum(released for _, released in self._each(lambda b: b.limit_release(name)))

    def slot_holders(self, scope: str) -> dict[str, int]:
        return self._kv_shard("slots", scope).slot_holders(scope)

    def slot_take(self, scope: str, limit: int, holder: str, drop: Sequence[str] = ()) -> int:
        return self._kv_shard("slots", scope).slot_take(scope, limit, holder, drop)

    def slot_release(self, scope: str, holder: str) -> bool:
        return self._kv_shard("slots", scope).slot_release(scope, holder)

    def kv_delete(self, namespace: str, key: str) -> bool:
        return self._kv_shard(namespace, key).kv_delete(namespace, key)

    def kv_put_many(self, records: Sequence[tuple[str, str, bytes]], only_new: bool = False) -> int:
        groups = grouped(records, lambda record: self._key_shard(record[0], record[1]))
        return sum(self.shards[shard].kv_put_many(group, only_new) for shard, group in groups.items())

    def kv_delete_many(self, namespace: str, keys: Sequence[str]) -> int:
        groups = grouped(keys, lambda key: self._key_shard(namespace, key))
        return sum(self.shards[shard].kv_delete_many(namespace, group) for shard, group in groups.items())

    def kv_expire(self, namespace: str, ttl: float) -> int:
        return sum(self._complete(lambda b: b.kv_expire(namespace, ttl)))

    def kv_expire_many(self, namespaces: Sequence[str], ttl: float) -> int:
        return sum(self._complete(lambda b: b.kv_expire_many(namespaces, ttl)))

    def kv_put_leased(self, job: Job, lease: float, namespace: str, key: str,
                      value: bytes) -> tuple[bool, bytes | None]:
        """One script when the job and the record live on one server; else the
        heartbeat on the job's, then the record on its own (as the base does)."""
        shard = self._owner_of(job.id)
        if shard == self._key_shard(namespace, key):
            return self.shards[shard].kv_put_leased(job, lease, namespace, key, value)
        return super().kv_put_leased(job, lease, namespace, key, value)

    def kv_list(self, namespace: str) -> dict[str, bytes]:
        merged: dict[str, bytes] = {}
        for found in self._complete(lambda b: b.kv_list(namespace)):
            merged.update(found)
        return merged

    def kv_list_many(self, namespaces: Sequence[str]) -> dict[str, dict[str, bytes]]:
        """One round trip per server (a namespace's records are spread by name)."""
        merged: dict[str, dict[str, bytes]] = {}
        for found in self._complete(lambda b: b.kv_list_many(namespaces)):
            for namespace, records in found.items():
                merged.setdefault(namespace, {}).update(records)
        return merged

    # -- history: on the server the name "history" hashes to -------------------------------

    def history_add(self, rows: Sequence[Row], keep_minutes: int) -> None:
        self._kv_shard("history", "").history_add(rows, keep_minutes)

    def history_read(
        self, first: int, end: int, queue: str | None = None, task: str | None = None
    ) -> list[tuple[int, str, int]]:
        return self._kv_shard("history", "").history_read(first, end, queue, task)

    def history_prune(self, before: int) -> int:
        return 0  # the keys expire

    def history_forget(self, queue: str, first: int, end: int) -> None:
        self._kv_shard("history", "").history_forget(queue, first, end)

    def forget_queue(self, queue: str) -> bool:
        """On every server; raises, after those that answer, when one does not."""
        return all(self._complete(lambda b: b.forget_queue(queue)))

    # -- life cycle ---------------------------------------------------------------------------

    def ping(self) -> None:
        self._complete(lambda b: b.ping())

    def check(self) -> list[str]:
        """Every server is asked (also those skipped for a while); raises when none answers."""
        answers, errors = [], []
        for shard in self.present():
            backend = self.shards[shard]
            try:
                backend.ping()
            except StoreUnavailable as exc:
                self._failed(shard, exc)
                errors.append(exc)
                continue
            self._down_until[shard] = 0.0
            answers.append((shard, None))
        if not answers:
            raise errors[0]
        return self._missing(answers)

    def parts(self) -> list[tuple[str, JobStore]]:
        return [(self.name(i), self.shards[i]) for i in self.present()]

    def close(self) -> None:
        self._waiter.reset()
        for shard in self.shards:
            shard.close()


def _settle_id(outcome: Outcome) -> tuple[str, int, str]:
    return (outcome.job.id, outcome.job.attempts, outcome.kind)

