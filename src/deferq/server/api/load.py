"""GET /v1/server: how loaded the server processes are (S3-4): requests in flight and
waiting for a slot, those answered busy, and the settings that decide it. The console's
overview shows it. It is never made to wait behind the load it reports (app.py)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from msgspec import Struct
from starlette.routing import Route

from ..http.overload import SHED_REASONS
from ..process.metrics import MULTIPROCESS_ENV, SHED, WAITING
from ..process.web import JSON
from .openapi import answer, operation, ref
from .routes import READER, Handler, by_method, store_route

if TYPE_CHECKING:
    from ..process.service import Service

PATH = "/v1/server"


class ServerLoad(Struct):
    overload: str  # "refuse" or "shed-oldest"
    max_inflight: int | None
    max_waiting: int
    max_wait: float | None
    inflight: int  # in the process that answered
    waiting: int  # summed over the server's processes
    shed: dict[str, int]  # answered busy since start, by reason, summed over the processes
    pid: int


def summed(directory: str) -> tuple[int, dict[str, int]]:
    """Requests waiting now and those answered busy, over every process's metric files."""
    from ...worker.metric_files import summed_registry

    waiting, shed = 0.0, dict.fromkeys(SHED_REASONS, 0)
    for family in summed_registry(directory).collect():
        for sample in family.samples:
            if sample.name == WAITING:
                waiting += sample.value
            elif sample.name == f"{SHED}_total":
                reason = sample.labels.get("reason", "")
                shed[reason] = shed.get(reason, 0) + int(sample.value)
    return int(waiting), shed


@store_route(READER)
async def server_load(service: Service) -> JSON:
    config, admission = service.config, service.admission
    waiting, shed = len(admission.waiting), dict(service.metrics.shed_counts)
    directory = os.environ.get(MULTIPROCESS_ENV)
    if directory:
        waiting, shed = summed(directory)
    return JSON({"overload": config.overload, "max_inflight": config.max_inflight,
                 "max_waiting": config.max_waiting, "max_wait": config.max_wait,
                 "inflight": admission.inflight, "waiting": waiting, "shed": shed, "pid": os.getpid()})


ROUTES: dict[str, dict[str, Handler]] = {PATH: {"GET": server_load}}
MODELS = (ServerLoad,)


def routes() -> list[Route]:
    return [Route(path, by_method(handlers, paths), methods=list(handlers)) for path, handlers in ROUTES.items()]


def paths() -> dict[str, Any]:
    return {
        PATH: {"get": operation(
            "The server's load: requests in flight and waiting for a slot, those answered busy",
            "reader", {"200": answer("The load", ref("ServerLoad"))}, errors=())},
    }
