"""Alerts by e-mail (SMTP) and webhook (JSON POST), rate-limited, sent off the caller's thread.

    alerter = Alerter(AlertConfig.from_dict(toml["alerts"]))
    alerter.send("store_down", "the store is unreachable", {"url": url, "error": "..."})
    alerter.close()   # delivers what is still queued (bounded), then stops the thread

`send` never blocks and never raises on delivery problems: a slow SMTP server or a
dead webhook receiver must not stall the master or a request. An alert is delivered at
most once per `min_interval` seconds per (kind, subject): the dead callbacks of three
topics are three alerts, a store that keeps failing is one. Those held back meanwhile
are logged as suppressed, counted, and reported with the next one of that kind and subject.

Webhooks and SMTP servers are reached only where the network policy allows
(net/policy.py, the one that judges topic callbacks): an admin who may save alert
settings cannot make deferq connect to loopback, the metadata service or the store.
A failed delivery is told in deferq's own words (`failure`), never with what the
other side sent.

The supervisor (store, queue and crash alerts) and the HTTP service (dead callbacks, sent
from the workers that deliver them) both send through this module, which is why it lives
beside them and not inside either.
"""

from __future__ import annotations

import logging
import queue
import re
import smtplib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlsplit

import orjson

from ..backends.base import Records
from ..errors import ConfigError, MissingExtra
from ..net import policy as netpolicy
from ..values import host_port, no_unknown_keys, parse_duration

log = logging.getLogger("deferq.alerts")

DELIVERY_TRIES = 3  # per target, with a short pause between tries
DELIVERY_TIMEOUT = 10.0  # seconds for one SMTP session or one webhook request
ERRNO = re.compile(r"^\[Errno -?\d+\] ")  # "[Errno 111] Connection refused": the reason is enough


@dataclass(frozen=True)
class EmailTarget:
    """Where alert e-mail goes: an SMTP server (plain, or STARTTLS with a login)."""

    host: str
    port: int
    sender: str
    recipients: tuple[str, ...]
    username: str | None = None
    password: str | None = None
    starttls: bool = False

    EMAIL_KEYS = ("smtp", "from", "to", "username", "password", "starttls")

    @classmethod
    def from_dict(cls, d: Any) -> EmailTarget:
        if not isinstance(d, dict):
            raise ConfigError('alerts.email must be a table like { smtp = "host:25", from = ..., to = [...] }')
        no_unknown_keys(d, cls.EMAIL_KEYS, "alerts.email")
        for required in ("smtp", "from", "to"):
            if required not in d:
                raise ConfigError(f"alerts.email needs {required!r}")
        host, port = host_port(d["smtp"], "alerts.email.smtp", default_port=25)
        sender = d["from"]
        if not isinstance(sender, str) or "@" not in sender:
            raise ConfigError(f"alerts.email.from must be an e-mail address, got {sender!r}")
        recipients = d["to"]
        if isinstance(recipients, str):
            recipients = [recipients]
        if (
            not isinstance(recipients, list)
            or not recipients
            or not all(isinstance(r, str) and "@" in r for r in recipients)
        ):
            raise ConfigError(f"alerts.email.to must be a list of e-mail addresses, got {d['to']!r}")
        for name in ("username", "password"):
            if name in d and not isinstance(d[name], str):
                raise ConfigError(f"alerts.email.{name} must be a string")
        if not isinstance(d.get("starttls", False), bool):
            raise ConfigError("alerts.email.starttls must be true or false")
        return cls(host, port, sender, tuple(recipients), d.get("username"), d.get("password"),
                   d.get("starttls", False))


@dataclass(frozen=True)
class AlertConfig:
    """The [alerts] table: where alerts go, how often, and what the monitor alerts on."""

    email: EmailTarget | None = None
    webhook: str | None = None
    min_interval: float = 300.0  # seconds between two alerts of one kind and subject
    backlog: dict[str, int] = field(default_factory=dict)  # queue -> alert above this many waiting
    oldest_waiting: float | None = None  # alert when a due job waited longer (seconds)
    dead_letters: bool = True  # alert when jobs go dead

    KEYS = ("email", "webhook", "min_interval", "backlog", "oldest_waiting", "dead_letters")

    @property
    def enabled(self) -> bool:
        return self.email is not None or self.webhook is not None

    @classmethod
    def from_dict(cls, d: Any) -> AlertConfig:
        """Validate an [alerts] table; a wrong key or value raises ConfigError (one sentence)."""
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise ConfigError("alerts must be a table")
        no_unknown_keys(d, cls.KEYS, "alerts")
        email = EmailTarget.from_dict(d["email"]) if "email" in d else None
        webhook = d.get("webhook")
        if webhook is not None:
            parts = urlsplit(webhook) if isinstance(webhook, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"alerts.webhook must be an http(s):// URL, got {webhook!r}")
        min_interval = parse_duration(d.get("min_interval", 300), "alerts.min_interval")
        backlog = d.get("backlog", {})
        if not isinstance(backlog, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in backlog.values()
        ):
            raise ConfigError("alerts.backlog must be a table of queue = number, like { email = 1000 }")
        oldest = d.get("oldest_waiting")
        oldest = None if oldest is None else parse_duration(oldest, "alerts.oldest_waiting")
        dead_letters = d.get("dead_letters", True)
        if not isinstance(dead_letters, bool):
            raise ConfigError("alerts.dead_letters must be true or false")
        return cls(email, webhook, min_interval, dict(backlog), oldest, dead_letters)

    def overridden_by(self, saved: Any) -> AlertConfig:
        """This config with each key that `saved` (an [alerts]-shaped dict, e.g. the
        settings saved from the console) sets taken from it; None changes nothing."""
        if saved is None:
            return self
        theirs = AlertConfig.from_dict(saved)
        return replace(self, **{key: getattr(theirs, key) for key in saved})


