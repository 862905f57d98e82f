"""The command line as a person meets it: times, widths, help, install hints, refusals,
a new store, and the worker's Laravel-style options. Real stores and real processes."""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner

import deferq
from deferq import testing
from deferq.backends.base import Outcome
from deferq.cli.main import main
from deferq.observe.output import iso, relative, span, when
from deferq.options import JobOptions
from deferq.supervisor.status import render_status
from deferq.worker import Worker, WorkerConfig
from tests.support.supervisor_harness import ROOT, wait_until

TASKS = '''
import deferq
from deferq.backends.base import Outcome

app = deferq.App("memory://")


@app.task()
def fails() -> None:
    raise RuntimeError("always")


@app.task(max_attempts=2)
def fails_twice_at_most() -> None:
    raise RuntimeError("always")


@app.task(queue="mail")
def ok(n: int = 0) -> int:
    return n
'''


def tasks_module(tmp_path, monkeypatch, source: str = TASKS, prefix: str = "clitasks"):
    """A module of its own per test (a fresh App) written from `source`, importable from
    tmp_path: yields its name, and closes its App after."""
    name = f"{prefix}_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    module = sys.modules.pop(name, None)
    if module is not None:
        module.app.close()


@pytest.fixture
def tasks(tmp_path, monkeypatch):
    yield from tasks_module(tmp_path, monkeypatch)


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path}/deferq.db"


def cli(*args: str, columns: int = 80) -> click.testing.Result:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": str(columns)}, catch_exceptions=False)


