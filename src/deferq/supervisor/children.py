"""Child processes of one pool: starting, signalling, measuring, and the crash-loop brake."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from .autoscale import ScaleState
from .config import PoolConfig

CRASH_WINDOW = 60.0  # seconds over which crashes are counted
CRASH_ALERT_AT = 3  # crashes within the window that make a crash loop (and an alert)
MAX_RESTART_DELAY = 30.0
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass
class Child:
    pool: str
    index: int  # the "#n" of its process title
    name: str  # its worker name: the key of its status in kv namespace "workers"
    generation: int  # the config generation it was started with (SIGHUP bumps it)
    process: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    lifetime: float | None = None  # retire after this many seconds (jittered per child)
    retiring_since: float | None = None  # asked to stop; finishing its jobs
    last_seen: float | None = None  # monotonic time of its latest heartbeat in the store
    running: int = 0  # jobs it ran at its latest heartbeat
    retire_reason: str = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def ready(self) -> bool:
        return self.last_seen is not None

    def signal(self, signum: int) -> None:
        try:
            self.process.send_signal(signum)
        except ProcessLookupError:
            pass

    def retire(self, reason: str) -> None:
        """Ask it to stop taking jobs and exit when its running jobs are done."""
        if self.retiring_since is None:
            self.retiring_since = time.monotonic()
            self.retire_reason = reason
            self.signal(signal.SIGTERM)

    def resident_memory(self) -> int | None:
        """Resident set size in bytes (Linux /proc), or None where it cannot be read."""
        try:
            with open(f"/proc/{self.pid}/statm", "rb") as statm:
                return int(statm.read().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            return None

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index, "pid": self.pid, "worker": self.name,
            "generation": self.generation, "started": self.started_wall,
            "state": self.state,
        }

    @property
    def state(self) -> str:
        if self.retiring_since is not None:
            return "retiring"
        return "running" if self.ready else "starting"


@dataclass
class PoolState:
    """What the master knows about one pool while it runs."""

    config: PoolConfig
    scale: ScaleState
    generation: int
    children: list[Child] = field(default_factory=list)
    crashes: collections.deque[float] = field(default_factory=collections.deque)
    restart_at: float = 0.0  # the crash-loop brake: no start before this monotonic time

    @property
    def serving(self) -> list[Child]:
        """Children that take jobs (not retiring)."""
        return [c for c in self.children if c.retiring_since is None]

    def crashed(self, now: float) -> int:
        """Count a crash; in a crash loop, hold restarts back exponentially (0.5 s, 1 s, 2 s ...)."""
        self.crashes.append(now)
        while self.crashes and now - self.crashes[0] > CRASH_WINDOW:
            self.crashes.popleft()
        count = len(self.crashes)
        loop = count - CRASH_ALERT_AT
        delay = 0.0 if loop < 0 else min(0.5 * 2**loop, MAX_RESTART_DELAY)
        self.restart_at = now + delay
        return count

    def free_index(self) -> int:
        used = {c.index for c in self.children}
        return next(i for i in range(1, len(used) + 2) if i not in used)


def spawn_child(pool: PoolState, spec: dict[str, Any], host: str) -> Child:
    """Start one worker process for `pool`; `spec` holds what every child shares."""
    config = pool.config
    index = pool.free_index()
    name = f"{host}:{config.name}#{index}:{uuid.uuid4().hex[:6]}"
    child_spec = {
        **spec, "pool": config.name, "index": index, "name": name,
        "queues": list(config.queues), "concurrency": config.concurrency,
        "max_jobs": config.max_jobs_per_child,
        "master_pid": os.getpid(),  # a child that starts after its master died must know
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "deferq.supervisor.child", orjson.dumps(child_spec).decode()],
        stdin=subprocess.DEVNULL,
    )
    lifetime = None
    if config.max_child_lifetime:  # spread retirements so a pool never restarts all at once
        lifetime = config.max_child_lifetime * (0.9 + 0.2 * (int(name[-6:], 16) / 0xFFFFFF))
    return Child(config.name, index, name, pool.generation, process, lifetime=lifetime)
