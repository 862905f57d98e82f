"""What the attack suite draws and how it judges an answer (docs/development.md, "The
attack suite"): hostile values for every input, the one oracle every entry point is held
to, and a snapshot of everything a call could store.

The oracle: a call either succeeds, or is refused with one of deferq's documented errors
(`ConfigError`, `PayloadError`) / a 4xx / exit 2, carrying one sentence; never a 5xx, a
traceback, another exception, and a refused call stores nothing."""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from deferq.errors import ConfigError, PayloadError
from deferq.job import JobState

# `make attack` (ATTACK_LONG=1) runs each fuzz and the store differential long; `make
# test` runs a short slice, derandomized: the same examples on every run and in CI.
LONG = os.environ.get("ATTACK_LONG", "") not in ("", "0")


# Shrinking a failure over a real store can take minutes: ATTACK_SHRINK=1 asks for it; the
# failing example is printed as drawn otherwise.
SHRINK = os.environ.get("ATTACK_SHRINK", "") not in ("", "0")


def budget(short: int, long: int = 0, **more: Any) -> settings:
    """Hypothesis settings for one attack: `short` examples in `make test`, `long` (ten
    times `short` unless given) under ATTACK_LONG."""
    phases = list(Phase) if SHRINK else [p for p in Phase if p not in (Phase.shrink, Phase.explain)]
    return settings(max_examples=(long or short * 10) if LONG else short, derandomize=not LONG, deadline=None,
                    database=None, suppress_health_check=list(HealthCheck), phases=phases, **more)


REFUSALS = (ConfigError, PayloadError)  # what a refused Python call may raise

# -- values ------------------------------------------------------------------------------

EDGE_TEXT = [
    "", " ", "a ", " a", "a\t", "a\n", "\x00", "a\x00b", "\x1b[31m", "\r\n", "\x7f", "\u200b", "\u202e",
    "\ufeff", "é", "e\u0301", "ß", "İ", "👍", "日本", "\ud800",
    "../etc", "%00", "a/b", "a:b", "*", "{x}", "null", "NaN", "inf",
]
# long texts by length (a strategy's repr holds its samples: keep them short there)
LONG_TEXT = st.sampled_from([60, 61, 100, 101, 179, 191, 192, 200, 201, 256, 10_000]).map(lambda n: "a" * n)
# characters from every category, control characters and NUL included
ANY_CHAR = st.characters(codec="utf-8")
HOSTILE_TEXT = st.one_of(
    st.sampled_from(EDGE_TEXT), LONG_TEXT,
    st.text(ANY_CHAR, max_size=20),
    st.builds("{}{}".format, st.text(ANY_CHAR, min_size=1, max_size=8),
              st.sampled_from([" ", "  ", "\t", "\x00"])),
    st.text(st.sampled_from("ab \x00\t\n\x1f"), min_size=1, max_size=6),
)
# a name a user might mean, often with a hostile edge
NAMEISH = st.one_of(st.from_regex(r"[a-z][a-z0-9_.:-]{0,12}", fullmatch=True), HOSTILE_TEXT)

EDGE_NUMBERS = [0, -1, 1, 0.5, -0.0, 1e-300, 1e300, -1e300, math.inf, -math.inf, math.nan, 2**31, 2**53 + 1,
                2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**100, 86400 * 366, 10**12, True, False]
HOSTILE_NUMBER: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(EDGE_NUMBERS), st.floats(), st.integers(), st.integers(-5, 5),
    st.sampled_from(["5", "inf", "NaN", "1e400", " 1", "", "-1"]),
)
FAR_DATES = [datetime(1, 1, 1, tzinfo=UTC), datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC),
             datetime(2262, 4, 12, tzinfo=UTC), datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC),
             datetime(2030, 1, 1), datetime(3000, 1, 1, tzinfo=timezone(timedelta(hours=14)))]
HOSTILE_WHEN: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(FAR_DATES), st.datetimes(timezones=st.sampled_from([UTC, None])), HOSTILE_NUMBER,
    st.timedeltas(), st.sampled_from([timedelta.max, timedelta(days=-1)]),
)
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), HOSTILE_TEXT,
                      st.sampled_from([10**100, -(2**64), math.inf, math.nan]))
# what a JSON body can carry (Python's json writes NaN and Infinity, and big integers)
JSON_VALUE = st.one_of(
    st.recursive(JSON_LEAF, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(HOSTILE_TEXT, inner, max_size=3)), max_leaves=8),
    st.integers(1, 1200).map(lambda depth: nested(depth)),
    st.sampled_from([70_000, 66_000]).map(lambda n: "x" * n), st.just(80).map(lambda n: ["y" * 1000] * n),
)
# ... and what a Python caller can pass besides
HOSTILE_JSON = st.one_of(JSON_VALUE, st.sampled_from([b"bytes", {1: "int key"}, {"set": {1, 2}}, object()]))


def nested(depth: int) -> Any:
    value: Any = 0
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


# -- the oracle ----------------------------------------------------------------------------

def one_sentence(message: str, where: str) -> None:
    """A refusal's text: a sentence for a person, not a traceback. (Its length is not judged:
    some refusals quote the value they refuse whole, 10,000 characters of it.)"""
    assert message.strip(), f"{where}: refused without a word"
    assert "Traceback" not in message, f"{where}: a traceback instead of a sentence:\n{message[:2000]}"


def refused_or_done(call: Any, where: str, snapshot: Any = None,
                    refusals: tuple[type[BaseException], ...] = REFUSALS) -> tuple[bool, Any]:
    """Run `call()`: (True, its answer) or (False, the refusal) — a refusal with one of
    `refusals` and a sentence, after which `snapshot()` reads what it read before. Any
    other exception fails the attack."""
    before = snapshot() if snapshot else None
    try:
        return True, call()
    except UnicodeEncodeError as exc:  # before `refusals` (it is a ValueError): the driver's, not deferq's
        pytest.fail(f"{where}: a lone surrogate reached the store's driver ({exc}) instead of a sentence")
    except refusals as exc:
        one_sentence(str(exc), where)
        if snapshot:
            added = stored_since(before, snapshot())
            assert not added, f"{where}: refused ({str(exc)[:300]}) but stored {str(added)[:500]}"
        return False, exc


# -- what a call could have stored ----------------------------------------------------------

NAMESPACES = ("schedules", "schedule-runs", "limits", "deferq.events", "tokens", "topics", "deferq.batches")


def store_snapshot(app: Any) -> dict[str, dict[str, Any]]:
    """Every job and small record of the namespaces a public call writes, and the paused
    queues: what a refused call must leave as it found it."""
    backend = app.backend
    jobs = {job.id: (str(state), job.key, job.queue) for state in JobState
            for job in backend.list_jobs(state, limit=10_000)}
    return {"jobs": jobs, "paused": dict.fromkeys(backend.paused(), True),
            **{namespace: backend.kv_list(namespace) for namespace in NAMESPACES}}


def stored_since(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """What `after` holds that `before` did not, or holds otherwise: (part, name). Records
    that expired meanwhile (an event kept 0.1 s) are not a change a call made."""
    return [(part, name) for part, entries in after.items() for name, value in entries.items()
            if before[part].get(name) != value]
