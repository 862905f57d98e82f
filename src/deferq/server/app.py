"""The ASGI application: routes, JSON errors for everything, request log and metrics."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..app import App
from . import logfiles
from .config import ServerConfig
from .errors import ApiError
from .metrics import CONTENT_TYPE, Metrics
from .openapi import document
from .routes import api_routes
from .service import Service
from .web import JSON, service_of

request_log = logging.getLogger(logfiles.REQUEST_LOG)
error_log = logging.getLogger(logfiles.ERROR_LOG)


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSON(exc.body(), exc.status, headers=exc.headers)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no such route) and 405 (wrong method), as JSON."""
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSON({"error": {"code": code, "message": str(exc.detail)}}, exc.status_code,
                headers=exc.headers)  # fmt: skip


async def internal_error(request: Request, exc: Exception) -> Response:
    error_log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
    return JSON({"error": {"code": "internal", "message": "the server failed; see its error log"}},
                500)  # fmt: skip


async def openapi(request: Request) -> Response:
    return JSON(document())


async def metrics(request: Request) -> Response:
    body = await asyncio.to_thread(service_of(request).metrics.render)
    return Response(body, media_type=CONTENT_TYPE)


class Observe:
    """Pure ASGI middleware (cheap on the hot path): metrics and the request log."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            seconds = time.perf_counter() - started
            endpoint = scope.get("endpoint")
            route = getattr(endpoint, "__name__", "unmatched")
            self.metrics.observe(scope["method"], route, status, seconds)
            if not request_log.disabled:
                client = scope.get("client")
                request_log.info(
                    "%s %s %d", scope["method"], scope["path"], status,
                    extra={"method": scope["method"], "path": scope["path"], "route": route,
                           "status": status, "duration_ms": round(seconds * 1000, 2),
                           "client": client[0] if client else None},
                )  # fmt: skip


def create_app(config: ServerConfig | None = None, app: App | None = None) -> Starlette:
    """The HTTP service for `config`; `app` (optional) supplies the store and task defaults."""
    config = config or ServerConfig()
    logfiles.route(logfiles.REQUEST_LOG, config.request_log)
    logfiles.route(logfiles.ERROR_LOG, config.error_log)
    service = Service(config, app)
    routes = [*api_routes(), Route("/openapi.json", openapi, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"]), *_dashboard_routes()]  # fmt: skip

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        service.close()

    starlette = Starlette(
        routes=routes,
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: internal_error},
        lifespan=lifespan,
    )
    starlette.state.service = service
    starlette.add_middleware(Observe, metrics=service.metrics)
    return starlette


def _dashboard_routes() -> list[Route]:
    try:
        from .dashboard import routes
    except ImportError:
        return []
    return routes()


def create_app_from_env() -> Starlette:
    """The factory each `deferq serve --workers N` process calls."""
    return create_app(ServerConfig.from_env())

