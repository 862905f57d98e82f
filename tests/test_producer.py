"""The producer API without a worker: eager mode, bad input, URLs."""

from __future__ import annotations

import pytest

import deferq
from deferq.errors import ConfigError, MissingExtra


def test_eager_mode_runs_at_enqueue_with_retries():
    app = deferq.App("memory://", eager=True)
    calls = []

    @app.task(max_attempts=3)
    def flaky(x):
        calls.append(x)
        if len(calls) < 2:
            raise RuntimeError("first call fails")
        return x * 10

    job = flaky.options(delay=3600).enqueue(4)
    assert job.state == "succeeded" and job.result == 40 and job.attempts == 2


def test_eager_mode_async_task_and_dead():
    app = deferq.App("memory://?eager=1")

    @app.task(max_attempts=2)
    async def never():
        raise ValueError("no")

    job = never.enqueue()
    assert job.state == "dead" and "ValueError: no" in job.error


def test_eager_needs_memory():
    with pytest.raises(ConfigError, match="memory"):
        deferq.App("sqlite:///x.db", eager=True)


def test_unknown_scheme_is_a_sentence():
    with pytest.raises(ConfigError, match="unknown store URL 'ftp://x'"):
        deferq.App("ftp://x").backend


def test_missing_extra_names_the_pip_command(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_redis(name, *args, **kwargs):
        if name == "redis" or name.startswith("redis."):
            raise ImportError("no redis here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_redis)
    monkeypatch.delitem(__import__("sys").modules, "redis", raising=False)
    with pytest.raises(MissingExtra, match=r"pip install 'deferq\[redis\]'"):
        deferq.App("redis://127.0.0.1:6379/0").backend


def test_options_validate():
    app = deferq.App("memory://")

    @app.task()
    def f(): ...

    for bad in ({"max_attempts": 0}, {"timeout": -1}, {"queue": "a b"}, {"at": "tomorrow"}):
        with pytest.raises(ValueError):
            f.options(**bad)
    with pytest.raises(ValueError, match="already registered"):
        app.task(name="f")(lambda: None)


def test_task_is_still_a_function():
    app = deferq.App("memory://")

    @app.task()
    def add(a, b):
        return a + b

    assert add(2, 3) == 5
