"""The supervisor's config file: every mistake is one sentence (exit 2 from the CLI)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from deferq.errors import ConfigError
from deferq.supervisor.config import load_config, parse_config, parse_size
from deferq.values import format_duration, parse_duration
from tests.support.supervisor_harness import ROOT, TREE_PATH

GOOD = """
url = "sqlite:///x.db"
app = "tests.support.fixtures_supervisor:app"
grace = "30s"
[pools.email]
queues = ["email"]
processes = { min = 1, max = 8 }
concurrency = 4
max_jobs_per_child = 10000
max_child_lifetime = "1h"
max_child_memory = "512MB"
[alerts]
email = { smtp = "127.0.0.1:25", from = "deferq@localhost", to = ["ops@localhost"] }
webhook = "http://127.0.0.1:9000/alerts"
backlog = { email = 1000 }
oldest_waiting = "5m"
[periodic.cleanup]
cron = "*/5 * * * *"
task = "tick"
"""


def test_a_full_config_reads(tmp_path):
    path = tmp_path / "deferq.toml"
    path.write_text(GOOD)
    config = load_config(path)
    (pool,) = config.pools
    assert (pool.name, pool.queues, pool.concurrency) == ("email", ("email",), 4)
    assert (pool.scale.minimum, pool.scale.maximum) == (1, 8)
    assert (pool.max_child_lifetime, pool.max_child_memory) == (3600, 512 * 1024**2)
    assert config.grace == 30
    assert config.alerts.email.port == 25 and config.alerts.backlog == {"email": 1000}
    assert config.periodic[0].cron == "*/5 * * * *"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"pools": {"a": {}}, "colour": 1}, "unknown key 'colour' in the config file"),
        ({}, "needs at least one pool"),
        ({"pools": {"a": {"queue": ["x"]}}}, "unknown key 'queue' in pools.a"),
        ({"pools": {"a": {"processes": {"min": 4, "max": 2}}}}, "pools.a.processes.min (4) is larger"),
        ({"pools": {"a": {"processes": 0}}}, "pools.a.processes must be a whole number of at least 1"),
        ({"pools": {"a": {"concurrency": "8"}}}, "pools.a.concurrency must be a whole number"),
        ({"pools": {"a": {"queues": []}}}, "pools.a.queues must be a list"),
        ({"pools": {"a": {"queues": ["has space"]}}}, "pools.a.queues: queue name"),
        ({"pools": {"a": {"max_child_lifetime": "1 hour"}}}, "pools.a.max_child_lifetime must be a duration"),
        ({"pools": {"a": {"max_child_memory": "lots"}}}, "pools.a.max_child_memory must be a size"),
        ({"pools": {"a": {"hung_after": "0s"}}}, "pools.a.hung_after must be at least 1s"),
        ({"pools": {"a b": {}}}, "pool name 'a b'"),
        ({"pools": {"a": {}}, "grace": "soon"}, "grace must be a duration"),
        ({"pools": {"a": {}}, "app": "not a module"}, 'app must name your App as "module:attribute"'),
        ({"pools": {"a": {}}, "alerts": {"webhook": 5}}, "alerts.webhook must be an http(s):// URL"),
        ({"pools": {"a": {}}, "periodic": {"p": {"cron": "every day", "task": "t"}}},
         "schedule 'p': 'every day' has 2 fields: a cron expression has five"),
        ({"pools": {"a": {}}, "periodic": {"p": {"cron": "* * * * *"}}}, "periodic.p needs task"),
        ({"pools": {"a": {}}, "periodic": {"p": {"cron": "* * * * *", "task": "t", "delay": 1}}},
         "unknown key 'delay' in periodic.p"),
        ({"pools": {"a": {}}, "periodic": {"p": {"cron": "* * * * *", "task": "t", "priority": "top"}}},
         "schedule 'p': unknown priority 'top'"),
    ],
)
def test_mistakes_are_one_sentence(table, message):
    with pytest.raises(ConfigError) as caught:
        parse_config(table)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_fixed_count_is_min_and_max():
    (pool,) = parse_config({"pools": {"a": {"processes": 3}}}).pools
    assert (pool.scale.minimum, pool.scale.maximum, pool.queues) == (3, 3, ("default",))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("5m", 300), ("1h30m", 5400), ("1d", 86400), ("250ms", 0.25), (12, 12), ("1.5s", 1.5)],
)
def test_durations(text, seconds):
    assert parse_duration(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5 minutes", "", "m5", "1h-5m", "-5s", True, None, [1]])
def test_bad_durations(text):
    with pytest.raises(ConfigError, match="x must"):
        parse_duration(text, "x")


def test_sizes_and_formatting():
    assert parse_size("1.5G", "x") == int(1.5 * 1024**3)
    assert parse_size("800KiB", "x") == 800 * 1024
    assert parse_size(4096, "x") == 4096
    assert [format_duration(s) for s in (5, 185, 7800)] == ["5s", "3m05s", "2h10m"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[pools.a]\nconcurrency = 0\n", "deferq: pools.a.concurrency must be a whole number of at least 1"),
        ("[pools.a\n", "is not valid TOML"),
        ('app = "tests.nothing_here:app"\n[pools.a]\n', "cannot import 'tests.nothing_here'"),
        ('app = "tests.support.fixtures_supervisor:app"\n[pools.a]\n[periodic.p]\ncron = "* * * * *"\n'
         'task = "missing"\n', "periodic.p.task names 'missing', a task your app lacks"),
        ("[pools.a]\n", "the supervisor needs your tasks"),
    ],
)
def test_deferq_run_refuses_a_bad_config_with_exit_2(tmp_path, body, message):
    path = tmp_path / "deferq.toml"
    path.write_text(f'url = "sqlite:///{tmp_path}/x.db"\n{body}')
    assert_refused(["--config", str(path)], message)


def test_deferq_run_refuses_a_missing_file_and_a_memory_store(tmp_path):
    path = tmp_path / "deferq.toml"
    assert_refused(["--config", str(path)], "cannot read the config file")
    path.write_text(GOOD)
    assert_refused(["--config", str(path), "--url", "memory://"], "memory:// lives inside one process")


def assert_refused(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "deferq", "run", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": TREE_PATH},
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_file_is_one_sentence(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "nope.toml")


# -- the app named by `app = "module:attr"` (deferq.loading, shared with the CLI and the server)


@pytest.fixture
def tasks_module(tmp_path, monkeypatch):
    """A fresh module `name` holding `app = App("memory://")` and `answer = 42`."""
    name = f"tasks_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text('import deferq\napp = deferq.App("memory://")\nanswer = 42\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_an_app_is_loaded_by_name_and_the_url_given_wins(tasks_module, tmp_path):
    from deferq.loading import load_app

    app = load_app(f"{tasks_module}:app")
    assert app is sys.modules[tasks_module].app and app.url == "memory://"
    assert load_app(tasks_module) is app  # "module" alone means module:app
    url = f"sqlite:///{tmp_path}/given.db"
    assert load_app(f"{tasks_module}:app", url) is app and app.url == url
    assert load_app(None, url).url == url  # no name: an App without tasks on that store


def test_an_open_store_is_not_replaced(tasks_module):
    from deferq.loading import load_app

    app = load_app(f"{tasks_module}:app")
    app.backend  # noqa: B018 - opens the store
    assert load_app(f"{tasks_module}:app", "memory://") is app  # the same URL: nothing to change
    with pytest.raises(ConfigError, match="is already open"):
        load_app(f"{tasks_module}:app", "sqlite:///elsewhere.db")
    assert app.url == "memory://"
    app.close()


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("nothing_here_at_all:app", "cannot import 'nothing_here_at_all' for the app"),
        ("{module}:missing", "names nothing, not a deferq.App"),
        ("{module}:answer", "names an object of type int, not"),
        (":app", "names no module"),
    ],
)
def test_a_wrong_app_name_is_one_sentence(tasks_module, attr, message):
    from deferq.loading import load_app

    with pytest.raises(ConfigError) as caught:
        load_app(attr.format(module=tasks_module))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_command_line_reports_a_wrong_app_as_a_usage_error():
    from click.testing import CliRunner

    from deferq.cli.main import main

    result = CliRunner().invoke(main, ["stats", "--app", "nothing_here_at_all:app", "--url", "memory://"])
    assert result.exit_code == 2 and "cannot import 'nothing_here_at_all'" in result.output, result.output
    assert "Usage:" in result.output and "Traceback" not in result.output


def test_every_mistake_is_reported_at_once_one_per_line():
    table = {"colour": 1, "grace": "soon", "metrics_port": 70000,
             "pools": {"a": {"concurrency": 0, "max_child_memory": "lots"}, "b c": {}},
             "periodic": {"p": {"cron": "every day", "task": "t"}, "q": {"cron": "* * * * *"}}}
    with pytest.raises(ConfigError) as caught:
        parse_config(table, "deferq.toml")
    lines = str(caught.value).splitlines()
    assert lines[0] == "deferq.toml has 8 problems:"
    expected = ["unknown key 'colour' in the config file", "grace must be a duration",
                "metrics_port must be a port number", "pools.a.max_child_memory must be a size",
                "pools.a.concurrency must be a whole number", "pool name 'b c'",
                "schedule 'p': 'every day' has 2 fields: a cron expression has five", "periodic.q needs task"]
    assert len(lines) == 1 + len(expected)
    for line, start in zip(lines[1:], expected):
        assert line.startswith(f"  {start}"), (line, start)


def test_metrics_port_and_host():
    config = parse_config({"metrics_port": 9100, "pools": {"a": {}}})
    assert (config.metrics_port, config.metrics_host) == (9100, "127.0.0.1")
    config = parse_config({"metrics_port": 9100, "metrics_host": "0.0.0.0", "pools": {"a": {}}})
    assert config.metrics_host == "0.0.0.0" and parse_config({"pools": {"a": {}}}).metrics_port is None
    with pytest.raises(ConfigError, match="metrics_port must be a whole number of at least 1"):
        parse_config({"metrics_port": "9100", "pools": {"a": {}}})
