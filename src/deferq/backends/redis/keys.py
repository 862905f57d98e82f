"""Every Redis key deferq uses, named in one place.

All keys of one queue share the hash tag ``{<prefix>:q:<queue>}``, so every script
touches a single Redis Cluster slot. A job's hash lives under its queue's tag
(``{deferq:q:email}:job:<id>``), which is why scripts that discover job ids (reserve,
recover, purge) may build job keys from the queue's job-key prefix: the prefix is
passed in KEYS, and anything appended to it stays in the same slot.

The only keys outside a queue's slot are the queue registry (which queues exist, so
maintenance and `get(job_id)` know where to look) and the kv records.

Layout of one queue (P = prefix, Q = queue):

  {P:q:Q}:wait:0|1|2   zset  waiting jobs of priority high|normal|low, score = due time.
                             Jobs due later are the "delay bucket"; the part with a
                             score <= now is the ready queue (see docs/redis.md).
  {P:q:Q}:ready:0|1|2  list  new jobs due at their creation without a unique key, fair key or
                             parents (add.lua, enqueue.lua), priority high|normal|low:
                             LPUSHed, taken from the tail (oldest first); claimed with the
                             waiting zset of their level by due time (reserve.lua)
  {P:q:Q}:gone         hash  level -> how many ready-list entries are of jobs cancelled
                             there (left for the claim to drop: stats subtracts them)
  {P:q:Q}:fair:0|1|2   zset  due jobs with a fair key (backends/fair.py), score = virtual
                             time: claimed in that order, each key in turn
  {P:q:Q}:fairnext:0|1|2 zset fair key -> the virtual time of its next job
  {P:q:Q}:active       zset  leased jobs, score = lease deadline
  {P:q:Q}:succeeded    zset  finished jobs, score = finished_at (also dead, cancelled)
  {P:q:Q}:unique       hash  unique key -> id of the newest job with that key
  {P:q:Q}:behind       hash  unique key -> id of the job waiting behind its running holder
  {P:q:Q}:held         zset  waiting jobs that claims must pass over (behind a running
                             holder of their key), score = due time
  {P:q:Q}:limited:<name> zset waiting jobs a limit holds (a rate's turn, a pause), score =
                             the due time it gave them: what its clear or resume makes due
  {P:q:Q}:wake         list  at most one token: "something changed, look again"
  {P:q:Q}:paused       string present while the queue is paused: when it was paused
  {P:q:Q}:job:<id>     hash  the job record (fields in codec.py; a new one leaves out what
                             its readers can tell, and older records read the same)
  {P:q:Q}:new          hash  job id -> record of a plain job add.lua stored that nothing
                             has touched since (_lib.lua record_fields): it has no hash
                             of its own until then (the claim, a cancel, a remark ... make it)
  {P:q:Q}:blocked      zset  jobs waiting for the jobs they run after, score = creation time
  {P:q:Q}:parents:<id> set   ids of the unfinished jobs the blocked job <id> runs after:
                             each one taken away once (SREM), by the parent's release
  {P:q:Q}:children:<id> set  "<child queue> <child id>" of the jobs that run after <id>
                             (an edge), removed once its child has heard the outcome
  {P:q:Q}:released     zset  finished jobs of this queue whose children have not all
                             heard yet, score = when the sweep may take it (the settling
                             backend releases them at once; the sweep after a crash)
  {P:q:Q}:linking      zset  blocked jobs whose links may not all be made yet, score = when
                             the sweep may link them (a producer that died mid-enqueue)
  {P:q:Q}:done:<id>    list  one token pushed when <id> finishes, only if someone waits
                             for it (a `w` in the `notify` field of its hash); expires after a minute
  P:queues             set   names of every queue ever used
  {P:kv:NS}:index      set   record names of kv namespace NS
  {P:kv:NS}:r:<name>   string one kv record (with its TTL)
  {P:rate:<key>}       string a rate limit's next free time (expires once it has passed)
  {P:slots:<scope>}    set   holders ("<job id>:<attempt>") of a concurrency limit's slots
  {P:history}:m:<minute>          set   "queue\ntask" names counted in that minute
  {P:history}:c:<minute>:<q>\n<t>  hash  that minute's counters of queue q, task t
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from ...job import Priority

DEFAULT_PREFIX = "deferq"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    name: str
    tag: str
    waiting: tuple[str, ...]  # indexed by priority level
    ready: tuple[str, ...]  # indexed by priority level: lists of plain jobs due at their creation
    gone: str
    fair: tuple[str, ...]  # indexed by priority level: due jobs with a fair key, by virtual time
    active: str
    succeeded: str
    dead: str
    cancelled: str
    unique: str
    wake: str
    job_prefix: str
    new: str
    behind: str
    held: str
    paused: str
    blocked: str
    released: str
    linking: str

    @property
    def enqueue_keys(self) -> tuple[str, ...]:
        """KEYS[1..8] of enqueue.lua."""
        return (*self.waiting, self.unique, self.wake, self.job_prefix, self.behind, self.held)

    @property
    def step_up_keys(self) -> tuple[str, ...]:
        """KEYS of step_up.lua."""
        return (*self.waiting, self.unique, self.wake, self.job_prefix, self.behind, self.held)

    def job(self, job_id: str) -> str:
        return self.job_prefix + job_id

    def limited(self, name: str) -> str:
        """The jobs of this queue held by the limit `name` (limit_hold.lua)."""
        return f"{self.tag}:limited:{name}"

    def parents(self, job_id: str) -> str:
        return f"{self.tag}:parents:{job_id}"

    def children(self, job_id: str) -> str:
        return f"{self.tag}:children:{job_id}"

    def done(self, job_id: str) -> str:
        return f"{self.tag}:done:{job_id}"

    def finished(self, state: str) -> str:
        return {"succeeded": self.succeeded, "dead": self.dead, "cancelled": self.cancelled}[state]


class KeySpace:
    """Key names under one prefix. `queue()` results are cached: the hot path asks often."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        if not prefix or any(c in prefix for c in "{} \0"):
            raise ConfigError(f"Redis key prefix {prefix!r} must be non-empty, without braces or spaces")
        self.prefix = prefix
        self.queues = f"{prefix}:queues"
        self.history_prefix = f"{{{prefix}:history}}:"
        self._queues: dict[str, QueueKeys] = {}

    def queue(self, name: str) -> QueueKeys:
        keys = self._queues.get(name)
        if keys is None:
            tag = f"{{{self.prefix}:q:{name}}}"
            keys = self._queues[name] = QueueKeys(
                name=name,
                tag=tag,
                waiting=tuple(f"{tag}:wait:{level}" for level in Priority.LEVELS),
                ready=tuple(f"{tag}:ready:{level}" for level in Priority.LEVELS),
                gone=f"{tag}:gone",
                fair=tuple(f"{tag}:fair:{level}" for level in Priority.LEVELS),
                active=f"{tag}:active",
                succeeded=f"{tag}:succeeded",
                dead=f"{tag}:dead",
                cancelled=f"{tag}:cancelled",
                unique=f"{tag}:unique",
                wake=f"{tag}:wake",
                job_prefix=f"{tag}:job:",
                new=f"{tag}:new",
                behind=f"{tag}:behind",
                held=f"{tag}:held",
                paused=f"{tag}:paused",
                blocked=f"{tag}:blocked",
                released=f"{tag}:released",
                linking=f"{tag}:linking",
            )
        return keys

    def rate(self, key: str) -> str:
        return f"{{{self.prefix}:rate:{key}}}"

    def slots(self, scope: str) -> str:
        return f"{{{self.prefix}:slots:{scope}}}"

    def slot_keys(self, scope: str) -> list[str]:
        """A concurrency limit's holders (a set) and their fences (a hash), one slot."""
        return [self.slots(scope), f"{self.slots(scope)}:fence"]

    def kv_tag(self, namespace: str) -> str:
        return f"{{{self.prefix}:kv:{namespace}}}"

    def kv_index(self, namespace: str) -> str:
        return f"{self.kv_tag(namespace)}:index"

    def kv_record_prefix(self, namespace: str) -> str:
        return f"{self.kv_tag(namespace)}:r:"

    def kv_record(self, namespace: str, name: str) -> str:
        return self.kv_record_prefix(namespace) + name
