"""Topics: where a business's jobs are delivered, and how failures are retried (S2-3..S2-6).

A topic is a JSON record in the store (kv namespace "topics"), so every server and
every worker sees the same one, and a change applies to jobs already waiting: the
delivery task reads the topic when it runs (S2-8 "notice of a changed configuration").
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from .. import backoff as backoff_module
from ..backends import Backend
from ..job import Priority
from . import fields, netpolicy
from .condition import Condition, ConditionError
from .errors import Invalid
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
BACKOFF_KINDS = {
    "fixed": ("seconds",),
    "linear": ("first", "step", "unit", "cap"),
    "exponential": ("base", "first", "cap", "jitter"),
    "schedule": ("seconds",),
}
# A header name is an HTTP token (RFC 9110); a value is printable ASCII, spaces and tabs.
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
FRAMING_HEADERS = ("content-length", "transfer-encoding")  # deferq frames each body itself
TOPIC_FIELDS = ("url", "method", "headers", "delay_ms", "ttr", "max_attempts", "backoff",
                "retry_condition", "priority", "queue", "signing_secret",
                "max_answer_bytes")  # fmt: skip


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
                     policy: netpolicy.Policy | None = None) -> Topic:  # fmt: skip
        """Validate a PUT body. Without a signing_secret the previous one is kept (or one
        is made), so re-saving a topic never breaks its receivers' verification. The URL
        is checked against `policy` (default: this process's callback policy)."""
        check_name(name)
        data = fields.json_object(data, "a topic")
        fields.only_known(data, TOPIC_FIELDS, "a topic")
        url = fields.string(data, "url", max_length=2000)
        if url is None:
            raise Invalid("a topic needs a url (the callback to deliver jobs to)")
        check_url(url, policy or netpolicy.current())
        condition = fields.string(data, "retry_condition", max_length=2000)
        if condition is not None:
            try:
                Condition(condition)
            except ConditionError as exc:
                raise Invalid(f"retry_condition: {exc}") from None
        secret = fields.string(data, "signing_secret", max_length=200)
        if secret is not None and len(secret) < 16:
            raise Invalid("signing_secret must be at least 16 characters")
        backoff = data.get("backoff") or dict(DEFAULT_BACKOFF)
        build_backoff(backoff)
        queue = fields.string(data, "queue", DEFAULT_QUEUE, max_length=100)
        if not NAME_PATTERN.match(queue):
            raise Invalid(f"queue {queue!r} must be letters, digits and _.:- (at most 100)")
        return cls(
            name=name,
            url=url,
            method=fields.string(data, "method", "POST", choices=METHODS),
            headers=check_headers(fields.string_map(data, "headers")),
            delay_ms=fields.integer(data, "delay_ms", 0, maximum=10 * 365 * 86400 * 1000),
            ttr=float(fields.number(data, "ttr", DEFAULT_TTR, above=True, maximum=86400)),
            max_attempts=fields.integer(data, "max_attempts", DEFAULT_MAX_ATTEMPTS, 1, 1000),
            backoff=backoff,
            retry_condition=condition,
            priority=fields.string(data, "priority", "normal", choices=Priority.NAMES),
            queue=queue,
            signing_secret=secret or (previous.signing_secret if previous else new_secret()),
            max_answer_bytes=fields.integer(data, "max_answer_bytes", DEFAULT_MAX_ANSWER_BYTES,
                                            1, MAX_ANSWER_BYTES),  # fmt: skip
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


def check_name(name: str) -> None:
    if not NAME_PATTERN.match(name):
        raise Invalid(f"topic name {name!r:.120} must be 1-100 letters, digits and _.:-")


def check_url(url: str, policy: netpolicy.Policy | None = None) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid(f"url must be an http:// or https:// URL, got {url!r:.120}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise Invalid(f"url {url!r:.120} names a port that is not a number from 1 to 65535")
    refused = (policy or netpolicy.current()).url_refusal(url)
    if refused is not None:
        raise Invalid(f"url {url!r:.120} is refused by the callback policy: {refused}")


def check_headers(headers: dict[str, str]) -> dict[str, str]:
    """Refuse at PUT what would make every delivery fail: a header name that is not an
    HTTP token, a value with a line break, a control or a non-ASCII character, or a
    header that frames the body (deferq sets those for each request)."""
    for name, value in headers.items():
        if not HEADER_NAME.match(name):
            raise Invalid(f"headers: {name!r:.60} is not a header name: use letters, digits "
                          "and !#$%&'*+-.^_`|~ only")  # fmt: skip
        if name.lower() in FRAMING_HEADERS:
            raise Invalid(f"headers: {name} is set by deferq for each delivery: leave it out")
        bad = next((c for c in value if not (c == "\t" or " " <= c <= "~")), None)
        if bad is not None:
            what = ("a line break" if bad in "\r\n" else
                    "a control character" if ord(bad) < 128 else "a non-ASCII character")  # fmt: skip
            raise Invalid(f"headers: the value of {name} holds {what} ({bad!r}); "
                          "header values must be printable ASCII")  # fmt: skip
    return headers


def build_backoff(spec: Any) -> backoff_module.Backoff:
    """A retry schedule from its JSON form, e.g. {"kind": "fixed", "seconds": 5}."""
    spec = fields.json_object(spec, "backoff")
    kind = spec.get("kind")
    if kind not in BACKOFF_KINDS:
        raise Invalid(f"backoff.kind must be one of {', '.join(BACKOFF_KINDS)}, got {kind!r:.60}")
    fields.only_known(spec, ("kind", *BACKOFF_KINDS[kind]), f"a {kind} backoff")
    if kind == "schedule":
        waits = spec.get("seconds")
        if not isinstance(waits, list) or not 1 <= len(waits) <= 1000:
            raise Invalid("backoff.seconds must be a list of 1-1000 waits in seconds")
        return Schedule(tuple(
            float(fields.number({"backoff.seconds": w}, "backoff.seconds", maximum=30 * 86400))
            for w in waits
        ))  # fmt: skip
    if kind == "exponential":
        jitter = spec.get("jitter", True)
        if not isinstance(jitter, bool):
            raise Invalid("backoff.jitter must be true or false")
        options = {k: fields.number(spec, k, maximum=30 * 86400) for k in ("first", "cap")}
        options["base"] = fields.number(spec, "base", minimum=1, maximum=100)
        return backoff_module.exponential(
            jitter=jitter, **{k: float(v) for k, v in options.items() if v is not None}
        )
    options = {k: fields.number(spec, k, maximum=30 * 86400) for k in BACKOFF_KINDS[kind]}
    options = {k: float(v) for k, v in options.items() if v is not None}
    if kind == "fixed":
        return backoff_module.fixed(**options)
    return backoff_module.linear(**options)


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
