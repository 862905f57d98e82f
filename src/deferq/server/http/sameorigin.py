"""What `deferq serve --no-auth` refuses so that a web page cannot drive it.

Without tokens, anything that reaches the port may use the API, and a browser on the
same machine reaches a loopback port for any web page it opens. So, with auth off:

- the Host must be a loopback name or address (localhost, 127.0.0.0/8, [::1]) or one the
  operator allowed (--allowed-host): a page on a name that its DNS later points at
  127.0.0.1 (DNS rebinding) sends its own name, and is refused (421);
- an Origin, when sent, must be this server's own (http://<the Host>): browsers send it
  on every cross-site request that is not a GET or HEAD (403);
- a request with a body must say Content-Type: application/json: the types a page may
  send without asking first (text/plain, forms, none) are refused (415).

The console's own pages are same-origin and send JSON, so none of this touches them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ...net.policy import literal_address
from .errors import ApiError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback(name: str) -> bool:
    """Whether a host name (no port, no brackets) is a loopback name or address."""
    if name.lower().rstrip(".") in LOOPBACK_NAMES:
        return True
    address = literal_address(name)
    return address is not None and address.is_loopback


def host_name(host: str) -> str | None:
    """The name in a Host header ("[::1]:8088" -> "::1"), or None when it is malformed."""
    try:
        return urlsplit(f"//{host}").hostname
    except ValueError:
        return None


class SameOrigin:
    """Judges each request of a server without auth; `allowed` are the extra host names."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self.allowed = frozenset(name.lower().strip("[]") for name in allowed)

    def refusal(self, scope: Mapping[str, Any], headers: dict[bytes, bytes]) -> ApiError | None:
        """Why this request is refused (an ApiError to answer), or None."""
        host = headers.get(b"host", b"").decode("latin-1")
        name = host_name(host)
        if not name or not (is_loopback(name) or name.lower() in self.allowed):
            return ApiError(421, "misdirected", (
                f"this server runs without auth (--no-auth) and answers only requests for localhost, "
                f"127.0.0.1 or [::1] (or a name given with --allowed-host), not for {host!r:.100}"))
        origin = headers.get(b"origin")
        own = f"{scope.get('scheme', 'http')}://{host}".lower()
        if origin is not None and origin.decode("latin-1").lower() != own:
            return ApiError(403, "cross_origin", (
                f"this server runs without auth (--no-auth) and refuses requests from other web pages: "
                f"Origin {origin.decode('latin-1')!r:.100} is not {own}"))
        if scope.get("method") not in SAFE_METHODS and _has_body(headers):
            media = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
            if media != "application/json":
                return ApiError(415, "unsupported_media_type", (
                    "this server runs without auth (--no-auth) and takes request bodies only as "
                    f"Content-Type: application/json, not {media or 'none'}, so that no web page can send "
                    "them as a form or plain text"))
        return None


def _has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length")
    return b"transfer-encoding" in headers or b"content-type" in headers or (
        length is not None and length.strip() not in (b"", b"0"))
