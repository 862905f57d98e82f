"""`deferq steps check` and `deferq steps retry-from` as a person runs them before and
after a deploy: exit 0 when the code fits every stored durable job, 1 naming each job a
rename breaks (no step's function run), and a dead job run again from a step."""

from __future__ import annotations

import sys

import orjson
import pytest
from click.testing import CliRunner

from deferq import testing
from deferq.cli.main import main

TASKS = '''
import deferq

app = deferq.App()
ran: list[str] = []
names = {"charge": "charge"}


def act(what: str) -> str:
    ran.append(what)
    return what


@app.task(max_attempts=1)
def order(n: int) -> str:
    job = deferq.current_job()
    assert job is not None
    job.step(names["charge"], act, "charge")
    job.sleep("cool-off", 3600)
    return job.step("ship", act, "ship")


@app.task(max_attempts=1)
def broken() -> None:
    job = deferq.current_job()
    assert job is not None
    job.step("fetch", act, "fetch")
    raise RuntimeError("a bug after fetch")
'''


@pytest.fixture
def tasks(tmp_path, monkeypatch):
    name = f"steptasks_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(TASKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    module.app.use_url(f"sqlite:///{tmp_path}/deferq.db")
    yield name, module
    sys.modules.pop(name, None)
    module.app.close()


def cli(*args: str) -> object:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)


def test_steps_check_exits_1_naming_each_job_a_rename_breaks(tasks, tmp_path):
    name, module = tasks
    url = f"sqlite:///{tmp_path}/deferq.db"
    jobs = [module.order.enqueue(n) for n in range(3)]
    testing.drain(module.app)
    module.ran.clear()
    fits = cli("steps", "check", "--app", f"{name}:app", "--url", url)
    assert fits.exit_code == 0, fits.output
    assert "3 durable job(s) replayed" in fits.output and "fits every one" in fits.output
    module.names["charge"] = "take payment"
    broken = cli("steps", "check", "--app", f"{name}:app", "--url", url)
    assert broken.exit_code == 1, broken.output
    assert all(f"{job.id}  order  (scheduled)  renamed at 'charge'" in broken.output for job in jobs)
    report = orjson.loads(cli("steps", "check", "--app", f"{name}:app", "--url", url, "--json").stdout)
    assert sorted(f["job_id"] for f in report["findings"]) == sorted(job.id for job in jobs)
    assert module.ran == []  # no check ran a step's function


def test_steps_check_needs_the_code(tmp_path, tasks):
    url = f"sqlite:///{tmp_path}/deferq.db"
    tasks[1].order.enqueue(1)
    refused = CliRunner().invoke(main, ["steps", "check", "--url", url])
    assert refused.exit_code == 2 and "needs --app" in refused.output


def test_retry_from_runs_a_dead_job_again_from_a_step(tasks, tmp_path):
    name, module = tasks
    url = f"sqlite:///{tmp_path}/deferq.db"
    job = module.broken.enqueue()
    testing.drain(module.app)
    done = cli("steps", "retry-from", job.id, "fetch", "--url", url)
    assert done.exit_code == 0 and done.output == f"job {job.id} queued again from step 'fetch'\n"
    again = CliRunner().invoke(main, ["steps", "retry-from", job.id, "fetch", "--url", url])
    assert again.exit_code == 1 and "only a dead, cancelled or succeeded job" in again.output
    testing.drain(module.app)
    unknown = CliRunner().invoke(main, ["steps", "retry-from", job.id, "fetsh", "--url", url])
    assert unknown.exit_code == 1
    assert "no step named 'fetsh'; its steps, sleeps and waits: 'fetch'" in unknown.output
    assert module.ran == ["fetch", "fetch"]
