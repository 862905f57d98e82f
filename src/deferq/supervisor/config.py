"""The supervisor's TOML file, validated whole at start: every wrong key or value is one
sentence, and one run reports them all (one a line).

    url = "redis://127.0.0.1:6379/0"
    app = "myproj.tasks:app"
    metrics_port = 9100            # optional: the workers' metrics, summed, on 127.0.0.1:9100
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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ConfigError
from ..options import queue_name
from ..schedules.definition import PeriodicJob, periodic_from_table
from ..values import no_unknown_keys, parse_duration
from .alerts import AlertConfig
from .autoscale import ScaleRules

TOP_KEYS = ("url", "app", "grace", "check_every", "metrics_port", "metrics_host", "pools", "alerts", "periodic")
POOL_KEYS = (
    "queues", "processes", "concurrency", "max_jobs_per_child", "max_child_lifetime",
    "max_child_memory", "hung_after", "scale_up_backlog", "scale_up_wait", "scale_up_every",
    "scale_down_after",
)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmg]?)(?:i?b)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_QUEUES: tuple[str, ...] = ("default",)
T = TypeVar("T")


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
    metrics_port: int | None = None  # serve the children's summed worker metrics here
    metrics_host: str = DEFAULT_METRICS_HOST
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
    return replace(parse_config(table, str(path)), path=path, digest=file_digest(data))


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Problems:
    """Every mistake found in a config file, so that one run reports them all: each check
    runs through `value`, which notes a ConfigError and goes on with a stand-in value."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def __len__(self) -> int:
        return len(self.messages)

    def add(self, message: str) -> None:
        self.messages.append(message)

    def value(self, fallback: T, check: Callable[..., T], *args: Any) -> T:
        try:
            return check(*args)
        except ConfigError as exc:
            self.add(str(exc))
            return fallback

    def raise_any(self, source: str) -> None:
        """One ConfigError: the sentence of a single problem, else all of them, one a line."""
        if len(self.messages) == 1:
            raise ConfigError(self.messages[0])
        if self.messages:
            listed = "\n".join(f"  {message}" for message in self.messages)
            raise ConfigError(f"{source} has {len(self.messages)} problems:\n{listed}")


def parse_config(table: dict[str, Any], source: str = "the config file") -> SupervisorConfig:
    problems = Problems()
    problems.value(None, no_unknown_keys, table, TOP_KEYS, "the config file")
    for key in ("url", "app", "metrics_host"):
        if key in table and not isinstance(table[key], str):
            problems.add(f"{key} must be a string, got {table[key]!r}")
    app = table.get("app")
    if isinstance(app, str) and not re.fullmatch(r"[\w.]+(:[\w.]+)?", app):
        problems.add(f'app must name your App as "module:attribute", got {app!r}')
    pools = table.get("pools")
    if not isinstance(pools, dict) or not pools:
        problems.add("the config file needs at least one pool, e.g. [pools.default]")
        pools = {}
    grace = problems.value(25.0, parse_duration, table.get("grace", 25), "grace")
    check_every = problems.value(1.0, parse_duration, table.get("check_every", 1), "check_every")
    if not 0.05 <= check_every <= 60:
        problems.add(f"check_every must be between 50ms and 60s, got {table['check_every']!r}")
    metrics_port = table.get("metrics_port")
    if metrics_port is not None:
        metrics_port = problems.value(None, _int, metrics_port, "metrics_port", 1)
        if metrics_port is not None and metrics_port > 65535:
            problems.add(f"metrics_port must be a port number (1-65535), got {metrics_port}")
    parsed_pools = tuple(parse_pool(name, pool, problems) for name, pool in pools.items())
    alerts = problems.value(AlertConfig(), AlertConfig.from_dict, table.get("alerts"))
    periodic = table.get("periodic")
    none: tuple[PeriodicJob, ...] = ()
    if isinstance(periodic, dict):  # each job on its own, so each mistake is reported
        periodic_jobs = tuple(job for name, entry in periodic.items()
                              for job in problems.value(none, periodic_from_table, {name: entry}))
    else:
        periodic_jobs = problems.value(none, periodic_from_table, periodic)
    problems.raise_any(source)
    return SupervisorConfig(
        url=table.get("url"),
        app=app,
        pools=parsed_pools,
        alerts=alerts,
        periodic=periodic_jobs,
        grace=grace,
        check_every=check_every,
        metrics_port=metrics_port,
        metrics_host=table.get("metrics_host", DEFAULT_METRICS_HOST),
    )


def parse_pool(name: str, pool: Any, problems: Problems) -> PoolConfig:
    """One [pools.NAME] table; its mistakes are noted in `problems` (then the pool returned
    is a stand-in, never used)."""
    where = f"pools.{name}"
    if not re.fullmatch(r"[\w-]{1,40}", name):
        problems.add(f"pool name {name!r} must be 1-40 letters, digits, - or _")
    if not isinstance(pool, dict):
        problems.add(f"{where} must be a table")
        pool = {}
    problems.value(None, no_unknown_keys, pool, POOL_KEYS, where)
    queues = problems.value(DEFAULT_QUEUES, _queues, pool.get("queues", ["default"]), where)
    low, high = problems.value((1, 1), _processes, pool.get("processes", 1), f"{where}.processes")

    def duration(key: str, default: str) -> float:
        return problems.value(1.0, parse_duration, pool.get(key, default), f"{where}.{key}")

    rules = ScaleRules(
        minimum=low,
        maximum=high,
        up_backlog=problems.value(1, _int, pool.get("scale_up_backlog", 100), f"{where}.scale_up_backlog", 1),
        up_wait=duration("scale_up_wait", "30s"),
        up_every=duration("scale_up_every", "5s"),
        down_after=duration("scale_down_after", "60s"),
    )
    max_jobs, lifetime, memory = (
        pool.get(key) for key in ("max_jobs_per_child", "max_child_lifetime", "max_child_memory")
    )
    if max_jobs is not None:
        max_jobs = problems.value(None, _int, max_jobs, f"{where}.max_jobs_per_child", 1)
    if lifetime is not None:
        lifetime = problems.value(None, _positive_duration, lifetime, f"{where}.max_child_lifetime")
    if memory is not None:
        memory = problems.value(None, parse_size, memory, f"{where}.max_child_memory")
    hung_after = duration("hung_after", "60s")
    if hung_after < 1:
        problems.add(f"{where}.hung_after must be at least 1s, got {pool['hung_after']!r}")
    return PoolConfig(
        name=name,
        queues=tuple(queues),
        scale=rules,
        concurrency=problems.value(8, _int, pool.get("concurrency", 8), f"{where}.concurrency", 1),
        max_jobs_per_child=max_jobs,
        max_child_lifetime=lifetime,
        max_child_memory=memory,
        hung_after=hung_after,
    )


def _queues(value: Any, where: str) -> tuple[str, ...]:
    queues = [value] if isinstance(value, str) else value
    if not isinstance(queues, list) or not queues:
        raise ConfigError(f'{where}.queues must be a list of queue names, like ["email"]')
    for queue in queues:
        try:
            queue_name(queue)
        except ValueError as exc:
            raise ConfigError(f"{where}.queues: {exc}") from None
    return tuple(queues)


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
