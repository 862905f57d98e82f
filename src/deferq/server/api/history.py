"""GET /v1/stats/history: the per-minute history the store keeps (deferq/observe/history.py), the
same on every server instance and across restarts; the console's charts draw it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from msgspec import UNSET
from starlette.requests import Request
from starlette.routing import Route

from ...observe import history
from ..http import fields
from ..process.web import JSON
from . import models
from .openapi import answer, operation, query, ref
from .routes import READER, Handler, by_method, store_route

if TYPE_CHECKING:
    from ..process.service import Service

MAX_POINTS = 360  # points per answer when no step is asked for


@store_route(READER)
async def stats_history(service: Service, request: Request) -> JSON:
    ask = fields.parse_query(models.HistoryQuery, dict(request.query_params))
    step = ask.step if ask.step is not UNSET else max(1, math.ceil(ask.minutes / MAX_POINTS))
    queue = None if ask.queue is UNSET else ask.queue
    task = None if ask.task is UNSET else ask.task
    return JSON(await service.store(history.read, service.backend, ask.minutes, step, queue, task))


ROUTES: dict[str, dict[str, Handler]] = {"/v1/stats/history": {"GET": stats_history}}


def routes() -> list[Route]:
    return [Route(path, by_method(handlers, paths), methods=list(handlers)) for path, handlers in ROUTES.items()]


def paths() -> dict[str, Any]:
    return {
        "/v1/stats/history": {"get": operation(
            "Per-minute counts and wait / run percentiles of a queue, a task, or all", "reader",
            {"200": answer("The history", ref("History"))}, params=query(models.HistoryQuery),
            errors=("422", "503"))},
    }
