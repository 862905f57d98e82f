"""The options a store URL may carry (`?name=value`), per store, in one table.

deferq checks a URL's options against it before a driver sees them: a misspelt one is
one sentence naming it, the closest option and the others (ConfigError; exit 2 on the
command line), never a driver's traceback. Some options are deferq's own; the others
are handed to the driver as given (redis-py, libpq). docs/stores.md lists this table
(tests/stores/test_store_urls.py holds the two together).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from ..errors import ConfigError


@dataclass(frozen=True)
class UrlOption:
    name: str
    what: str  # a line of docs/stores.md
    driver: bool = False  # handed to the store's driver as given


def _driver(what: str, *names: str) -> tuple[UrlOption, ...]:
    return tuple(UrlOption(name, what, driver=True) for name in names)


MIGRATE = UrlOption("migrate", "false: never change the schema; `deferq migrate` does (default true)")
POOL_SIZE = UrlOption("pool_size", "connections each process keeps (default 8)")
PREFIX = UrlOption("prefix", "the key prefix that keeps apps (or test runs) apart on one server (default deferq)")
# redis-py's connection options that a URL may set (its own URL parser reads them)
REDIS_DRIVER = _driver(
    "redis-py's connection option",
    "socket_timeout", "socket_connect_timeout", "socket_keepalive", "retry_on_timeout", "health_check_interval",
    "max_connections", "client_name", "ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile",
    "ssl_check_hostname",
)
# libpq's connection parameters (psycopg hands the URL to libpq)
LIBPQ = _driver(
    "libpq's connection parameter",
    "sslmode", "connect_timeout", "application_name", "target_session_attrs", "options", "sslrootcert",
    "sslcert", "sslkey", "keepalives", "keepalives_idle", "tcp_user_timeout", "channel_binding",
    "sslpassword", "sslcrl", "sslcrldir", "sslsni", "sslcompression", "sslcertmode", "sslnegotiation",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "fallback_application_name",
    "client_encoding", "load_balance_hosts", "keepalives_interval", "keepalives_count", "passfile",
    "require_auth", "gssencmode", "gsslib", "gssdelegation", "krbsrvname", "requirepeer", "service",
    "host", "hostaddr", "port", "user", "password", "dbname",
)

# store -> its options (a scheme names its store, but for the ALIASES)
STORE_OPTIONS: dict[str, tuple[UrlOption, ...]] = {
    "memory": (UrlOption("eager", "1: run each task at enqueue, in the caller (for unit tests)"),),
    "sqlite": (MIGRATE, UrlOption("synchronous", "off, normal (default) or full: full fsyncs every commit")),
    "redis": (PREFIX, *REDIS_DRIVER),
    "unix": (PREFIX, *_driver(REDIS_DRIVER[0].what, "db"), *REDIS_DRIVER),  # db: the database number
    "redis+cluster": (PREFIX, *REDIS_DRIVER),
    "redis+shards": (PREFIX, *REDIS_DRIVER),
    "postgresql": (MIGRATE, POOL_SIZE, UrlOption("schema", "the schema that holds deferq's tables"), *LIBPQ),
    "mysql": (
        MIGRATE, POOL_SIZE,
        UrlOption("claim", "auto (default), skip_locked or update: how a claim takes its jobs"),
        UrlOption("connect_timeout", "seconds to wait for a connection (default 10)"),
    ),
}
SHOWN = 12  # driver options a message names (libpq has dozens)
ALIASES = {"rediss": "redis", "postgres": "postgresql", "mariadb": "mysql"}


def own_options(store: str) -> tuple[str, ...]:
    """The names of deferq's own options of `store` (those no driver sees)."""
    return tuple(option.name for option in STORE_OPTIONS[store] if not option.driver)


def check_options(url: str) -> None:
    """Refuse an option the URL's store does not have, with the closest one it has."""
    scheme = urlsplit(url).scheme.lower()
    options = STORE_OPTIONS.get(ALIASES.get(scheme, scheme))
    if options is None:
        return  # an unknown scheme is open_backend's sentence
    known = [option.name for option in options]
    for name, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if name not in known:
            import difflib  # only for this sentence: 140 KiB a process otherwise

            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown option {name!r} in the {scheme}:// URL{hint}: {_listed(options)}")


def _listed(options: tuple[UrlOption, ...]) -> str:
    own = [option.name for option in options if not option.driver]
    driver = [option for option in options if option.driver]
    text = f"deferq's options are {', '.join(own)}"
    if driver:
        names = [option.name for option in driver]
        shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more (docs/stores.md)"
                                            if len(names) > SHOWN else "")
        text += f"; the driver takes {driver[0].what}s {shown}"
    return text
