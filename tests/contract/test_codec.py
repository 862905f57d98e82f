"""Arguments arrive exactly as they were enqueued, or are refused at enqueue."""

from __future__ import annotations

import enum
import math
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import deferq
from deferq.codec import check_exact
from deferq.errors import PayloadError
from deferq.worker import Worker, WorkerConfig


class Colour(enum.Enum):
    RED = "red"


@dataclass
class Slot:
    at: datetime
    seats: int


@pytest.mark.parametrize(("value", "says"), [
    (math.nan, "nan, which JSON cannot carry"),
    (math.inf, "inf, which JSON cannot carry"),
    (datetime(2030, 1, 1, tzinfo=UTC), "datetime"),
    (uuid.UUID(int=7), "UUID"),
    (Slot(datetime(2030, 1, 1), 2), "Slot"),
    (2**64, "beyond 64 bits"),
    ({1: "a"}, "the key 1"),
    ({"a": [1, {"b": {2}}]}, "['a'][1]['b'] is set"),
    (b"bytes", "bytes"),
])
def test_what_json_cannot_carry_exactly_is_refused_with_its_path(value, says):
    app = deferq.App("memory://")

    @app.task()
    def keep(value):
        return None

    with pytest.raises(PayloadError, match="argument 'value' of keep") as refused:
        keep.enqueue(value)
    message = str(refused.value)
    assert says in message and "\n" not in message
    assert app.stats() == {}  # nothing stored


def test_annotated_parameters_are_encoded_and_decoded_back_exactly(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/t.db")
    seen = []

    @app.task()
    def book(when: datetime, day: date, ref: uuid.UUID, price: Decimal, colour: Colour,
             slot: Slot, pair: tuple[int, int], tags: list[str] | None = None) -> None:
        seen.append((when, day, ref, price, colour, slot, pair, tags))

    args = (datetime(2030, 1, 1, 9, 30, tzinfo=UTC), date(2030, 1, 2), uuid.UUID(int=7), Decimal("1.10"),
            Colour.RED, Slot(datetime(2030, 1, 1, 10, 0), 3), (4, 5))
    book.enqueue(*args, tags=["x"])
    assert Worker(app, WorkerConfig(burst=True)).run() == 0
    assert seen == [(*args, ["x"])]
    assert [type(v) for v in seen[0]] == [datetime, date, uuid.UUID, Decimal, Colour, Slot, tuple, list]
    app.close()


def test_eager_mode_goes_through_the_same_encode_and_decode():
    app = deferq.App("memory://", eager=True)

    @app.task()
    def when(at: datetime) -> str:
        return type(at).__name__

    @app.task()
    def plain(at):
        return at

    assert when.enqueue(datetime(2030, 1, 1, tzinfo=UTC)).result == "datetime"
    with pytest.raises(PayloadError, match="annotate the parameter"):
        plain.enqueue(datetime(2030, 1, 1, tzinfo=UTC))


def test_a_stored_value_that_no_longer_fits_its_annotation_fails_the_job_once(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/t.db")

    @app.task(name="typed", max_attempts=5)
    def typed(at: datetime) -> None: ...

    job = app.enqueue("typed", args=["not a time"])  # by name: JSON values only
    assert Worker(app, WorkerConfig(burst=True)).run() == 0
    done = app.get(job.id)
    assert done.state == "dead" and done.attempts == 1 and "do not match its annotations" in done.error
    app.close()


TEXT = st.characters(codec="utf-8", exclude_characters="\0")  # NUL: refused (test_nul_is_refused_on_every_store)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(TEXT),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(TEXT, max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_every_json_value_is_accepted_and_arrives_equal(value):
    check_exact(value, "v")
    app = deferq.App("memory://", eager=True)

    @app.task()
    def echo(v):
        return v

    assert echo.enqueue(value).result == value


@given(st.sampled_from([math.nan, math.inf, -math.inf])
       | st.integers(2**64, 2**200) | st.integers(-(2**200), -(2**63) - 1))
def test_values_json_would_change_are_always_refused(value):
    with pytest.raises(PayloadError):
        check_exact([{"k": value}], "v")


def _holding_itself() -> tuple[list[object], dict[str, object]]:
    items: list[object] = []
    items.append(items)
    mapping: dict[str, object] = {}
    mapping["self"] = mapping
    return items, mapping


def _nested(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("value", [*_holding_itself(), _nested(101), _nested(1000), {"a": _nested(100)}])
def test_a_value_nested_past_100_levels_or_holding_itself_is_a_payload_error(value):
    app = deferq.App("memory://")

    @app.task()
    def keep(value):
        return None

    @app.task()
    def typed(value: list[Any]) -> None:
        return None

    for task in (keep, typed):
        with pytest.raises(PayloadError, match=r"argument 'value' of \w+\(\) nests lists and dicts more than 100 "
                                               r"levels deep \(or holds itself\): deferq takes at most 100$"):
            task.enqueue(value)
    assert app.stats() == {}
    keep.enqueue(_nested(100))  # the limit itself is kept


@pytest.mark.parametrize("store", ["memory_url", "sqlite_url", "redis_url", "postgres_url", "mysql_url"])
def test_nul_is_refused_on_every_store(request, store):
    """PostgreSQL cannot store NUL (a store error, before); every store refuses it alike."""
    app = deferq.App(request.getfixturevalue(store))

    @app.task()
    def keep(*args: Any, **kwargs: Any) -> None:
        return None

    try:
        for args, kwargs, says in [(("a\0b",), {}, "argument 0 of keep() holds the NUL character"),
                                   ((), {"user": {"name": "\0"}}, "argument 'user' of keep()['name'] holds"),
                                   (([{"k\0": 1}],), {}, "argument 0 of keep()[0]['k\\x00'] is a key that holds")]:
            with pytest.raises(PayloadError) as refused:
                keep.enqueue(*args, **kwargs)
            assert says in str(refused.value)
        for option in ("key", "remark"):
            with pytest.raises(ValueError, match=f"{option} must be .* without NUL"):
                keep.options(**{option: "a\0"}).enqueue()
        assert keep.enqueue("\\u0000").args == ("\\u0000",)  # text that spells it: kept
        assert sum(counts.get("queued", 0) for counts in app.stats().values()) == 1
    finally:
        app.close()
