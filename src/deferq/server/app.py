"""The ASGI application: routes, JSON errors for everything, request log and metrics."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from ..app import App
from .api import flow as flow_api
from .api import history as history_api
from .api import load as load_api
from .api import schedules as schedules_api
from .api.openapi import document, requests_kept_exactly
from .api.routes import PRODUCER, api_routes, create_job, enqueue_job
from .console import models as console_models
from .console.page import routes as dashboard_routes
from .console.routes import paths as console_paths
from .console.routes import routes as console_routes
from .http import logfiles
from .http.config import ServerConfig
from .http.errors import ApiError, Invalid
from .http.overload import BUSY_MESSAGES
from .http.sameorigin import SameOrigin
from .process.metrics import CONTENT_TYPE
from .process.service import Service
from .process.web import JSON, check_token, decode_json, read_body, service_of, too_large

request_log = logging.getLogger(logfiles.REQUEST_LOG)
error_log = logging.getLogger(logfiles.ERROR_LOG)
INTERNAL = {"error": {"code": "internal", "message": "the server failed; see its error log"}}
# No name, id or filter holds NUL (nothing stored does: bodies.py), and PostgreSQL refuses it.
NUL_IN_URL = Invalid("the URL holds the NUL character (%00), which no name, id or filter of deferq holds")


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSON(exc.body(), exc.status, headers=exc.headers)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no such route) and 405 (wrong method), as JSON."""
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSON({"error": {"code": code, "message": str(exc.detail)}}, exc.status_code,
                headers=exc.headers)


async def internal_error(request: Request, exc: Exception) -> Response:
    error_log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
    return JSON(INTERNAL, 500)


@functools.cache
def full_document() -> dict[str, Any]:
    """The API's document with the console's routes (kept apart: console/routes.py imports openapi)."""
    base = document((*console_models.MODELS, *load_api.MODELS, *flow_api.MODELS))
    paths = {**base["paths"], **console_paths(), **history_api.paths(), **schedules_api.paths(),
             **load_api.paths(), **flow_api.paths()}
    return requests_kept_exactly({**base, "paths": paths})


async def openapi(request: Request) -> Response:
    return JSON(full_document())


async def metrics(request: Request) -> Response:
    return Response(await service_of(request).metrics.scrape(), media_type=CONTENT_TYPE)


async def _chunks(receive: Receive, first: bytes) -> AsyncIterator[bytes]:
    yield first
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return  # the client went away
        yield message.get("body", b"")
        if not message.get("more_body"):
            return


async def _body(receive: Receive, declared: bytes | None, limit: int) -> bytes:
    """The request body; a small body comes in one message, read without a generator."""
    length = declared.decode("latin-1") if declared is not None else None
    message = await receive()
    body: bytes = message.get("body", b"")
    if message.get("more_body") or (length is not None and length.isdigit() and int(length) > limit):
        return await read_body(_chunks(receive, body), length, limit)
    if len(body) > limit:
        raise too_large(limit)
    return body


async def send_json(send: Send, status: int, answer: Any, headers: dict[str, str]) -> None:
    """Answer with JSON straight through ASGI (no Response object)."""
    payload = orjson.dumps(answer)
    head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    head += [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": payload})


class Front:
    """The outermost ASGI layer: metrics and the request log for every request, and a
    fast lane for POST /v1/jobs, the one hot route, which skips Starlette's layers
    (routing, two exception middlewares, Request and Response objects) but runs the
    same code for auth, body limits, JSON and enqueueing as every other route."""

    def __init__(self, starlette: Starlette, service: Service) -> None:
        self.starlette = starlette
        self.service = service
        self.state = starlette.state
        self.admission = service.admission
        retry_after = {"Retry-After": str(service.config.retry_after)}
        self.busy = {reason: ApiError(503, "busy", message, retry_after)
                     for reason, message in BUSY_MESSAGES.items()}
        # without tokens, refuse what a web page in a browser could send (sameorigin.py)
        self.guard = None if service.config.auth else SameOrigin(service.config.allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.starlette(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        # what the server reports of its own load is never made to wait behind that load
        counted = scope["path"].startswith("/v1/") and scope["path"] != load_api.PATH
        try:
            refused = self.guard and self.guard.refusal(scope, dict(scope["headers"]))
            if refused:
                counted = False
                await send_json(send_and_note, refused.status, refused.body(), refused.headers)
                return
            if counted and not self.admission.try_enter():
                shed = await self.admission.wait_turn()  # S3-4: refused at once, or waits its turn
                if shed is not None:
                    counted = False  # answered without the store
                    busy = self.busy[shed]
                    await send_json(send_and_note, busy.status, busy.body(), busy.headers)
                    return
            if "\0" in scope["path"] or b"%00" in scope["query_string"]:
                await send_json(send_and_note, NUL_IN_URL.status, NUL_IN_URL.body(), {})
            elif scope["path"] == "/v1/jobs" and scope["method"] == "POST" and not scope["query_string"]:
                scope["endpoint"] = create_job
                await self.enqueue(scope, receive, send_and_note)
            else:
                await self.starlette(scope, receive, send_and_note)
        finally:
            if counted:
                self.admission.leave()
            self.note(scope, status, time.perf_counter() - started)

    async def enqueue(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        extra: dict[str, str] = {}
        try:
            authorization = headers.get(b"authorization", b"").decode("latin-1")
            await check_token(self.service, authorization, PRODUCER)
            body = await _body(receive, headers.get(b"content-length"), self.service.config.max_body)
            status, answer = await enqueue_job(self.service, decode_json(body))
        except ApiError as exc:
            status, answer, extra = exc.status, exc.body(), exc.headers
        except Exception as exc:  # noqa: BLE001 - answered as JSON like every other route
            error_log.error("POST /v1/jobs failed: %s", exc, exc_info=exc)
            status, answer = 500, INTERNAL
        await send_json(send, status, answer, extra)

    def note(self, scope: Scope, status: int, seconds: float) -> None:
        endpoint = scope.get("endpoint")
        route = getattr(endpoint, "__name__", "unmatched")
        self.service.metrics.observe(scope["method"], route, status, seconds)
        if not request_log.disabled:
            client = scope.get("client")
            request_log.info(
                "%s %s %d", scope["method"], scope["path"], status,
                extra={"method": scope["method"], "path": scope["path"], "route": route,
                       "status": status, "duration_ms": round(seconds * 1000, 2),
                       "client": client[0] if client else None},
            )


def create_app(config: ServerConfig | None = None, app: App | None = None) -> Front:
    """The HTTP service for `config`; `app` (optional) supplies the store and task defaults."""
    config = config or ServerConfig()
    logfiles.route(logfiles.REQUEST_LOG, config.request_log)
    logfiles.route(logfiles.ERROR_LOG, config.error_log)
    service = Service(config, app)
    routes = [*api_routes(), *console_routes(), *history_api.routes(), *schedules_api.routes(),
              *load_api.routes(), *flow_api.routes(), Route("/openapi.json", openapi, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"]), *dashboard_routes()]

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if config.schedules:
            service.start_upkeep()  # which declares the App's schedules first
        elif service.app.periodic_jobs:
            await service.declare_schedules()
        yield
        service.close()

    starlette = Starlette(
        routes=routes,
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: internal_error},
        lifespan=lifespan,
    )
    starlette.state.service = service
    return Front(starlette, service)




def create_app_from_env() -> Front:
    """The factory each `deferq serve --workers N` process calls."""
    return create_app(ServerConfig.from_env())

