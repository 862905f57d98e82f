"""What the SQL stores take from outside: URL options, and the caller's connection.

URL options (`?name=value`, overridden by keyword options) are split into deferq's
own and the driver's. A caller's connection for transactional enqueue may come
wrapped in SQLAlchemy; the driver's connection underneath is what a plan runs on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ...errors import ConfigError

SAFE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def url_options(url: str, given: dict[str, Any], known: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Split the URL's `?name=value` options (overridden by keyword options) into
    deferq's own (`known`) and the rest, which the dialect may pass to its driver."""
    options = dict(parse_qsl(urlsplit(url).query))
    options.update({k: str(v) for k, v in given.items() if v is not None})
    own = {k: v for k, v in options.items() if k in known}
    return own, {k: v for k, v in options.items() if k not in known}


def flag(options: dict[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"option {name}={value!r} must be true or false")


def safe_name(value: str, what: str) -> str:
    if not SAFE_NAME.match(value):
        raise ConfigError(f"{what} {value!r} must be letters, digits and _ (at most 63)")
    return value


def driver_connection(connection: Any) -> Any:
    """The driver's connection under a SQLAlchemy Session or Connection; others as given.

    A Session yields the connection of its current transaction (beginning one if
    needed), so the job is written, committed and rolled back with the Session.
    """
    if type(connection).__module__.startswith("sqlalchemy"):
        if hasattr(connection, "get_bind"):  # a Session
            connection = connection.connection()
        elif not connection.in_transaction():
            connection.begin()  # what its next execute() would do: commit() must see a transaction
        proxied = getattr(connection, "connection", None)  # Connection -> pool's proxy
        connection = getattr(proxied, "driver_connection", proxied)
    return connection
