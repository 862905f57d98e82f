"""The pytest plugin (registered as `deferq` when deferq is installed): fixtures for
testing code that enqueues jobs. See deferq.testing for the helpers they use.

- `deferq_app`: a fresh `App("memory://")` with no tasks, closed after the test.
- `deferq_isolate`: `deferq_isolate(my_app)` points your project's App (tasks and all)
  at a fresh memory:// store for this test, and back afterwards.
- `deferq_drain`: `deferq_drain(app)` runs the due jobs here (`deferq.testing.drain`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from .. import testing
from ..app import App


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
