"""Topics: where a business's jobs are delivered, and how failures are retried (S2-3..S2-6).

A topic is a JSON record in the store (kv namespace "topics"), so every server and
every worker sees the same one, and a change applies to jobs already waiting: the
delivery task reads the topic when it runs (S2-8 "notice of a changed configuration").
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias
from urllib.parse import urlsplit

import msgspec
import orjson
from msgspec import UNSET, Meta, Struct, UnsetType

from ... import backoff as backoff_module
from ...backends import Backend
from ...job import Priority
from ...net import policy as netpolicy
from ..http import fields
from ..http.errors import Invalid
from .condition import Condition, ConditionError
from .signing import new_secret

NAMESPACE = "topics"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
METHODS = ("POST", "PUT", "PATCH")
CACHE_SECONDS = 2.0  # servers and workers re-read a topic at most this often
DEFAULT_QUEUE = "callbacks"
DEFAULT_TTR = 30.0
DEFAULT_MAX_ATTEMPTS = 10  # S2-6
DEFAULT_MAX_ANSWER_BYTES = 1024 * 1024  # of a callback's answer that a worker reads
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # the most a topic may ask each delivery to hold
DEFAULT_BACKOFF = {"kind": "linear", "first": 1, "step": 2, "unit": 60}  # 1, 3, 5 ... minutes
# A header name is an HTTP token (RFC 9110); a value is printable ASCII, spaces and tabs.
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
HEADER_VALUE = r"^[\t -~]*$"
FRAMING_HEADERS = ("content-length", "transfer-encoding")  # deferq frames each body itself
# The rules of check_headers in a pattern, for the model (check_headers words a refusal).
_FRAMING = "|".join("".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in name) for name in FRAMING_HEADERS)
HeaderName = Annotated[str, fields.matching(f"^(?!(?:{_FRAMING})$){HEADER_NAME.pattern[1:]}",
                                            "an HTTP header name that deferq does not set itself")]
HeaderValue = Annotated[str, fields.matching(HEADER_VALUE, "printable ASCII")]

# -- the request: PUT /v1/topics/{name} -------------------------------------------------------

Wait = Annotated[float, Meta(ge=0, le=30 * 86400)]  # seconds
# An http(s) URL the network policy allows: a format of the document, checked by check_url.
URL = Meta(max_length=2000, extra_json_schema={"format": "callback-url"})
QUEUE = fields.matching(NAME_PATTERN.pattern, "letters, digits and _.:- (at most 100)")


class FixedBackoff(Struct, tag_field="kind", tag="fixed", forbid_unknown_fields=True):
    """The same wait before every retry."""

    seconds: Wait | None = None


class LinearBackoff(Struct, tag_field="kind", tag="linear", forbid_unknown_fields=True):
    """(step*n + first) units, capped at cap seconds: the default is 1, 3, 5 ... minutes."""

    first: Wait | None = None
    step: Wait | None = None
    unit: Wait | None = None
    cap: Wait | None = None


class ExponentialBackoff(Struct, tag_field="kind", tag="exponential", forbid_unknown_fields=True):
    """first * base**(n-1) seconds, capped, with jitter unless it is false."""

    base: Annotated[float, Meta(ge=1, le=100)] | None = None
    first: Wait | None = None
    cap: Wait | None = None
    jitter: bool | UnsetType = UNSET


class ScheduleBackoff(Struct, tag_field="kind", tag="schedule", forbid_unknown_fields=True):
    """Explicit waits: the n-th retry waits seconds[n-1]; the last one repeats."""

    seconds: Annotated[list[Wait], Meta(min_length=1, max_length=1000)]


Backoff = FixedBackoff | LinearBackoff | ExponentialBackoff | ScheduleBackoff
if TYPE_CHECKING:  # the choices are made at run time, from the names they stand for
    PriorityName: TypeAlias = str
    MethodName: TypeAlias = str
else:
    PriorityName = Literal[tuple(Priority.NAMES)]
    MethodName = Literal[METHODS]


class TopicRequest(Struct, forbid_unknown_fields=True):
    """A topic: where its jobs are delivered and how failures are retried. A field left out
    (or null) takes its default; without a signing_secret the topic keeps the one it had."""

    url: Annotated[str, URL]
    method: MethodName | None = None
    headers: dict[HeaderName, HeaderValue] | None = None
    delay_ms: Annotated[int, Meta(ge=0, le=10 * 365 * 86400 * 1000)] | None = None
    ttr: Annotated[float, Meta(gt=0, le=86400)] | None = None
    max_attempts: Annotated[int, Meta(ge=1, le=1000)] | None = None
    backoff: Backoff | None = None
    # e.g. {res.code}!=200: a format of the document (its length included), checked by Condition
    retry_condition: Annotated[str, Meta(extra_json_schema={"format": "retry-condition"})] | None = None
    priority: PriorityName | None = None
    queue: Annotated[str, QUEUE] | None = None
    signing_secret: Annotated[str, Meta(min_length=16, max_length=200)] | None = None
    max_answer_bytes: Annotated[int, Meta(ge=1, le=MAX_ANSWER_BYTES)] | None = None


@dataclass(frozen=True)
class Schedule:
    """Explicit waits: the n-th retry waits seconds[n-1]; the last one repeats."""

    seconds: tuple[float, ...]

    def __call__(self, attempt: int) -> float:
        return self.seconds[min(max(attempt, 1), len(self.seconds)) - 1]


@dataclass(frozen=True)
class Topic:
    name: str
    url: str
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    delay_ms: int = 0
    ttr: float = DEFAULT_TTR
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_BACKOFF))
    retry_condition: str | None = None
    priority: str = "normal"
    queue: str = DEFAULT_QUEUE
    signing_secret: str = ""
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    updated_at: float = 0.0

    @classmethod
    def from_request(cls, name: str, data: Any, previous: Topic | None = None,
                     policy: netpolicy.Policy | None = None) -> Topic:
        """Validate a PUT body. Without a signing_secret the previous one is kept (or one
        is made), so re-saving a topic never breaks its receivers' verification. The URL
        is checked against `policy` (default: the environment's network policy; a server
        passes its own, which also refuses its store)."""
        check_name(name)
        if isinstance(data, dict) and data.get("url") is None:
            raise Invalid("a topic needs a url (the callback to deliver jobs to)")
        request = fields.parse(TopicRequest, data, "a topic", _explain)
        check_url(request.url, policy)
        if request.retry_condition is not None:
            try:
                Condition(request.retry_condition)
            except ConditionError as exc:
                raise Invalid(f"retry_condition: {exc}") from None
        return cls(
            name=name,
            url=request.url,
            method=request.method or "POST",
            headers=check_headers(request.headers or {}),
            delay_ms=_default(request.delay_ms, 0),
            ttr=float(_default(request.ttr, DEFAULT_TTR)),
            max_attempts=_default(request.max_attempts, DEFAULT_MAX_ATTEMPTS),
            backoff=data["backoff"] if request.backoff is not None else dict(DEFAULT_BACKOFF),
            retry_condition=request.retry_condition,
            priority=_default(request.priority, "normal"),
            queue=_default(request.queue, DEFAULT_QUEUE),
            signing_secret=request.signing_secret or (previous.signing_secret if previous else new_secret()),
            max_answer_bytes=_default(request.max_answer_bytes, DEFAULT_MAX_ANSWER_BYTES),
            updated_at=time.time(),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def encode(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def decode(cls, data: bytes) -> Topic:
        return cls(**orjson.loads(data))

    def schedule(self) -> backoff_module.Backoff:
        return build_backoff(self.backoff)

    def condition(self) -> Condition | None:
        return Condition(self.retry_condition) if self.retry_condition else None


def _explain(field: str, value: Any) -> str | None:
    """Refused headers in check_headers' words, which name the header and the character."""
    if field == "headers" and isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        try:
            check_headers(value)
        except Invalid as exc:
            return exc.message
    return None


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


