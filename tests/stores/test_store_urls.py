"""A store URL's options are checked by deferq before a driver sees them: a misspelt one
is one sentence naming it and the closest option (ConfigError in Python, exit 2 on the
command line), on every store; docs/stores.md lists the one table they come from."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import deferq
from deferq.backends import SCHEMES, open_backend
from deferq.backends.urls import ALIASES, STORE_OPTIONS

ROOT = Path(__file__).resolve().parents[2]

# (url with a misspelt option, the option, the one it should suggest); no server is asked
MISSPELT = [
    ("redis://127.0.0.1:6379/1?prefx=shop", "prefx", "prefix"),
    ("rediss://127.0.0.1:6379/1?socket_timout=3", "socket_timout", "socket_timeout"),
    ("unix:///run/redis.sock?dbb=1", "dbb", "db"),
    ("redis+cluster://127.0.0.1:7000?prefx=shop", "prefx", "prefix"),
    ("redis+shards://127.0.0.1:6379/0,127.0.0.1:6380/0?prefx=shop", "prefx", "prefix"),
    ("postgresql://postgres@127.0.0.1/test?shema=jobs", "shema", "schema"),
    ("postgres://postgres@127.0.0.1/test?sslmod=require", "sslmod", "sslmode"),
    ("mysql://root@127.0.0.1/test?pool=4", "pool", "pool_size"),
    ("mariadb://root@127.0.0.1/test?clam=update", "clam", "claim"),
    ("sqlite:///deferq.db?synchronus=full", "synchronus", "synchronous"),
    ("memory://?eagre=1", "eagre", "eager"),
]


@pytest.mark.parametrize(("url", "bad", "closest"), MISSPELT, ids=[u.split(":")[0] for u, _, _ in MISSPELT])
def test_a_misspelt_url_option_is_one_sentence_naming_the_closest(url, bad, closest, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(deferq.ConfigError) as refused:
        deferq.App(url)  # refused where it is made, before any call
    message = str(refused.value)
    assert message.startswith(f"unknown option {bad!r} in the ")
    assert f"(did you mean {closest!r}?)" in message and "\n" not in message
    with pytest.raises(deferq.ConfigError, match=re.escape(f"unknown option {bad!r}")):
        open_backend(url)
    app = deferq.App("memory://")
    with pytest.raises(deferq.ConfigError, match=re.escape(f"unknown option {bad!r}")):
        app.use_url(url)  # a command's --url over the App's own
    assert app.url == "memory://"
    assert list(tmp_path.iterdir()) == []  # nothing made (no SQLite file)


def test_every_known_option_passes_the_check():
    from deferq.backends.urls import check_options

    for scheme in SCHEMES:
        for option in STORE_OPTIONS[ALIASES.get(scheme, scheme)]:
            check_options(f"{scheme}://host/0?{option.name}=1")


def deferq_command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "deferq"), *args]
    env = {k: v for k, v in os.environ.items() if k not in ("DEFERQ_URL", "DEFERQ_APP")}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [
    ("stats", "--url", "redis://127.0.0.1:6379/1?prefx=shop"),
    ("worker", "--burst", "--url", "redis://127.0.0.1:6379/1?prefx=shop"),
    ("stats", "--url", "postgresql://postgres@127.0.0.1/test?shema=jobs"),
    ("jobs", "--url", "mysql://root@127.0.0.1/test?pool=4"),
], ids=["redis-stats", "redis-worker", "postgresql-stats", "mysql-jobs"])
def test_the_command_line_exits_2_with_the_sentence(args, tmp_path):
    done = deferq_command(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "TypeError" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]  # after click's usage lines: the sentence
    assert "unknown option" in last and "did you mean" in last


def test_every_scheme_has_its_options_in_the_table():
    assert {ALIASES.get(scheme, scheme) for scheme in SCHEMES} == set(STORE_OPTIONS)


def test_the_driver_options_are_ones_the_driver_takes():
    """The table invents no driver option: redis-py takes each of its names (from a URL or
    as a connection's keyword), libpq knows each of its parameters."""
    import psycopg
    import redis.connection

    accepted = set(redis.connection.URL_QUERY_ARGUMENT_PARSERS) | {"max_connections"}
    for cls in (redis.connection.Connection, redis.connection.SSLConnection,
                redis.connection.UnixDomainSocketConnection, redis.connection.AbstractConnection):
        accepted |= set(inspect.signature(cls.__init__).parameters)
    libpq = {d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults()}
    for store, options in STORE_OPTIONS.items():
        known = libpq if store == "postgresql" else accepted
        unknown = [o.name for o in options if o.driver and o.name not in known]
        assert unknown == [], f"{store}: {unknown}"


def documented() -> dict[str, dict[str, str]]:
    """docs/stores.md's "URL options": store heading -> option -> what it says."""
    text = (ROOT / "docs" / "stores.md").read_text()
    section = text.split("## URL options\n", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, dict[str, str]] = {}
    for part in section.split("\n### ")[1:]:
        heading, _, body = part.partition("\n")
        store = re.match(r"`([^`]+)://`", heading)[1]
        rows = tables.setdefault(store, {})
        for line in body.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if line.startswith("| `"):
                for name in re.findall(r"`([^`]+)`", cells[0]):
                    rows[name] = cells[1]
    return tables


def test_the_docs_list_every_option_of_every_store_from_the_table():
    tables = documented()
    assert set(tables) == set(STORE_OPTIONS)
    for store, options in STORE_OPTIONS.items():
        assert list(tables[store]) == [o.name for o in options if not o.driver] + [
            o.name for o in options if o.driver], store
        for option in options:
            said = tables[store][option.name]
            assert said == option.what if not option.driver else said.startswith(option.what), (store, option)
