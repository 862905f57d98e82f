"""Shared fixtures. Stores plug in through tests/support/stores/<name>.py, each providing a
`<name>_url` fixture that yields the URL of a clean store."""

from __future__ import annotations

import logging
import os

import pytest

import deferq

pytest_plugins = [
    "tests.support.stores.local",
    "tests.support.stores.postgres",
    "tests.support.stores.mysql",
    "tests.support.stores.redis",
    "tests.support.stores.leftovers",  # at the end: what the tests made in those stores is gone
]

# The behaviour suite runs on every store named here (`-k sqlite` picks one).
STORES = ["memory", "sqlite", "redis", "redis_cluster", "redis_shards", "postgres", "mysql", "mysql_update"]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need_service(what: str, reason: str) -> None:
    """A missing server skips on a laptop, but fails in CI (CI=true)."""
    message = f"{what} is not available: {reason}"
    if IN_CI:
        pytest.fail(message + " (CI=true: backend tests must run, not skip)")
    pytest.skip(message)


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def app(store_url: str):
    application = deferq.App(store_url, lease=5)
    yield application
    application.close()


@pytest.fixture
def backend(app: deferq.App):
    return app.backend


@pytest.fixture(autouse=True)
def _deferq_logger_as_found():
    """deferq's logger as the test found it: a test that sets logging up in this process
    (the CLI's setup_logging stops propagation to the root) must not hide the next
    tests' log lines from their caplog."""
    logger = logging.getLogger("deferq")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    yield
    logger.handlers[:], logger.propagate = handlers, propagate
    logger.setLevel(level)


def pytest_configure(config: pytest.Config) -> None:
    """`--dist loadgroup` runs a module marked xdist_group on one test process, which
    builds its server, browser or wheel once. pytest-xdist 3.8 does that by renaming the
    tests, which pytest 9 no longer allows: it would spread them silently."""
    if config.getoption("dist", "no") == "loadgroup" and int(pytest.__version__.split(".")[0]) >= 9:
        raise pytest.UsageError(f"--dist loadgroup needs pytest < 9 (this is {pytest.__version__}): pytest-xdist "
                                "cannot group tests under it; `make .venv/.installed` installs the right one")


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (by fixture params), or it undoes this
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first: the capacity benchmark's (a minute and more, on servers
    of their own) then start on one test process while the others take the rest, instead
    of at the end with nothing left beside them."""
    first = ("tests/bench/test_bench_capacity.py::",)
    items.sort(key=lambda item: not item.nodeid.startswith(first))
