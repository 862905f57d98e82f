"""The supervisor's TOML file, validated whole at start: a wrong key or value is one sentence.

    url = "redis://127.0.0.1:6379/0"
    app = "myproj.tasks:app"
    [pools.email]
    queues = ["email"]
    processes = { min = 1, max = 8 }
    concurrency = 4
    [alerts]
    webhook = "http://127.0.0.1:9000/alerts"
    [periodic.cleanup]
    cron = "*/5 * * * *"
    task = "cleanup"

Every key is documented in docs/supervisor.md.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..alerts import AlertConfig
from ..errors import ConfigError
from ..options import queue_name
from ..schedule import PeriodicJob, periodic_from_table
from ..values import no_unknown_keys, parse_duration
from .autoscale import ScaleRules

TOP_KEYS = ("url", "app", "grace", "check_every", "pools", "alerts", "periodic")
POOL_KEYS = (
    "queues", "processes", "concurrency", "max_jobs_per_child", "max_child_lifetime",
    "max_child_memory", "hung_after", "scale_up_backlog", "scale_up_wait", "scale_up_every",
    "scale_down_after",
)  # fmt: skip
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmg]?)(?:i?b)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


@dataclass(frozen=True)
class PoolConfig:
    """One pool of identical worker processes serving some queues."""

    name: str
    queues: tuple[str, ...]
    scale: ScaleRules  # min/max processes and when to grow or shrink
    concurrency: int = 8
    max_jobs_per_child: int | None = None
    max_child_lifetime: float | None = None  # seconds
    max_child_memory: int | None = None  # bytes of resident memory
    hung_after: float = 60.0  # seconds without a heartbeat before a child is killed


@dataclass(frozen=True)
class SupervisorConfig:
    url: str | None
    app: str | None
    pools: tuple[PoolConfig, ...]
    alerts: AlertConfig = field(default_factory=AlertConfig)
    periodic: tuple[PeriodicJob, ...] = ()
    grace: float = 25.0  # seconds children get to finish running jobs when stopped
    check_every: float = 1.0  # the master's pace: children, scaling, monitor
    path: Path | None = None
    digest: str = ""  # of the file's bytes, to notice a changed file

    def with_overrides(self, app: str | None, url: str | None) -> SupervisorConfig:
        """Command-line --app/--url win over the file."""
        return replace(self, app=app or self.app, url=url or self.url)


def load_config(path: str | Path) -> SupervisorConfig:
    """Read and validate a config file; ConfigError (one sentence) when anything is wrong."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {str(path)!r}: {exc.strerror}") from None
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return replace(parse_config(table), path=path, digest=file_digest(data))


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_config(table: dict[str, Any]) -> SupervisorConfig:
    no_unknown_keys(table, TOP_KEYS, "the config file")
    for key in ("url", "app"):
        if key in table and not isinstance(table[key], str):
            raise ConfigError(f"{key} must be a string, got {table[key]!r}")
    app = table.get("app")
    if app is not None and not re.fullmatch(r"[\w.]+(:[\w.]+)?", app):
        raise ConfigError(f'app must name your App as "module:attribute", got {app!r}')
    pools = table.get("pools")
    if not isinstance(pools, dict) or not pools:
        raise ConfigError("the config file needs at least one pool, e.g. [pools.default]")
    grace = parse_duration(table.get("grace", 25), "grace")
    check_every = parse_duration(table.get("check_every", 1), "check_every")
    if not 0.05 <= check_every <= 60:
        raise ConfigError(f"check_every must be between 50ms and 60s, got {table['check_every']!r}")
    return SupervisorConfig(
        url=table.get("url"),
        app=app,
        pools=tuple(parse_pool(name, pool) for name, pool in pools.items()),
        alerts=AlertConfig.from_dict(table.get("alerts")),
        periodic=periodic_from_table(table.get("periodic")),
        grace=grace,
        check_every=check_every,
    )


def parse_pool(name: str, pool: Any) -> PoolConfig:
    where = f"pools.{name}"
    if not re.fullmatch(r"[\w-]{1,40}", name):
        raise ConfigError(f"pool name {name!r} must be 1-40 letters, digits, - or _")
    if not isinstance(pool, dict):
        raise ConfigError(f"{where} must be a table")
    no_unknown_keys(pool, POOL_KEYS, where)
    queues = pool.get("queues", ["default"])
    if isinstance(queues, str):
        queues = [queues]
    if not isinstance(queues, list) or not queues:
        raise ConfigError(f'{where}.queues must be a list of queue names, like ["email"]')
    for queue in queues:
        try:
            queue_name(queue)
        except ValueError as exc:
            raise ConfigError(f"{where}.queues: {exc}") from None
    low, high = _processes(pool.get("processes", 1), f"{where}.processes")
    backlog = _int(pool.get("scale_up_backlog", 100), f"{where}.scale_up_backlog", minimum=1)
    rules = ScaleRules(
        minimum=low,
        maximum=high,
        up_backlog=backlog,
        up_wait=parse_duration(pool.get("scale_up_wait", "30s"), f"{where}.scale_up_wait"),
        up_every=parse_duration(pool.get("scale_up_every", "5s"), f"{where}.scale_up_every"),
        down_after=parse_duration(pool.get("scale_down_after", "60s"), f"{where}.scale_down_after"),
    )
    max_jobs, lifetime, memory = (
        pool.get(key) for key in ("max_jobs_per_child", "max_child_lifetime", "max_child_memory")
    )
    if max_jobs is not None:
        max_jobs = _int(max_jobs, f"{where}.max_jobs_per_child", minimum=1)
    if lifetime is not None:
        lifetime = _positive_duration(lifetime, f"{where}.max_child_lifetime")
    if memory is not None:
        memory = parse_size(memory, f"{where}.max_child_memory")
    hung_after = parse_duration(pool.get("hung_after", "60s"), f"{where}.hung_after")
    if hung_after < 1:
        raise ConfigError(f"{where}.hung_after must be at least 1s, got {pool['hung_after']!r}")
    return PoolConfig(
        name=name,
        queues=tuple(queues),
        scale=rules,
        concurrency=_int(pool.get("concurrency", 8), f"{where}.concurrency", minimum=1),
        max_jobs_per_child=max_jobs,
        max_child_lifetime=lifetime,
        max_child_memory=memory,
        hung_after=hung_after,
    )


def parse_size(value: Any, where: str) -> int:
    """Bytes from a number or "512MB", "1.5G", "800KiB" (K, M, G are powers of 1024)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(f'{where} must be a size like "512MB" or "2GB", got {value!r}')
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def _processes(value: Any, where: str) -> tuple[int, int]:
    if isinstance(value, dict):
        no_unknown_keys(value, ("min", "max"), where)
        low = _int(value.get("min", 1), f"{where}.min", minimum=0)
        high = _int(value.get("max", max(low, 1)), f"{where}.max", minimum=1)
        if low > high:
            raise ConfigError(f"{where}.min ({low}) is larger than {where}.max ({high})")
        return low, high
    count = _int(value, where, minimum=1)
    return count, count


def _int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where} must be a whole number of at least {minimum}, got {value!r}")
    return value


def _positive_duration(value: Any, where: str) -> float:
    seconds = parse_duration(value, where)
    if seconds <= 0:
        raise ConfigError(f"{where} must be longer than zero, got {value!r}")
    return seconds
