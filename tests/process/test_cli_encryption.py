"""`deferq encryption new-key | rotate` and DEFERQ_ENCRYPTION_KEYS as a person meets them:
real processes on a SQLite store. A worker without the key refuses to start in one line;
with it, it runs the jobs; rotate moves every value to the first key of the variable."""

from __future__ import annotations

import base64
import os

import pytest

import deferq
from deferq.encryption import new_key
from deferq.encryption.jobs import ARGS
from tests.process.test_cli import run_deferq, tasks_module

TASKS = '''
import deferq

app = deferq.App("memory://", encryption=deferq.Encryption())  # its keys: DEFERQ_ENCRYPTION_KEYS


@app.task(max_attempts=1)
def remember(ssn: str) -> str:
    return "seen " + ssn
'''
OLD, NEW = new_key(), new_key()


@pytest.fixture
def tasks(tmp_path, monkeypatch):
    yield from tasks_module(tmp_path, monkeypatch, TASKS, "enctasks")


def keys(*pairs: tuple[str, str]) -> None:
    """The DEFERQ_ENCRYPTION_KEYS of the next process (none: unset)."""
    if pairs:
        os.environ["DEFERQ_ENCRYPTION_KEYS"] = ",".join(f"{kid}:{key}" for kid, key in pairs)
    else:
        os.environ.pop("DEFERQ_ENCRYPTION_KEYS", None)


@pytest.fixture(autouse=True)
def _keys_put_back():
    """Each test starts without the variable and leaves the process as it found it: the
    later tests of this test process start workers that would take keys left here (and
    encrypt every job). monkeypatch.delenv of an unset name records nothing to restore."""
    before = os.environ.pop("DEFERQ_ENCRYPTION_KEYS", None)
    yield
    os.environ.pop("DEFERQ_ENCRYPTION_KEYS", None)
    if before is not None:
        os.environ["DEFERQ_ENCRYPTION_KEYS"] = before


def test_new_key_prints_32_random_bytes():
    first, second = (run_deferq("encryption", "new-key").stdout.strip() for _ in range(2))
    assert len(base64.urlsafe_b64decode(first)) == 32 and first != second


def test_a_worker_needs_the_key_and_rotate_moves_every_value_to_the_new_one(tmp_path, tasks):
    url = f"sqlite:///{tmp_path}/deferq.db"
    producer = deferq.App(url, encryption=deferq.Encryption(keys={"old": OLD}))
    job = producer.enqueue("remember", args=["123-45-6789"])
    app = f"{tasks}:app"

    refused = run_deferq("worker", "--app", app, "--url", url, "--burst", cwd=tmp_path)
    assert refused.returncode != 0 and "DEFERQ_ENCRYPTION_KEYS" in refused.stderr
    assert "Traceback" not in refused.stderr

    keys(("old", OLD))
    ran = run_deferq("worker", "--app", app, "--url", url, "--burst", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert producer.get(job.id).result == "seen 123-45-6789"

    keys()
    blind = run_deferq("job", job.id, "--url", url, cwd=tmp_path)
    assert "encrypted (" in blind.stdout and "123-45" not in blind.stdout

    keys(("new", NEW), ("old", OLD))
    rotated = run_deferq("encryption", "rotate", "--app", app, "--url", url, cwd=tmp_path)
    assert rotated.returncode == 0, rotated.stderr
    assert "re-encrypted 2 value(s) under key 'new'" in rotated.stdout
    stored = producer.backend.get(job.id)
    assert stored.kwargs[ARGS].startswith("$enc:new:") and stored.result[ARGS].startswith("$enc:new:")
    keys(("new", NEW))
    shown = run_deferq("job", job.id, "--url", url, cwd=tmp_path)
    assert "seen 123-45-6789" in shown.stdout
    producer.close()


def test_the_supervisors_children_take_the_keys_from_the_environment(tmp_path, monkeypatch):
    """`deferq run` with DEFERQ_ENCRYPTION_KEYS: its worker children open the encrypted jobs
    and keep their results encrypted (the App in its config declares no encryption)."""
    from deferq.encryption.jobs import sealed_args
    from tests.support.supervisor_harness import Master, wait_until

    url = f"sqlite:///{tmp_path}/deferq.db"
    keyed = deferq.App(url, encryption=deferq.Encryption(keys={"old": OLD}))
    jobs = keyed.enqueue_many([deferq.Call("nap", (0.01,), {}) for _ in range(4)])
    monkeypatch.setenv("DEFERQ_ENCRYPTION_KEYS", f"old:{OLD}")
    master = Master(tmp_path, url, '[pools.main]\nqueues = ["default"]\nprocesses = 1\nconcurrency = 2\n').start()
    try:
        wait_until(lambda: all(keyed.get(job.id).state == deferq.JobState.SUCCEEDED for job in jobs), 60,
                   "the children ran the encrypted jobs")
    finally:
        master.kill()
    for job in jobs:
        stored = keyed.backend.get(job.id)
        assert sealed_args(stored) is not None and ARGS in stored.result  # kept encrypted
        assert keyed.get(job.id).result == 0.01
    keyed.close()
