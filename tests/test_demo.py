"""`deferq demo` finishes by itself with the outcomes it promises."""

from __future__ import annotations

import subprocess
import sys

import pytest

import deferq

pytestmark = pytest.mark.slow


def test_demo_runs_the_tour(tmp_path):
    url = f"sqlite:///{tmp_path}/demo.db"
    done = subprocess.run(
        [sys.executable, "-m", "deferq", "demo", "--url", url],
        capture_output=True, text=True, timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Done in" in done.stdout
    app = deferq.App(url)
    stats = app.stats()
    assert stats["webhooks"]["dead"] == 1 and stats["reports"]["dead"] == 1
    assert stats["sms"]["succeeded"] == 1
    assert stats["reminders"]["succeeded"] == 3  # two, and one keyed (its twin refused)
    assert stats["email"]["succeeded"] == 4
    app.close()
