"""The suite's own rules: `make test` touches only what it is given (no test flushes a
Redis database; tests/stores/test_shared_stores.py shows the checks on the shared stores
at work), and the tests live in tiers (docs/development.md, "The tests in tiers"): every
test file in a tier's folder, and the unit tier in the test's own process alone."""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.unit.conftest import UnitTierBreach, breaches

TESTS = Path(__file__).resolve().parents[1]
TIERS = ("unit", "contract", "stores", "process", "server", "console", "bench", "attack")


def test_no_test_flushes_a_redis_database():
    """Tests delete their own key prefixes; a benchmark that flushes gets a redis-server
    of the test's own, so no file under tests/ flushes anything."""
    pattern = re.compile(r"flush_?(db|all)", re.IGNORECASE)
    found = [f"{path.relative_to(TESTS)}:{number}"
             for path in TESTS.rglob("*.py") if path != Path(__file__).resolve()
             for number, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []




def test_every_test_file_is_in_a_tier():
    """No test file at the top of tests/ or in support/: a new one goes into the folder of
    what it needs, so `make test-fast` (tests/unit and tests/contract) picks it up or
    leaves it out by where it is, not by a list."""
    misplaced = sorted(str(path.relative_to(TESTS)) for path in TESTS.rglob("test_*.py")
                       if "node_modules" not in path.parts and path.relative_to(TESTS).parts[0] not in TIERS)
    assert misplaced == []
    assert {path.name for path in TESTS.iterdir() if path.suffix == ".py"} == {"__init__.py", "conftest.py"}


def test_the_unit_tier_drives_no_browser():
    """Nothing under tests/unit imports Playwright (a browser is a process and a page of
    the console: tests/console/)."""
    found = [f"{path.name}: {alias.name}"
             for path in sorted((TESTS / "unit").rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, (ast.Import, ast.ImportFrom))
             for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
             if alias.name.split(".")[0] == "playwright"]
    assert found == []


@pytest.mark.parametrize("attempt", ["subprocess", "fork", "system", "multiprocessing", "connect", "listen"])
def test_the_unit_tier_fails_a_test_that_leaves_its_process(attempt):
    """The guard of tests/unit/conftest.py refuses each way out of the test's process, with
    an error that no store-retry mistakes for a store that cannot be reached."""
    import multiprocessing

    tries = {
        "subprocess": lambda: subprocess.run(["true"], check=True),
        "fork": os.fork,
        "system": lambda: os.system("true"),
        "multiprocessing": lambda: multiprocessing.Process(target=print).start(),
        "connect": lambda: socket.create_connection(("127.0.0.1", 6379), timeout=1),
        "listen": lambda: socket.socket().bind(("127.0.0.1", 0)),
    }
    before = len(breaches)
    with pytest.raises(UnitTierBreach, match="tests/unit/ runs in the test's process alone"):
        tries[attempt]()
    assert not isinstance(UnitTierBreach(), OSError)
    assert len(breaches) == before + 1
    del breaches[before:]  # caught on purpose: not this test's failure


def test_the_unit_tier_lets_the_sqlite_and_memory_stores_and_the_test_client_through(tmp_path):
    """What the tier is for still works under the guard: a job through SQLite and the
    memory store, a socket pair (asyncio's own), and the HTTP API in process."""
    import deferq
    from deferq.server import ServerConfig, create_app
    from tests.support.server_helpers import TestClient

    for url in (f"sqlite:///{tmp_path}/d.db", "memory://"):
        app = deferq.App(url)
        try:
            job = app.enqueue("shop.mail", ["a@example.com"], queue="email")
            assert app.get(job.id) is not None
            with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
                assert [found["id"] for found in api.get("/v1/jobs").json()["jobs"]] == [job.id]
        finally:
            app.close()
    left, right = socket.socketpair()
    left.close()
    right.close()
