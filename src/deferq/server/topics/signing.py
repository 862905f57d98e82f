"""Signed callbacks: every delivery carries an HMAC-SHA256 of timestamp + "." + body.

A receiver checks a request with the topic's signing secret:

    from deferq.server.topics.signing import verify
    ok = verify(secret, body_bytes, request.headers["X-Deferq-Timestamp"],
                request.headers["X-Deferq-Signature"])

The signature is "v1=" + the hex HMAC; the timestamp is integer epoch seconds. A
signature older (or newer) than `tolerance` seconds is refused, so a captured request
cannot be replayed later. This module needs nothing but the standard library, so a
receiver can copy the idea to any language: HMAC-SHA256(secret, f"{timestamp}.{body}").
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

TIMESTAMP_HEADER = "X-Deferq-Timestamp"
SIGNATURE_HEADER = "X-Deferq-Signature"
VERSION = "v1"
DEFAULT_TOLERANCE = 300.0  # seconds


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(24)


def signature(secret: str, timestamp: int | str, body: bytes) -> str:
    message = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return f"{VERSION}={digest}"


def sign(secret: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """The headers that sign `body` now."""
    timestamp = int(time.time() if now is None else now)
    return {TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signature(secret, timestamp, body)}


def verify(
    secret: str,
    body: bytes,
    timestamp: str | None,
    signature_header: str | None,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether a request was signed with `secret` within `tolerance` seconds of now."""
    if not timestamp or not signature_header or not timestamp.isdigit():
        return False
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > tolerance:
        return False
    expected = signature(secret, timestamp, body)
    return hmac.compare_digest(expected.encode(), signature_header.strip().encode())
