"""Pick a backend from a URL. Optional backends are imported only when used."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from urllib.parse import urlsplit

from ..errors import ConfigError, MissingExtra
from .base import Backend, Enqueue, Outcome, QueueStats
from .urls import check_options

__all__ = ["Backend", "Enqueue", "Outcome", "QueueStats", "open_backend", "SCHEMES"]

# scheme -> (module, class, extra that provides its driver, driver module)
SCHEMES: dict[str, tuple[str, str, str | None, str | None]] = {
    "memory": ("memory", "MemoryBackend", None, None),
    "sqlite": ("sql.sqlite", "SQLiteBackend", None, None),
    "redis": ("redis.backend", "RedisBackend", "redis", "redis"),
    "rediss": ("redis.backend", "RedisBackend", "redis", "redis"),
    "unix": ("redis.backend", "RedisBackend", "redis", "redis"),
    "redis+cluster": ("redis.backend", "RedisBackend", "redis", "redis"),
    "redis+shards": ("redis.shards", "ShardedRedisBackend", "redis", "redis"),
    "postgresql": ("sql.postgres", "PostgresBackend", "postgres", "psycopg"),
    "postgres": ("sql.postgres", "PostgresBackend", "postgres", "psycopg"),
    "mysql": ("sql.mysql", "MySQLBackend", "mysql", "pymysql"),
    "mariadb": ("sql.mysql", "MySQLBackend", "mysql", "pymysql"),
}


def open_backend(url: str, **options: object) -> Backend:
    """Open the backend a URL names, e.g. ``sqlite:///deferq.db`` or ``redis://host/0``."""
    scheme = urlsplit(url).scheme.lower()
    if scheme not in SCHEMES:
        known = ", ".join(f"{s}://" for s in SCHEMES)
        raise ConfigError(f"unknown store URL {url!r}: it must start with one of {known}")
    check_options(url)
    module_name, class_name, extra, driver = SCHEMES[scheme]
    if driver is not None:
        try:
            importlib.import_module(driver)
        except ImportError:
            raise MissingExtra(extra or scheme, driver) from None
    try:
        module = importlib.import_module(f"{__name__}.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(__name__):
            raise ConfigError(f"the {scheme}:// backend is not available in this build") from None
        raise
    backend_class: Callable[..., Backend] = getattr(module, class_name)  # each takes (url, **options)
    return backend_class(url, **options)
