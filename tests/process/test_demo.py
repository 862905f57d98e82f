"""`deferq demo` finishes by itself with the outcomes it promises."""

from __future__ import annotations

import re
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
    # the keyed reminder enqueued twice: the demo shows that the second call returned the first job
    assert re.search(r"the second call returned 06\w+ again: no second job", done.stdout), done.stdout
    app = deferq.App(url)
    stats = app.stats()
    assert stats["webhooks"]["dead"] == 1 and stats["reports"]["dead"] == 1
    assert stats["sms"]["succeeded"] == 1
    assert stats["reminders"]["succeeded"] == 3  # two, and one keyed (its twin refused)
    assert stats["email"]["succeeded"] == 4
    app.close()


def test_the_demo_shows_the_same_key_returning_the_same_job(tmp_path):
    """The demo's keyed step alone, without its workers."""
    from deferq.cli import demo

    saved = demo.app.url
    demo.app.close()
    demo.app.url = f"sqlite:///{tmp_path}/demo.db"
    try:
        (text, enqueue, say), = [step for step in demo.STEPS if step[2] is demo.same_key_twice]
        first, second = enqueue()
        assert say is not None and say([first, second]) == (
            f"the second call returned {first.id} again: no second job")
        assert second.id == first.id and demo.app.stats()["reminders"]["scheduled"] == 1
    finally:
        demo.app.close()
        demo.app.url = saved