def deferq_process(*args: str, cwd: Path = ROOT, hide: tuple[str, ...] = (), **kw) -> subprocess.Popen:
    """`deferq ARGS` in a fresh interpreter; `hide` makes those packages fail to import, as
    when an extra is not installed."""
    code = (f"import sys\nfor m in {list(hide)!r}: sys.modules[m] = None\n"
            "sys.argv[0] = 'deferq'\nfrom deferq.cli import main\nmain()")
    # this tree's src first: an installed deferq (an editable install of another
    # checkout) must not be the one tested
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), str(cwd)]), "COLUMNS": "80"}
    env.pop("DEFERQ_URL", None)
    env.pop("DEFERQ_APP", None)
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def run_deferq(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess[str]:
    process = deferq_process(*args, **kw)
    out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_fits(text: str, columns: int = 80) -> None:
    wide = [line for line in text.splitlines() if len(line.rstrip()) > columns]
    assert not wide, f"wider than {columns} columns:\n" + "\n".join(wide)


# -- 1. times: ISO 8601 with a relative form; epoch seconds stay in --json


def test_one_form_for_every_time():
    now = 1795430608.0  # 2026-11-23T10:43:28Z
    assert iso(now) == "2026-11-23T10:43:28Z"
    assert when(now + 250, now) == "2026-11-23T10:47:38Z (in 4 min)"
    assert when(now - 2 * 3600 - 5, now) == "2026-11-23T08:43:23Z (2 h ago)"
    assert [relative(now + d, now) for d in (0.4, -12, 90000)] == ["now", "12 s ago", "in 1 d"]
    assert span(59.9) == "59 s" and when(None) == when(0.0) == "-"


def test_a_job_shows_its_times_for_people_and_epochs_in_json(url):
    app = deferq.App(url)
    job = app.enqueue("later", [1], {"to": "a@example.com"}, delay=300, key="k1")
    app.close()
    shown = cli("job", job.id, "--url", url)
    assert shown.exit_code == 0, shown.output
    assert f"job {job.id}: later, scheduled" in shown.output
    assert f"due       {iso(job.run_at)} (in 4 min)" in shown.output
    assert "(now)" in shown.output  # created just now
    assert '{"to":"a@example.com"}' in shown.output and "key       k1" in shown.output
    as_json = orjson.loads(cli("job", "key:k1", "--url", url, "--json").stdout)
    assert as_json["run_at"] == pytest.approx(job.run_at) and isinstance(as_json["created_at"], float)
    assert_fits(shown.output)


def test_queues_are_listed_paused_and_resumed_and_a_job_keeps_its_remark(url):
    app = deferq.App(url)
    job = app.enqueue("later", [1], queue="email")
    assert cli("queue", "pause", "email", "--url", url).output == "paused queue email\n"
    assert cli("queue", "pause", "email", "--url", url).output == "queue email was already paused\n"
    assert app.paused().keys() == {"email"}
    listed = cli("queue", "list", "--url", url)
    assert "email (paused)" in listed.output
    assert_fits(listed.output)
    assert orjson.loads(cli("queue", "list", "--url", url, "--json").stdout)["email"]["paused"] is True
    assert cli("queue", "resume", "email", "--url", url).output == "resumed queue email\n"
    assert app.paused() == {}
    bad = cli("queue", "pause", "two words", "--url", url)
    assert bad.exit_code == 2 and "queue name" in bad.output
    assert cli("remark", job.id, "refunded, ticket 4711", "--url", url).exit_code == 0
    shown = cli("job", job.id, "--url", url).output
    assert "remark    refunded, ticket 4711" in shown and "updated" in shown
    assert cli("remark", "NOPE", "x", "--url", url).exit_code == 1
    made = orjson.loads(cli("enqueue", "later", "--remark", "from the CLI", "--url", url, "--json").stdout)
    assert made["remark"] == "from the CLI"
    app.close()


def test_jobs_are_found_by_tag_from_the_command_line(url):
    app = deferq.App(url)
    tagged = app.enqueue("sync", [7], tags=["tenant:7", "import"])
    app.enqueue("sync", [8], tags=["tenant:8"])
    app.close()
    shown = cli("jobs", "--tag", "tenant:7", "--url", url).stdout
    assert shown.startswith(f"{tagged.id}  queued") and "[tenant:7, import]" in shown
    assert len(shown.splitlines()) == 1
    found = orjson.loads(cli("jobs", "--tag", "import", "--state", "queued", "--url", url, "--json").stdout)
    assert [job["id"] for job in found] == [tagged.id]
    assert cli("jobs", "--tag", "nobody", "--url", url).stdout == "no jobs match\n"


def test_a_chunk_calls_jobs_are_found_from_the_command_line(url):
    app = deferq.App(url)
    index = app.task(name="index", chunk=deferq.Chunk(size=10, wait=0))(lambda items: None)
    made = app.enqueue_many([index.call(i) for i in range(3)])
    other = app.enqueue("sync", [9])
    testing.drain(app, ["default"])
    call = app.get(made[0].id).chunk_call
    app.close()
    assert f"  call      {call}" in cli("job", made[0].id, "--url", url).stdout
    assert "call " not in cli("job", other.id, "--url", url).stdout
    found = orjson.loads(cli("jobs", "--chunk", call, "--url", url, "--json").stdout)
    assert [job["id"] for job in found] == [job.id for job in reversed(made)]
    assert cli("jobs", "--chunk", "no-call", "--url", url).stdout == "no jobs match\n"


def test_limits_are_set_paused_listed_and_cleared_from_the_command_line(url):
    deferq.App(url).close()  # the store exists
    assert cli("limits", "set", "send_sms", "--rate", "50/s", "--url", url).stdout == (
        "send_sms: rate 50/s (every worker within a second)\n")
    assert cli("limits", "pause", "customer:7", "30", "--url", url).output == "customer:7: paused for 30s\n"
    listed = cli("limits", "list", "--url", url).output
    assert "send_sms: rate 50/s\n" in listed and "customer:7: paused for" in listed
    assert orjson.loads(cli("limits", "list", "--url", url, "--json").stdout)["send_sms"]["rate"] == "50/s"
    bad = cli("limits", "set", "send_sms", "--url", url)
    assert bad.exit_code == 2 and "needs a rate" in bad.output
    assert cli("limits", "resume", "customer:7", "--url", url).output == (
        "customer:7: resumed, the jobs it held due now (every worker within a second)\n")
    assert "customer:7" not in cli("limits", "list", "--url", url).output  # nothing set on it: gone
    resumed_again = cli("limits", "resume", "customer:7", "--url", url)
    assert resumed_again.exit_code == 1 and "customer:7 is not paused" in resumed_again.output
    cleared = cli("limits", "clear", "send_sms", "--url", url)
    assert cleared.output == "send_sms: cleared, the jobs it held due now\n"
    assert cli("limits", "clear", "send_sms", "--url", url).exit_code == 1


def test_a_running_job_shows_its_progress(url):
    app = deferq.App(url)
    job = app.enqueue("convert", ["a.mov"])
    leased = app.backend.reserve(["default"], 1, "w1", 60, (0, 1, 2))[0]
    app.backend.record_progress([leased.evolve(progress=0.375, progress_message="3 of 8 files")])
    app.close()
    shown = cli("job", job.id, "--url", url)
    assert "progress  38%: 3 of 8 files" in shown.output, shown.output
    as_json = orjson.loads(cli("job", job.id, "--url", url, "--json").stdout)
    assert (as_json["progress"], as_json["progress_message"]) == (0.375, "3 of 8 files")
    asked = cli("cancel", job.id, "--url", url)
    assert asked.exit_code == 0 and f"asked running job {job.id} to stop" in asked.output
    assert orjson.loads(cli("job", job.id, "--url", url, "--json").stdout)["cancel_requested"] is True


def make_dead(url: str, tasks: str, count: int = 1) -> None:
    app = importlib.import_module(tasks).app
    app.use_url(url)
    for _ in range(count):
        app.tasks["fails_twice_at_most"].options(max_attempts=1).enqueue()
    assert Worker(app, WorkerConfig(burst=True, concurrency=1)).run() == 0
    app.close()


def test_dead_list_says_when_each_job_died_and_why_in_80_columns(url, tasks):
    make_dead(url, tasks, count=2)
    listed = cli("dead", "list", "--url", url)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert len(lines) == 6 and "fails_twice_at_most  (queue default, 1 attempt(s))" in lines[0]
    assert lines[1].startswith("  died 20") and lines[1].endswith(("(now)", "s ago)"))
    assert lines[2] == "  RuntimeError: always"
    assert_fits(listed.output)
    narrow = cli("dead", "list", "--url", url, columns=40)
    assert_fits(narrow.stdout, 40)
    dead = orjson.loads(cli("dead", "list", "--url", url, "--json").stdout)
    assert len(dead) == 2 and all(isinstance(job["finished_at"], float) for job in dead)


def test_retrying_lists_the_jobs_waiting_for_their_next_attempt_and_run_now_runs_one(url):
    app = deferq.App(url)
    later = app.enqueue("shop.remind", [7], delay=3600)
    failed = app.enqueue("shop.charge", [350], max_attempts=5)
    (leased,) = app.backend.reserve(["default"], 1, "cli-test", 60.0, (0, 1, 2))
    assert app.backend.settle([Outcome(leased, "retry", delay=3600, error="GatewayError: timed out")]) == [True]
    listed = cli("retrying", "--url", url)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith(f"{failed.id}  shop.charge  (queue default, 1 of 5 attempts)")
    assert lines[1].startswith("  runs again 20") and lines[2] == "  GatewayError: timed out"
    assert later.id not in listed.stdout  # delayed, never failed
    assert cli("retrying", "--url", url, "--queue", "other").stdout == "no job is waiting to be retried\n"
    assert cli("run-now", failed.id, "--url", url).stdout == f"{failed.id} is due now\n"
    assert app.get(failed.id).state == "queued" and app.get(failed.id).attempts == 1
    refused = CliRunner().invoke(main, ["run-now", failed.id, "--url", url])
    assert refused.exit_code == 1 and "it is queued (only scheduled jobs can run now)" in refused.output
    app.close()


def test_dead_list_says_how_many_it_left_out_and_shows_all_with_all(url, tasks):
    make_dead(url, tasks, count=3)
    some = cli("dead", "list", "--url", url, "--limit", "2")
    assert some.exit_code == 0 and len(some.stdout.splitlines()) == 2 * 3 + 1
    assert some.stdout.splitlines()[-1] == "2 of 3 shown: --limit N or --all"
    every = cli("dead", "list", "--url", url, "--limit", "2", "--all")
    assert len(every.stdout.splitlines()) == 3 * 3 and "shown" not in every.output
    as_json = cli("dead", "list", "--url", url, "--limit", "1", "--json")
    assert len(orjson.loads(as_json.stdout)) == 1 and as_json.stderr == "1 of 3 shown: --limit N or --all\n"
    assert cli("dead", "list", "--url", url, "--queue", "default", "--all", "--json").stdout.count('"id"') == 3
    assert cli("dead", "list", "--url", url, "--queue", "mail").stdout == "no dead jobs\n"


def test_status_shows_times_and_fits_80_columns():
    now = 1795430608.0
    child = {"index": 1, "pid": 4242, "worker": "w1", "generation": 0, "started": now - 200,
             "state": "running", "uptime": 200, "processed": 12,
             "jobs": [{"id": "06H03YF9DC6FKSQWZ4CWQYAW9G", "task": "send_a_rather_long_task_name",
                       "running_for": 3.5}]}
    report = {
        "time": now,
        "masters": [{"id": "a-rather-long-host-name.example.internal:4242", "pid": 4242, "started": now - 7300,
                     "store_up": True, "config": "/srv/a/quite/deep/path/to/the/project/config/deferq.toml",
                     "pools": {"email": {"queues": ["email", "sms", "push"], "target": 2, "min": 1, "max": 8,
                                         "concurrency": 4, "children": [child]}}}],
        "workers": [{"worker": "host:99:abc", "pid": 99, "queues": ["default"], "processed": 3,
                     "heartbeat_age": 2.0, "jobs": []}],
    }
    text = "\n".join(render_status(report, 80))
    assert "started 2026-11-23T08:41:48Z (2 h ago), store up" in text
    assert "#1 pid 4242 running since 2026-11-23T10:40:08Z (3 min ago), 12 done" in text
    assert "running send_a_rather_long_task_name 06H03YF9DC6FKSQWZ4CWQYAW9G for 3s" in text
    assert "heartbeat 2 s ago, idle" in text
    assert_fits(text)


def test_deferq_status_reads_a_real_store(url):
    assert cli("migrate", "--url", url).exit_code == 0  # status makes no store (READ_ONLY below)
    result = cli("status", "--url", url)
    assert result.exit_code == 0 and "no master is running" in result.stdout


# -- 2. tables fit 80 columns


def test_stats_fit_80_columns_with_big_numbers_and_long_names(url):
    app = deferq.App(url)
    app.enqueue_many([deferq.Call("t", (), {}, JobOptions(queue="q" * 45)) for _ in range(3)])
    app.enqueue_many([deferq.Call("t", (), {}) for _ in range(12345)])
    app.close()
    shown = cli("stats", "--url", url)
    assert shown.exit_code == 0, shown.output
    assert_fits(shown.stdout)
    assert "…" not in shown.stdout  # nothing cut: headers are short, long names wrap
    header = next(line for line in shown.stdout.splitlines() if line.split()[:1] == ["queue"])
    assert header.split() == ["queue", "sched", "queued", "active", "done", "dead", "cancel", "wait"]
    assert "12345" in shown.stdout and "q" * 10 in shown.stdout


# -- 3. every --help lists its environment variables and an example


def commands(group: click.Group, path: tuple[str, ...] = ()):
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


@pytest.mark.parametrize("path", [" ".join(p) for p, _ in commands(main)])
def test_every_help_lists_its_environment_and_an_example(path):
    shown = cli(*path.split(), "--help")
    assert shown.exit_code == 0
    assert "Environment" in shown.stdout and "\n  Example:\n    deferq " in shown.stdout
    assert_fits(shown.stdout)
    if path in ("worker", "enqueue", "job", "stats", "dead list", "token create", "serve"):
        assert "DEFERQ_URL" in shown.stdout and "DEFERQ_APP" in shown.stdout
    if path in ("run", "status"):
        assert "DEFERQ_URL" in shown.stdout


# -- 4. deferq serve says where it listens; a missing extra is one install hint everywhere


def test_serve_says_where_it_listens_the_dashboard_and_auth(url, tmp_path):
    port = free_port()
    server = deferq_process("serve", "--url", url, "--port", str(port), cwd=tmp_path)
    try:
        said = []
        deadline = time.monotonic() + 30
        while not any("auth" in line for line in said) and time.monotonic() < deadline:
            said.append(server.stderr.readline())
        text = "".join(said)
        assert f"deferq: serving on http://127.0.0.1:{port}, 1 process\ndeferq: store {url}\n" in text
        assert f"console http://127.0.0.1:{port}/dashboard/, metrics http://127.0.0.1:{port}/metrics" in text
        assert "the API and the console need a token" in text and "deferq token create --scope reader" in text
        assert "created a new store" in text
        answer = wait_until(lambda: _get(f"http://127.0.0.1:{port}/healthz"), 20, "the server answering")
        assert answer == 200
        busy = run_deferq("serve", "--url", url, "--port", str(port), cwd=tmp_path)
        assert busy.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr
        assert "Traceback" not in busy.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=20)
    opened = run_deferq("serve", "--url", url, "--port", str(port), "--no-auth", "--host", "127.0.0.1",
                        "--workers", "0")
    assert opened.returncode == 2 and "must be at least 1" in opened.stderr