# The alert settings saved in the store (PUT /v1/settings/alerts, the console's alerts
# page): one record, read by the HTTP service and by every supervisor's monitor.
SETTINGS_NAMESPACE, ALERTS_KEY = "settings", "alerts"


def saved_alerts(store: Records) -> dict[str, Any] | None:
    """The alert settings saved in the store, or None."""
    raw = store.kv_get(SETTINGS_NAMESPACE, ALERTS_KEY)
    if raw is None:
        return None
    saved: dict[str, Any] = orjson.loads(raw)
    return saved


@dataclass
class _Alert:
    kind: str
    subject: str
    details: dict[str, Any]
    at: float
    suppressed: int = 0

    def payload(self, source: str) -> dict[str, Any]:
        return {
            "kind": self.kind, "subject": self.subject, "details": self.details,
            "source": source, "time": self.at, "suppressed": self.suppressed,
        }


class Alerter:
    """Sends alerts from one background thread; `send` returns at once."""

    def __init__(self, config: AlertConfig, *, source: str | None = None,
                 policy: Callable[[], netpolicy.Policy] = netpolicy.Policy.from_env) -> None:
        self.config = config
        self.source = source or socket.gethostname()
        # read at each delivery: netpolicy.ForStore(url) also keeps alerts out of that store
        self._policy = policy
        if config.enabled:
            netpolicy.Policy.from_env()  # a malformed DEFERQ_CALLBACK_POLICY is said now
        self._queue: queue.SimpleQueue[_Alert | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._last_sent: dict[tuple[str, str], float] = {}  # (kind, subject) -> monotonic time
        self._suppressed: dict[tuple[str, str], int] = {}
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        if config.webhook is not None:
            _httpx()  # say now, not at the first alert, that the client is missing

    def send(self, kind: str, subject: str, details: dict[str, Any] | None = None) -> None:
        """Queue an alert for delivery (non-blocking); rate-limited per (kind, subject)."""
        if not self.config.enabled:
            log.warning("alert %s: %s", kind, subject)  # no target: the log line is the alert
            return
        if self._closing.is_set():
            log.warning("alert %s not sent, the alerter is closing: %s", kind, subject)
            return
        topic = (kind, subject)
        alert = None
        with self._lock:
            why_not = self._hold_back(topic, time.monotonic())
            if why_not is None:
                alert = _Alert(kind, subject, dict(details or {}), time.time(),
                               self._suppressed.pop(topic, 0))
                self._pending += 1
                self._idle.clear()
                if self._thread is None:
                    self._thread = threading.Thread(target=self._deliver_loop, name="deferq-alerts",
                                                    daemon=True)
                    self._thread.start()
        if alert is None:
            log.warning("alert %s suppressed (%s): %s", kind, why_not, subject)
            return
        log.warning("alert %s: %s", kind, subject)
        self._queue.put(alert)

    def _hold_back(self, topic: tuple[str, str], now: float) -> str | None:
        """Why an alert of this (kind, subject) must wait (counting it), or None when it
        may go now (and its `min_interval` starts again). Called under the lock."""
        interval = self.config.min_interval
        last = self._last_sent.get(topic)
        if last is not None and now - last < interval:
            held = self._suppressed[topic] = self._suppressed.get(topic, 0) + 1
            return f"{held} since the last one, sent {now - last:.1f}s ago; min_interval {interval:g}s"
        # Subjects may carry numbers: forget those whose interval is over, unless a count
        # of held-back alerts waits for their next one.
        for old in [t for t, at in self._last_sent.items() if now - at >= interval and t not in self._suppressed]:
            del self._last_sent[old]
        self._last_sent[topic] = now
        return None

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued alert was delivered (or given up); say whether it was."""
        return self._idle.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (for at most `timeout` seconds), then stop the thread."""
        self.flush(timeout)
        self._closing.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    # -- the delivery thread ------------------------------------------------------

    def _deliver_loop(self) -> None:
        while (alert := self._queue.get()) is not None:
            try:
                self._deliver(alert)
            finally:
                with self._lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.set()

    def targets(self) -> dict[str, Any]:
        """Each target's name and the function that delivers an alert to it."""
        targets: dict[str, Any] = {}
        if self.config.email is not None:
            targets["e-mail"] = self._send_email
        if self.config.webhook is not None:
            targets["webhook"] = self._post_webhook
        return targets

    def try_once(self, target: str, kind: str, subject: str, details: dict[str, Any]) -> str:
        """Deliver one alert to one target now, once, on this thread (no rate limit): its
        status, "delivered" or why not, in deferq's words (a test of the settings)."""
        try:
            self.targets()[target](_Alert(kind, subject, details, time.time()))
        except Exception as exc:  # noqa: BLE001 - told, not raised
            return failure(exc)
        return "delivered"

    def _deliver(self, alert: _Alert) -> None:
        for name, deliver in self.targets().items():
            for attempt in range(1, DELIVERY_TRIES + 1):
                try:
                    deliver(alert)
                    break
                except netpolicy.Refused as exc:  # trying again changes nothing
                    log.error("alert %s not delivered by %s: %s", alert.kind, name, failure(exc))
                    break
                except Exception as exc:  # noqa: BLE001 - delivery problems are only logged
                    if attempt == DELIVERY_TRIES or self._closing.wait(attempt * 0.5):
                        log.error("alert %s not delivered by %s: %s", alert.kind, name, failure(exc))
                        break

    def _send_email(self, alert: _Alert) -> None:
        target = self.config.email
        assert target is not None
        message = EmailMessage()
        message["Subject"] = f"[deferq] {alert.subject}"
        message["From"] = target.sender
        message["To"] = ", ".join(target.recipients)
        message.set_content(_email_body(alert, self.source))
        with _GuardedSMTP(self._policy(), target.host, target.port, DELIVERY_TIMEOUT) as smtp:
            if target.starttls:
                smtp.starttls()
            if target.username:
                smtp.login(target.username, target.password or "")
            smtp.send_message(message)

    def _post_webhook(self, alert: _Alert) -> None:
        assert self.config.webhook is not None
        body = orjson.dumps(alert.payload(self.source), default=str)
        httpx = _httpx()
        from ..net.guarded import SyncGuardedTransport  # httpx is the alerts extra's

        transport = SyncGuardedTransport(self._policy())
        with httpx.Client(transport=transport, trust_env=False, follow_redirects=False) as client:
            response = client.post(
                self.config.webhook, content=body, timeout=DELIVERY_TIMEOUT,
                headers={"content-type": "application/json", "user-agent": "deferq-alerts"},
            )
        if not 200 <= response.status_code < 300:
            raise _Answered(response.status_code)


class _Answered(Exception):
    """A webhook receiver answered with a status that is not 2xx."""

    def __init__(self, status: int) -> None:
        super().__init__(f"answered HTTP {status}")


class _GuardedSMTP(smtplib.SMTP):
    """smtplib's client, connected only to an address the network policy allows."""

    def __init__(self, policy: netpolicy.Policy, host: str, port: int, timeout: float) -> None:
        self._network_policy = policy
        super().__init__(host, port, timeout=timeout)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        return netpolicy.connect(self._network_policy, host, port, timeout)


def failure(exc: BaseException) -> str:
    """Why a delivery failed, in deferq's own words: never the other side's text (an
    SMTP reply, a line that is not HTTP), which would turn a test alert into a way to
    read what answers on any address and port."""
    if isinstance(exc, netpolicy.Refused):
        return f"refused by the network policy: {exc}"
    if isinstance(exc, _Answered):
        return str(exc)
    if isinstance(exc, smtplib.SMTPResponseException):
        if exc.smtp_code < 0:
            return "connection failed: the other side does not answer SMTP"
        return f"the SMTP server answered {exc.smtp_code}"
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return "connection failed: the other side closed the connection"
    if isinstance(exc, smtplib.SMTPException):
        return f"SMTP failed ({type(exc).__name__})"
    kind = type(exc).__name__  # httpx's errors by name: httpx is an optional extra
    if isinstance(exc, TimeoutError) or kind.endswith("Timeout"):
        return f"connection failed: no answer within {DELIVERY_TIMEOUT:g}s"
    if kind in ("RemoteProtocolError", "LocalProtocolError", "DecodingError"):
        return "connection failed: the other side does not answer HTTP"
    if isinstance(exc, OSError) or kind in ("ConnectError", "ReadError", "WriteError"):
        # this side's words (errno, resolver, TLS library), not the other side's bytes
        text = getattr(exc, "strerror", None) or str(exc) or kind
        return f"connection failed: {ERRNO.sub('', text)[:160]}"
    return f"failed ({type(exc).__name__})"


def _email_body(alert: _Alert, source: str) -> str:
    lines = [alert.subject, ""]
    lines += [f"{key}: {value}" for key, value in alert.details.items()]
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(alert.at))
    lines += ["", f"kind: {alert.kind}", f"from: {source}", f"time: {when}"]
    if alert.suppressed:
        lines.append(f"({alert.suppressed} more alert(s) like this one were held back since the last one)")
    return "\n".join(lines) + "\n"


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise MissingExtra("alerts", "httpx", needed_by="webhook alerts") from None
    return httpx
