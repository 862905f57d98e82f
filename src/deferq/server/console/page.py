"""The operator console: one HTML page for every /dashboard/ URL (the browser picks the
view from the path, so deep links and reloads work), and its scripts, styles and the
chart library under /dashboard/static/, shipped inside the package (no CDN).

Every answer carries a strict Content-Security-Policy: scripts and styles only from
this server (no inline code), requests only to this server, no frames, and Trusted Types
required, so the page cannot turn a string into HTML (the console sets every value from
the API as text). The console reads and acts through the documented /v1 API only.
"""

from __future__ import annotations

import functools
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

BASE = "/dashboard"
CSP = "; ".join([
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self'", "connect-src 'self'",
    "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
    "require-trusted-types-for 'script'", "trusted-types 'none'",
])
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-cache",  # revalidate (cheap: ETag) so an upgrade shows at once
}


@functools.cache
def page() -> str:
    return resources.files(__package__).joinpath("static/console.html").read_text("utf-8")


async def console(request: Request) -> HTMLResponse:
    return HTMLResponse(page(), headers=HEADERS)


async def to_console(request: Request) -> Response:
    return RedirectResponse(f"{BASE}/", status_code=307)


class Static:
    """The package's static files, with the console's headers on every answer."""

    def __init__(self) -> None:
        self.files = StaticFiles(packages=[(__package__ or "deferq.server", "static")])
        self.headers = [(name.encode(), value.encode()) for name, value in HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.headers]
            await send(message)

        await self.files(scope, receive, send_with_headers)


def routes() -> list[BaseRoute]:
    return [
        Route("/", to_console, methods=["GET"]),
        Route(BASE, console, methods=["GET"]),
        Mount(f"{BASE}/static", app=Static()),
        Route(BASE + "/{view:path}", console, methods=["GET"]),
    ]
