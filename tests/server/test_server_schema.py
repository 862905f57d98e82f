"""schemathesis against /openapi.json, with every check: generated requests to every
operation never get a 5xx, every status and answer is the documented one, a request the
document refuses is refused, and one it allows is accepted (positive data acceptance:
not a 4xx but the documented 401/403, 404, 409 and 429)."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable

import jsonschema_rs
import pytest
import schemathesis
import schemathesis.core.jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import negative_data_rejection

import deferq
from deferq.backends.search import decode_cursor, encode_cursor
from deferq.backends.sql.search import is_sql_position
from deferq.errors import ConfigError
from deferq.schedules.timing import Timing, zone
from deferq.server import ServerConfig, create_app
from deferq.server.api.openapi import exact_json_values
from deferq.server.app import full_document
from deferq.server.http import auth as auth_module
from deferq.server.topics.condition import Condition
from deferq.server.topics.topic import check_url

with warnings.catch_warnings():  # starlette's test client asks for "httpx2"; not needed
    warnings.simplefilter("ignore")
    import starlette.testclient  # noqa: F401

STORE = f"sqlite:///{tempfile.mkdtemp(prefix='deferq-schema-')}/deferq.db"  # made at import: not in tmp_path
pytestmark = pytest.mark.deferq_file_store  # so the plugin lets the tests' server open it
APP = deferq.App(STORE)
ADMIN, _ = auth_module.create(APP.backend, "admin")
WEB = create_app(ServerConfig(error_log="off"), APP)
APP.backend.kv_put("topics", "orders", b'{"name": "orders", "url": "http://127.0.0.1:9/", '
                   b'"signing_secret": "whsec_0123456789abcdef"}')

# The formats the document names for what no JSON Schema keyword states (models.FORMATS):
# values of them are what the server accepts, and schemathesis draws them from these.
NAME = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)
schemathesis.openapi.format("callback-url", st.builds(
    "{}://{}.example{}/{}".format, st.sampled_from(["http", "https"]), NAME,
    st.sampled_from(["", ":443", ":8080"]), st.from_regex(r"[a-z0-9/_.-]{0,30}", fullmatch=True)))
OPERAND = st.one_of(
    st.builds("{{res{}}}".format, st.lists(NAME, max_size=3).map(lambda path: "".join(f".{p}" for p in path))),
    st.integers(-1000, 1000).map(str), NAME.map(repr), st.sampled_from(["true", "false", "null"]),
)
COMPARISON = st.one_of(OPERAND, st.builds("{} {} {}".format, OPERAND,
                                          st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), OPERAND))
CONDITION = st.recursive(COMPARISON, lambda inner: st.one_of(
    st.builds("{} && {}".format, inner, inner), st.builds("{} || {}".format, inner, inner),
    st.builds("!({})".format, inner)), max_leaves=6)
schemathesis.openapi.format("retry-condition", CONDITION)
# Schedules: cron expressions and time zones the server takes (schedules/timing.py).
schemathesis.openapi.format("cron", st.sampled_from(["*/5 * * * *", "0 9 * * 1-5", "*/10 * * * * *"]))
schemathesis.openapi.format("time-zone", st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]))
# A page cursor as the SQLite store makes one (backends/sql/search.py).
schemathesis.openapi.format("page-cursor", st.integers(1, 10**9).map(lambda seq: encode_cursor({"after": seq})))


def sqlite_cursor(value: str) -> None:
    """A cursor the SQLite store reads (its position: {"after": seq})."""
    decode_cursor(value, is_sql_position)  # a ValueError unless it is one


def _holds(check: Callable[[str], object]) -> Callable[[str], bool]:
    def holds(value: str) -> bool:
        try:
            check(value)
        except ValueError:  # Invalid and ConditionError are ValueErrors
            return False
        return True

    return holds


# ... and what they mean, for the validator that tells schemathesis whether a value it
# did not draw from a strategy (a literal it found in deferq's source, a boundary) is one
# the document allows. schemathesis has no public hook for a custom format's validator:
# this wraps the one function its validators get their formats from, and fails loudly if
# a new schemathesis no longer has it.
def schedule_timing(**timing: str) -> None:
    try:
        Timing(**timing) if "cron" in timing else zone(timing["tz"])
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


FORMAT_CHECKS = {"callback-url": _holds(check_url), "retry-condition": _holds(Condition),
                 "page-cursor": _holds(sqlite_cursor), "cron": _holds(lambda cron: schedule_timing(cron=cron)),
                 "time-zone": _holds(lambda tz: schedule_timing(tz=tz))}
_formats = schemathesis.core.jsonschema.supplemental_formats
schemathesis.core.jsonschema.supplemental_formats = lambda cls: {**(_formats(cls) or {}), **FORMAT_CHECKS}

# The document /openapi.json serves, with JsonValue's rules stated at every level of a
# value (the served one says them in words below its first level, for client generators).
schema = schemathesis.openapi.from_dict(exact_json_values(full_document()))
schema.app, schema.location = WEB, "/openapi.json"
# The document refuses NUL in every string and object key of a request (a pattern, and
# propertyNames), but schemathesis draws object keys without reading propertyNames: it
# is told to leave NUL out, and tests/server/test_server_input.py checks each NUL refusal.
schema.config.generation.update(allow_x00=False)


@given(CONDITION)
@settings(max_examples=50, deadline=None)
def test_the_drawn_retry_conditions_parse(condition):
    Condition(condition)


DOCUMENT = schema.raw_schema
ELSEWHERE = (ParameterLocation.HEADER, ParameterLocation.QUERY, ParameterLocation.PATH)


def drawn_invalid_body_is_valid(case) -> bool:
    """schemathesis makes a body invalid by changing one branch of an anyOf or oneOf; where
    the change lands in another branch (a JSON value takes any type: a number made an
    object is still a JSON value) the body is one the document allows, and the server is
    right to take it. Such a case is checked as the valid request it is."""
    meta = case.meta
    if meta is None or not meta.is_negative_at(ParameterLocation.BODY) or any(map(meta.is_negative_at, ELSEWHERE)):
        return False
    body = case.operation.definition.raw["requestBody"]["content"]["application/json"]["schema"]
    try:
        return bool(jsonschema_rs.Draft202012Validator({**DOCUMENT, **body}).is_valid(case.body))
    except (ValueError, TypeError, UnicodeError):  # a text it cannot read (a lone surrogate): not judged here
        return False


@schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_matches_its_openapi_document(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # A generated token is swapped for a real one. A case whose headers are invalid
        # on purpose (the header left out, or not "Bearer <token>") is sent as drawn and
        # expects 401: swapping its header would make a refused request an allowed one.
        drawn_invalid = case.meta is not None and case.meta.is_negative_at(ParameterLocation.HEADER)
        swap = "Authorization" in (case.headers or {}) and not drawn_invalid
        headers = {"Authorization": f"Bearer {ADMIN}"} if swap else {}
        # every check, positive data acceptance included
        skipped = [negative_data_rejection] if drawn_invalid_body_is_valid(case) else []
        case.call_and_validate(headers=headers, excluded_checks=skipped)
