"""The pytest plugin (registered as `deferq` when deferq is installed): fixtures for
testing code that enqueues jobs. See deferq.testing for the helpers they use.

- `deferq_app`: a fresh `App("memory://")` with no tasks, closed after the test.
- `deferq_isolate`: `deferq_isolate(my_app)` points your project's App (tasks and all)
  at a fresh memory:// store for this test, and back afterwards.
- `deferq_drain`: `deferq_drain(app)` runs the due jobs here (`deferq.testing.drain`).

And a guard on every test: an App opens a SQLite file only under pytest's temporary
directory (`tmp_path`), unless the test is marked `deferq_file_store`. A test that forgot
`deferq_isolate` would otherwise write its jobs into the project's real deferq.db.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from .. import task as task_module  # where an App's runtime opens its store
from .. import testing
from ..app import App
from ..backends import Backend, open_backend
from ..errors import ConfigError
from ..loading import sqlite_file

FILE_STORE = "deferq_file_store"  # the marker that lets a test open SQLite files anywhere


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{FILE_STORE}: let an App open SQLite store files outside tmp_path")


@pytest.fixture(autouse=True)
def _deferq_no_file_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse, in this test, an App's SQLite store outside pytest's temporary directory."""
    if request.node.get_closest_marker(FILE_STORE) is not None:
        return
    base = tmp_path_factory.getbasetemp().resolve()

    def guarded(url: str, **options: object) -> Backend:
        path = sqlite_file(url)
        if path is not None and not path.resolve().is_relative_to(base):
            raise ConfigError(
                f"a test opened the SQLite store {path}, outside pytest's temporary directory: isolate "
                f"the App with the deferq_isolate fixture (or give it a tmp_path URL), or mark the test "
                f"@pytest.mark.{FILE_STORE} to use that file")
        return open_backend(url, **options)

    monkeypatch.setattr(task_module, "open_backend", guarded)


@pytest.fixture
def deferq_app() -> Iterator[App]:
    app = App("memory://")
    yield app
    app.close()


@pytest.fixture
def deferq_isolate() -> Iterator[Callable[..., Any]]:
    with ExitStack() as stack:
        yield lambda app, url="memory://": stack.enter_context(testing.isolated(app, url))


@pytest.fixture
def deferq_drain() -> Callable[..., Any]:
    return testing.drain