def test_serve_without_auth_listens_on_loopback_only_unless_told(tmp_path):
    url = f"sqlite:///{tmp_path}/deferq.db"
    refused = run_deferq("serve", "--url", url, "--no-auth", "--host", "0.0.0.0", "--port", str(free_port()))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert ("--no-auth opens every route to anyone who can connect, so it listens on loopback only "
            "(--host 127.0.0.1, ::1 or localhost), not on 0.0.0.0: to serve without auth there anyway, "
            "add --no-auth-beyond-loopback") in " ".join(refused.stderr.split())
    alone = run_deferq("serve", "--url", url, "--allowed-host", "deferq.lan", "--port", str(free_port()))
    assert alone.returncode == 2 and "only means something with --no-auth" in alone.stderr


def test_no_auth_beyond_loopback_serves_the_address_listened_on():
    from deferq.cli.serve import check_no_auth

    assert check_no_auth(True, "127.0.0.1", False, ("deferq.lan",)) == ["deferq.lan"]
    assert check_no_auth(True, "::1", False, ()) == [] and check_no_auth(True, "localhost", False, ()) == []
    assert check_no_auth(True, "10.0.0.5", True, ()) == ["10.0.0.5"]
    assert check_no_auth(True, "0.0.0.0", True, ("box.lan",)) == ["box.lan"]
    assert check_no_auth(False, "0.0.0.0", False, ()) == []


