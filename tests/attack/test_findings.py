"""What the attack suite found on its first runs and was fixed at once, each shown on its
own (each failed before its fix): the fuzz finds them again only by chance."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import deferq
from deferq.cli.main import main
from deferq.errors import ConfigError
from deferq.server import ServerConfig, create_app
from tests.attack.hostile import store_snapshot
from tests.support.server_helpers import TestClient


@pytest.fixture(params=["sqlite", "postgres"])
def app(request: pytest.FixtureRequest):
    application = deferq.App(request.getfixturevalue(f"{request.param}_url"))
    application.enqueue("attack.plain", args=["abc"])
    yield application
    application.close()


@pytest.mark.parametrize("text", ["a\x00b", "\x00abc", "ab\ud800"])
def test_finding_jobs_by_a_text_with_nul_or_a_lone_surrogate_is_refused_with_a_sentence(app, text):
    """SQLite raised OperationalError('unterminated string') (`deferq jobs --text` printed
    its traceback), PostgreSQL its driver's error; a lone surrogate a UnicodeEncodeError."""
    with pytest.raises(ConfigError, match="holds NUL or a lone surrogate"):
        app.find_jobs(text=text)


def test_an_argument_the_locale_could_not_decode_is_refused_with_exit_2(sqlite_url):
    """`deferq cancel $'\\xff'`: Python hands the byte over as a lone surrogate, which every
    store's driver failed to encode, with a traceback (cancel, remark, queue pause, limits,
    dead retry, schedule pause ...)."""
    app = deferq.App(sqlite_url)
    job = app.enqueue("attack.plain")
    before = store_snapshot(app)
    for args in (["cancel", "\udcff"], ["remark", job.id, "\udcff"], ["queue", "pause", "q\udcff"],
                 ["limits", "set", "\udcff", "--concurrency", "2"]):
        result = CliRunner().invoke(main, [*args, "--url", sqlite_url])
        assert result.exit_code == 2, (args, result.output, result.exception)
        assert "is not valid UTF-8 text" in result.output
    assert store_snapshot(app) == before
    app.close()


@pytest.mark.parametrize("body", [{"event": "a\n", "key": "k"}, {"event": "a", "key": "k\n"}])
def test_an_event_name_or_key_ending_in_a_newline_is_a_422(sqlite_url, body):
    """The document's pattern ^[^\\x00-\\x1f]+$ lets one trailing newline through on the
    server ($ matches before it); the store call then refused it, answered as a 503 "the
    store cannot be reached"."""
    app = deferq.App(sqlite_url)
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app),
                    raise_server_exceptions=False) as client:
        answer = client.post("/v1/events", json=body)
        assert answer.status_code == 422, answer.text
        assert "without control characters" in answer.json()["error"]["message"]
        assert client.get("/v1/events").json()["events"] == []
    app.close()


def test_dead_list_with_a_limit_past_any_stores_integer_is_exit_2(sqlite_url):
    """`deferq dead list --limit 10**30` printed SQLite's OverflowError traceback."""
    deferq.App(sqlite_url).close()
    result = CliRunner().invoke(main, ["dead", "list", "--limit", "9" * 30, "--url", sqlite_url])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "--limit" in result.output and "Traceback" not in result.output
