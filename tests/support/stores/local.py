"""Stores that need no server: memory:// and a fresh SQLite file per test."""

from __future__ import annotations

import pytest


@pytest.fixture
def memory_url() -> str:
    return "memory://"


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/deferq.db"
