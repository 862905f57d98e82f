"""Arguments arrive exactly as they were enqueued, or are refused at enqueue."""

from __future__ import annotations

import enum
import math
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

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
])  # fmt: skip
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
             slot: Slot, pair: tuple[int, int], tags: list[str] | None = None) -> None:  # fmt: skip
        seen.append((when, day, ref, price, colour, slot, pair, tags))

    args = (datetime(2030, 1, 1, 9, 30, tzinfo=UTC), date(2030, 1, 2), uuid.UUID(int=7), Decimal("1.10"),
            Colour.RED, Slot(datetime(2030, 1, 1, 10, 0), 3), (4, 5))  # fmt: skip
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


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


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