def test_serve_names_every_interface_open_auth_and_hides_passwords():
    from deferq.cli.serve import ServerConfig, announce

    lines = announce(ServerConfig(auth=False), "0.0.0.0", 8088, (2, 2), "redis://:s3cret@cache:6379/0")
    assert lines[:2] == ["serving on http://0.0.0.0:8088 (every interface), 2 processes",
                         "store redis://:***@cache:6379/0"]
    assert lines[2] == "console http://127.0.0.1:8088/dashboard/, metrics http://127.0.0.1:8088/metrics"
    assert lines[3].startswith("auth OFF (--no-auth): every route is open")
    assert "s3cret" not in "".join(lines)


def test_serve_help_describes_the_console_and_the_token_to_open_it_with():
    shown = " ".join(cli("serve", "--help").stdout.split())
    assert "the operator console at http://HOST:PORT/dashboard/" in shown
    assert "`deferq token create --scope reader` makes one that looks only" in shown
    assert "[reader|producer|admin]" in cli("token", "create", "--help").stdout


def _get(address: str) -> int | None:
    try:
        with urllib.request.urlopen(address, timeout=2) as answer:
            return answer.status
    except OSError:
        return None


@pytest.mark.parametrize(
    ("hide", "args", "says"),
    [
        (("starlette",), ["serve"], "deferq serve needs the 'starlette' package: install deferq's server extra "
         "from your copy of deferq (pip install '/path/to/deferq[server]')"),
        (("uvicorn",), ["serve"], "deferq serve needs the 'uvicorn' package: install deferq's server extra "
         "from your copy of deferq (pip install '/path/to/deferq[server]')"),
        (("prometheus_client",), ["worker", "--app", "{tasks}:app", "--metrics-port", "1"],
         "--metrics-port needs the 'prometheus_client' package: install deferq's server extra from your "
         "copy of deferq (pip install '/path/to/deferq[server]')"),
        (("httpx",), ["worker", "--app", "deferq.server.tasks:app"],
         "the app 'deferq.server.tasks:app' needs the 'httpx' package: install deferq's server extra from your "
         "copy of deferq (pip install '/path/to/deferq[server]')"),
        (("redis",), ["stats", "--url", "redis://127.0.0.1:6379/0"],
         "this backend needs the 'redis' package: install deferq's redis extra from your "
         "copy of deferq (pip install '/path/to/deferq[redis]')"),
        (("prometheus_client",), ["run", "--config", "metrics.toml"],
         "metrics_port needs the 'prometheus_client' package: install deferq's server extra from your "
         "copy of deferq (pip install '/path/to/deferq[server]')"),
    ],
)
def test_a_missing_extra_is_one_install_hint(tmp_path, tasks, url, hide, args, says):
    (tmp_path / "metrics.toml").write_text(f'url = "{url}"\napp = "{tasks}:app"\nmetrics_port = 9\n[pools.a]\n')
    result = run_deferq(*[a.format(tasks=tasks) for a in args], cwd=tmp_path, hide=hide)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"deferq: {says}"
    assert "Traceback" not in result.stderr


