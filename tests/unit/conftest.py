"""The unit tier runs in the test's own process and nothing else: pure logic, the memory
store and SQLite files, deferq's worker on threads of this process, the ASGI app through
Starlette's TestClient (no socket). It starts no process (no fork, no `subprocess`, no
`multiprocessing`), connects to no store server and listens on no port, and drives no
browser (that starts a process too). A test that needs one of those belongs in another
tier (docs/development.md, "The tests in tiers").

The guard below holds every unit test to that: each way out raises UnitTierBreach, and a
breach that the code under test caught still fails the test at its teardown.
tests/unit/test_suite_hygiene.py shows it at work."""

from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

try:  # imported before any guard: at its first import croniter asks platform.architecture(),
    import croniter  # noqa: F401  which runs `file` on the interpreter, a process of its own
except ImportError:
    pass

# the stores' fixtures (tests/support/stores/) that hand out a server's URL
SERVER_FIXTURES = {"redis_url", "redis_cluster_url", "redis_shards_url", "postgres_url", "mysql_url",
                   "mysql_update_url", "mysql_session_url", "postgres_admin", "mysql_admin"}
NETWORK = (socket.AF_INET, socket.AF_INET6)
breaches: list[str] = []  # what the running test tried; test_suite_hygiene.py empties it on purpose


class UnitTierBreach(Exception):
    """Not an OSError, so code that retries a store that cannot be reached does not take it
    for one."""


def _refuse(what: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        breaches.append(what)
        raise UnitTierBreach(f"a unit test {what}: tests/unit/ runs in the test's process alone "
                             "(tests/unit/conftest.py); move the test to the tier that gives it that")
    return refused


def _network_only(what: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def checked(sock: socket.socket, address: Any, *args: Any) -> Any:
        if sock.family in NETWORK:
            _refuse(f"{what} {address!r}")()
        return method(sock, address, *args)
    return checked


@pytest.fixture(autouse=True)
def _in_this_process_alone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    servers = SERVER_FIXTURES.intersection(request.fixturenames)
    if servers:
        pytest.fail(f"a unit test asks for a store server ({', '.join(sorted(servers))}): tests/unit/ uses "
                    "memory:// and SQLite only; a test over every store belongs in tests/contract/, one "
                    "store's in tests/stores/")
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("starts a process (subprocess)"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"starts a process (os.{name})"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start",
                        _refuse("starts a process (multiprocessing)"))
    monkeypatch.setattr(socket.socket, "connect", _network_only("connects to", socket.socket.connect))
    monkeypatch.setattr(socket.socket, "connect_ex", _network_only("connects to", socket.socket.connect_ex))
    monkeypatch.setattr(socket.socket, "bind", _network_only("listens on", socket.socket.bind))
    try:  # libpq connects in C, past the socket module
        import psycopg
    except ImportError:
        pass
    else:
        for cls in (psycopg.Connection, psycopg.AsyncConnection):
            monkeypatch.setattr(cls, "connect", _refuse("connects to PostgreSQL"))
    before = len(breaches)
    yield
    tried = breaches[before:]
    del breaches[before:]
    if tried:
        pytest.fail("a unit test went outside its process: " + "; ".join(tried), pytrace=False)
