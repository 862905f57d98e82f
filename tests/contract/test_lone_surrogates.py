"""A name with a lone surrogate (Python text that has no UTF-8: what a bad decode of bytes
leaves, PEP 383) is refused with a sentence or found nowhere, on every store, before any
driver sees it: it once reached PyMySQL, psycopg and redis-py as a UnicodeEncodeError."""

from __future__ import annotations

import pytest

import deferq
from deferq.errors import ConfigError

LONE = "report\ud800"


def ping() -> None:
    """A task to schedule."""


def stored(app: deferq.App) -> tuple[list[str], dict, list[str]]:
    jobs = [job.id for state in ("queued", "scheduled") for job in app.list_jobs(state)]
    return jobs, app.limits.list(), [s.name for s in app.schedules.list()]


def test_a_name_without_utf8_is_refused_or_found_nowhere(app: deferq.App) -> None:
    task = app.task(name="ping")(ping)
    before = stored(app)
    for refused in (lambda: task.options(queue=LONE).enqueue(), lambda: task.options(key=LONE).enqueue(),
                    lambda: app.limits.set(LONE, rate="5/s"), lambda: app.limits.pause(LONE, 10),
                    lambda: app.limits.clear(LONE), lambda: app.schedules.add(LONE, task.call(), every=60)):
        with pytest.raises((ConfigError, ValueError)) as caught:
            refused()
        assert "Traceback" not in str(caught.value) and not isinstance(caught.value, UnicodeError)
    assert app.get(LONE) is None and app.get_by_key(LONE) is None and app.cancel(LONE) is False
    for queue_call in (app.pause, app.resume):
        with pytest.raises(ConfigError):
            queue_call(LONE)
    assert app.schedules.get(LONE) is None and app.schedules.remove(LONE) is False
    with pytest.raises(KeyError):
        app.schedules.pause(LONE)
    assert stored(app) == before, "a refused call stores nothing"