def check_name(name: str) -> None:
    if not NAME_PATTERN.fullmatch(name):
        raise Invalid(f"topic name {name!r:.120} must be 1-100 letters, digits and _.:-")


def check_url(url: str, policy: netpolicy.Policy | None = None) -> None:
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. the [ of an IPv6 address never closed
        raise Invalid(f"url {url!r:.120} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid(f"url must be an http:// or https:// URL, got {url!r:.120}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise Invalid(f"url {url!r:.120} names a port that is not a number from 1 to 65535")
    refused = (policy or netpolicy.Policy.from_env()).url_refusal(url)
    if refused is not None:
        raise Invalid(f"url {url!r:.120} is refused by the network policy: {refused}")


def check_headers(headers: dict[str, str]) -> dict[str, str]:
    """Refuse at PUT what would make every delivery fail: a header name that is not an
    HTTP token, a value with a line break, a control or a non-ASCII character, or a
    header that frames the body (deferq sets those for each request)."""
    for name, value in headers.items():
        if not HEADER_NAME.fullmatch(name):
            raise Invalid(f"headers: {name!r:.60} is not a header name: use letters, digits "
                          "and !#$%&'*+-.^_`|~ only")
        if name.lower() in FRAMING_HEADERS:
            raise Invalid(f"headers: {name} is set by deferq for each delivery: leave it out")
        bad = next((c for c in value if not (c == "\t" or " " <= c <= "~")), None)
        if bad is not None:
            what = ("a line break" if bad in "\r\n" else
                    "a control character" if ord(bad) < 128 else "a non-ASCII character")
            raise Invalid(f"headers: the value of {name} holds {what} ({bad!r}); "
                          "header values must be printable ASCII")
    return headers


def build_backoff(spec: Any) -> backoff_module.Backoff:
    """A retry schedule from its JSON form, e.g. {"kind": "fixed", "seconds": 5}."""
    try:
        checked: Backoff = msgspec.convert(spec, Backoff)
    except msgspec.ValidationError as exc:
        raise Invalid(f"backoff: {exc}") from None
    return schedule_of(checked)


def schedule_of(checked: Backoff) -> backoff_module.Backoff:
    """The retry schedule a checked backoff model describes."""
    if isinstance(checked, ScheduleBackoff):
        return Schedule(tuple(checked.seconds))
    given = {f: getattr(checked, f) for f in checked.__struct_fields__}
    waits = {k: float(v) for k, v in given.items() if k != "jitter" and v is not None}
    if isinstance(checked, ExponentialBackoff):
        jitter = True if checked.jitter is UNSET else bool(checked.jitter)
        return backoff_module.exponential(jitter=jitter, **waits)
    if isinstance(checked, FixedBackoff):
        return backoff_module.fixed(**waits)
    return backoff_module.linear(**waits)


# -- storage ------------------------------------------------------------------------------


def load(backend: Backend, name: str) -> Topic | None:
    raw = backend.kv_get(NAMESPACE, name)
    return None if raw is None else Topic.decode(raw)


def save(backend: Backend, topic: Topic) -> None:
    backend.kv_put(NAMESPACE, topic.name, topic.encode())


def delete(backend: Backend, name: str) -> bool:
    return backend.kv_delete(NAMESPACE, name)


def load_all(backend: Backend) -> list[Topic]:
    return [Topic.decode(raw) for _, raw in sorted(backend.kv_list(NAMESPACE).items())]
