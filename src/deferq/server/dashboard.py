"""The dashboard: one static page at / that polls GET /v1/queues (no build step)."""

from __future__ import annotations

import functools
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route


@functools.cache
def page() -> str:
    return resources.files(__package__).joinpath("static/dashboard.html").read_text("utf-8")


async def dashboard(request: Request) -> HTMLResponse:
    return HTMLResponse(page())


def routes() -> list[Route]:
    return [Route("/", dashboard, methods=["GET"])]
