"""Errors users see. Each carries one sentence that says what is wrong and what to do."""

from __future__ import annotations


class DeferqError(Exception):
    """Base of every deferq error."""


class ConfigError(DeferqError, ValueError):
    """A wrong URL, option or configuration value."""


class PayloadError(DeferqError, TypeError):
    """Task arguments that cannot be stored as JSON."""


class StoreUnavailable(DeferqError, ConnectionError):
    """The store (database or Redis) cannot be reached right now."""


class StoreFull(StoreUnavailable):
    """The store is out of space (a full disk, Redis out of memory): nothing more can be
    written until room is made."""


class SchemaOutdated(DeferqError):
    """The database schema is older than this version of deferq."""


class MissingExtra(DeferqError, ImportError):
    """An optional backend is used without its package installed."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"this backend needs the {module!r} package: pip install 'deferq[{extra}]'"
        )


class Retry(DeferqError):
    """Raise from a task to ask for another attempt after `delay` seconds.

    The attempt still counts; when attempts are used up the job goes dead.
    """

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason


class JobTimeout(DeferqError):
    """A job ran past its timeout."""


def is_store_error(exc: BaseException) -> bool:
    """A driver's "cannot reach the store" error (redis-py, psycopg, PyMySQL, sqlite3
    name theirs differently), told apart from a bug by its class names."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"ConnectionError", "OperationalError", "InterfaceError", "TimeoutError"})