# -- 5. every mistake of a config file in one run


def test_deferq_run_reports_every_config_mistake_at_once(tmp_path):
    path = tmp_path / "deferq.toml"
    path.write_text('colour = 1\ngrace = "soon"\n[pools.a]\nconcurrency = 0\nqueues = []\n'
                    '[periodic.p]\ncron = "every day"\ntask = "t"\n')
    result = run_deferq("run", "--config", str(path), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"deferq: {path} has 5 problems:"
    assert [line.split()[0] for line in lines[1:]] == ["unknown", "grace", "pools.a.queues",
                                                       "pools.a.concurrency", "schedule"]
    assert "Traceback" not in result.stderr


# -- 6. enqueue --app knows the app's tasks


def test_enqueue_with_an_app_refuses_a_task_it_does_not_know(url, tasks):
    refused = cli("enqueue", "nope", "--app", f"{tasks}:app", "--url", url)
    assert refused.exit_code == 2
    listed = "its tasks are fails, fails_twice_at_most, ok"
    assert f"the app {tasks}:app has no task 'nope': {listed}" in refused.output
    known = cli("enqueue", "ok", "--app", f"{tasks}:app", "--url", url, "--json")
    assert known.exit_code == 0 and orjson.loads(known.stdout)["queue"] == "mail"  # the task's defaults
    by_name = cli("enqueue", "nope", "--url", url, "--json")  # no app: any name, as before
    assert by_name.exit_code == 0 and orjson.loads(by_name.stdout)["task"] == "nope"


# -- 7. a sqlite:/// file that does not exist: said, or refused with --no-create


def test_a_new_sqlite_store_is_announced_or_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "sub" / "jobs.db"
    url = f"sqlite:///{path}"
    refused = cli("migrate", "--url", url, "--no-create")
    assert refused.exit_code == 2 and f"deferq: no store at {path}" in refused.stderr
    assert not path.exists()
    made = cli("migrate", "--url", url)
    assert made.exit_code == 0 and made.stderr == f"deferq: created a new store at {path}\n"
    assert path.exists() and "created" not in cli("stats", "--url", url).stderr
    assert cli("status", "--url", f"sqlite:///{tmp_path}/other.db", "--no-create").exit_code == 2
    for command in (["job", "x"], ["enqueue", "t"], ["dead", "list"]):
        result = cli(*command, "--url", f"sqlite:///{tmp_path}/typo.db", "--no-create")
        assert result.exit_code == 2 and "no store at" in result.stderr
    assert not (tmp_path / "typo.db").exists()


READ_ONLY = {"stats": [], "job": ["x"], "dead list": [], "queue list": [], "token list": [], "status": [],
             "cancel": ["x"], "dead retry": ["--all"], "token revoke": ["x"]}


@pytest.mark.parametrize("command", READ_ONLY)
def test_commands_on_an_existing_store_refuse_a_missing_one_and_name_those_nearby(command, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deferq-demo.db").touch()  # what `make demo` leaves: the store meant
    result = cli(*command.split(), *READ_ONLY[command], "--url", "sqlite:///nope.db")
    assert result.exit_code == 2
    assert result.stderr == (f"deferq: no store at {tmp_path / 'nope.db'}: deferq {command} works on an "
                             f"existing store and makes none (check --url or DEFERQ_URL); "
                             f"did you mean sqlite:///deferq-demo.db?\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deferq-demo.db"], "created nothing"


def test_the_default_store_missing_is_refused_by_stats_and_by_the_delivery_worker(tmp_path):
    """No --url, no DEFERQ_URL: `deferq stats` and the callback delivery worker say the
    default store is missing instead of making an empty one (a worker of your own tasks
    makes it: jobs may come later)."""
    (tmp_path / "deferq-demo.db").touch()
    for args in (["stats"], ["worker", "--app", "deferq.server.tasks:app", "--burst"]):
        done = subprocess.run([sys.executable, "-m", "deferq", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env=cli_env())
        assert done.returncode == 2, done.stderr
        assert f"no store at {tmp_path / 'deferq.db'}" in done.stderr
        assert "did you mean sqlite:///deferq-demo.db?" in done.stderr
        assert not (tmp_path / "deferq.db").exists()


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DEFERQ_URL", "DEFERQ_APP")}
    return {**env, "PYTHONPATH": str(ROOT / "src")}


SCHEDULED = """
import deferq
from deferq.backends.base import Outcome

app = deferq.App()


@app.periodic("*/5 * * * *", name="tidy")
def tidy() -> None:
    pass
"""


def test_a_worker_that_fires_no_schedules_warns_when_no_process_does(url, tmp_path):
    (tmp_path / "scheduled.py").write_text(SCHEDULED)
    (tmp_path / "plain.py").write_text(TASKS)
    warning = ("your app has 1 periodic schedule(s) (tidy) and no process is firing them: this worker does "
               "not (--burst, --once or --no-upkeep)")

    def worker_says(module: str) -> str:
        done = run_deferq("worker", "--app", f"{module}:app", "--url", url, "--burst", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert warning in worker_says("scheduled")
    assert "periodic" not in worker_says("plain")
    store = deferq.App(url)
    store.backend.kv_put("leases", "upkeep", orjson.dumps({"holder": "box:1"}), 60)  # as a leader does
    store.close()
    assert "periodic" not in worker_says("scheduled")


# -- 8. deferq worker --tries N --delay S --poll-interval S


def test_worker_defaults_apply_only_where_the_task_and_the_job_chose_nothing():
    app = deferq.App("memory://")
    runs: dict[str, int] = {}

    def failing(name: str, **options):
        def fn() -> None:
            runs[name] = runs.get(name, 0) + 1
            raise RuntimeError(name)

        return app.task(fn, name=name, **options)

    plain, limited = failing("plain"), failing("limited", max_attempts=2)
    paced = failing("paced", backoff=deferq.backoff.fixed(0))
    app.registry.use_worker_defaults(max_attempts=4, backoff=deferq.backoff.fixed(0))
    plain.enqueue(), limited.enqueue(), paced.enqueue()
    own = plain.options(max_attempts=5).enqueue()
    assert plain.explicit == frozenset() and limited.explicit == {"max_attempts"}
    assert Worker(app, WorkerConfig(burst=True, concurrency=1)).run() == 0
    assert runs == {"plain": 4 + 5, "limited": 2, "paced": 4}
    assert app.get(own.id).attempts == 5


def failing_job_after_a_worker(url: str, tasks: str, cwd: Path, *options: str) -> deferq.Job:
    """Enqueue one job of the always-failing task, run `deferq worker --burst OPTIONS`, and
    return the job as the store has it then."""
    app = importlib.import_module(tasks).app
    app.use_url(url)
    job = app.tasks["fails"].enqueue()
    app.close()
    result = run_deferq("worker", "--app", f"{tasks}:app", "--url", url, "--burst", *options, cwd=cwd)
    assert result.returncode == 0, result.stderr
    again = deferq.App(url)
    try:
        return again.get(job.id)
    finally:
        again.close()


def test_worker_delay_sets_the_wait_between_tries_of_tasks_without_a_backoff(url, tasks, tmp_path):
    stored = failing_job_after_a_worker(url, tasks, tmp_path, "--tries", "2", "--delay", "30",
                                        "--poll-interval", "0.05")
    assert (stored.state, stored.attempts) == ("scheduled", 1)
    assert stored.run_at - time.time() == pytest.approx(30, abs=5)
    refused = run_deferq("worker", "--app", f"{tasks}:app", "--poll-interval", "0", cwd=tmp_path)
    assert refused.returncode == 2 and "--poll-interval" in refused.stderr


def test_worker_tries_decide_when_a_job_is_dead(url, tasks, tmp_path):
    stored = failing_job_after_a_worker(url, tasks, tmp_path, "--tries", "2", "--delay", "0")
    assert (stored.state, stored.attempts) == ("dead", 2)


# -- 9. deferq worker --metrics-port


def test_worker_serves_metrics_of_the_jobs_it_ran(url, tasks, tmp_path):
    app = importlib.import_module(tasks).app
    app.use_url(url)
    app.enqueue_many([app.tasks["ok"].call(i) for i in range(5)])
    app.close()
    port = free_port()
    worker = deferq_process("worker", "--app", f"{tasks}:app", "--url", url, "--metrics-port", str(port),
                            cwd=tmp_path)
    try:
        sample = 'deferq_task_runs_total{outcome="succeeded",queue="mail",task="ok"} 5.0'
        wait_until(lambda: sample in (_scrape(port) or ""), 30, "5 succeeded runs in the scrape")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert f"metrics of the jobs run here: http://127.0.0.1:{port}/metrics" in err
    busy_port = socket.socket()
    busy_port.bind(("127.0.0.1", 0))
    busy_port.listen()
    try:
        taken = busy_port.getsockname()[1]
        refused = run_deferq("worker", "--app", f"{tasks}:app", "--url", url, "--metrics-port", str(taken),
                             cwd=tmp_path)
    finally:
        busy_port.close()
    assert refused.returncode == 2 and f"cannot listen on 127.0.0.1:{taken}" in refused.stderr


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return answer.read().decode()
    except OSError:
        return None


def test_a_worker_without_queue_serves_the_queues_its_schedules_name(tmp_path):
    """`@app.periodic(..., queue="reports")` on a task of the default queue: a plain
    `deferq worker` runs its jobs (it listened to `default` only, and they waited for ever)."""
    (tmp_path / "sched_shop.py").write_text(
        "import deferq\n"
        "app = deferq.App('sqlite:///shop.db')\n"
        "@app.periodic(every=3600, queue='reports')\n"
        "def report() -> str:\n"
        "    return 'made'\n")
    import importlib
    import sys as _sys

    _sys.path.insert(0, str(tmp_path))
    try:
        shop = importlib.import_module("sched_shop")
    finally:
        _sys.path.remove(str(tmp_path))
    assert shop.app.queues_in_use() == ("default", "reports")
    url = f"sqlite:///{tmp_path}/shop.db"
    app = deferq.App(url)
    job = app.enqueue(shop.report.name, queue="reports")  # what the schedule's tick enqueues
    done = run_deferq("worker", "--app", "sched_shop:app", "--url", url, "--burst", "--no-upkeep", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "queues default,reports" in done.stderr.replace(", ", ",")
    assert app.get(job.id).state == deferq.JobState.SUCCEEDED
    app.close()
    shop.app.close()


# -- 10. a worker imports what it runs (docs/worker.md, "What a worker process loads")

LOADED = """
import sys
import deferq

app = deferq.App("memory://")


@app.task()
def loaded(prefixes: list[str]) -> list[str]:
    return sorted(name for name in sys.modules if name.startswith(tuple(prefixes)))
"""
#: no worker loads these: the other commands, the HTTP server and console, the supervisor
NO_WORKER_LOADS = ("deferq.cli.main", "deferq.cli.serve", "deferq.server", "deferq.supervisor", "deferq.contrib")
OTHER_STORES = {  # the client and backend modules of the stores a worker does not use
    "sqlite": ("redis", "deferq.backends.redis", "psycopg", "deferq.backends.sql.postgres", "pymysql"),
    "redis": ("deferq.backends.sql", "psycopg", "pymysql", "sqlite3"),
    "postgres": ("redis", "deferq.backends.redis", "deferq.backends.sql.sqlite", "pymysql"),
}


@pytest.mark.parametrize("store", sorted(OTHER_STORES))
def test_a_worker_loads_no_module_of_what_it_does_not_run(store, request, tmp_path):
    url = request.getfixturevalue(f"{store}_url")
    (tmp_path / "loaded_tasks.py").write_text(LOADED)
    app = deferq.App(url)
    job = app.enqueue("loaded", [[*NO_WORKER_LOADS, *OTHER_STORES[store]]])
    done = run_deferq("worker", "--app", "loaded_tasks:app", "--url", url, "--burst", "--no-upkeep",
                      "-q", job.queue, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert app.get(job.id).result == []
    app.close()


def test_a_limit_name_no_job_of_the_app_meets_gets_a_note(url):
    deferq.App(url).close()
    with_app = ("--url", url, "--app", "tests.support.fixtures_faults:app")
    misspelt = cli("limits", "set", "customr:7", "--rate", "5/s", *with_app)
    assert misspelt.exit_code == 0 and "note: 'customr:7' is no task, no queue:NAME" in misspelt.stderr
    for known in ("customer:7", "queue:default", "account:a b"):  # keys the tasks' templates make, a queue
        assert "note:" not in cli("limits", "set", known, "--rate", "5/s", *with_app).stderr, known
    # without --app deferq cannot tell
    assert "note:" not in cli("limits", "set", "customr:7", "--rate", "5/s", "--url", url).stderr
