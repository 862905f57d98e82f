"""/v1/schedules: the store's schedules, read by readers and changed by admins at run time
(deferq/schedules/store.py); a change is fired without any restart (schedules/firing.py)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from ...errors import ConfigError
from ...schedules.definition import make_schedule
from ...schedules.store import SCHEDULES, ScheduleInfo, Schedules
from ...upkeep.leader import current_leader
from ..http import fields
from ..http.errors import Invalid, not_found
from ..process.service import Service
from ..process.web import JSON, read_json
from . import models
from .jobs import option_values
from .openapi import answer, operation, path_param, ref
from .routes import ADMIN, READER, Handler, by_method, store_route


def view(service: Service, info: ScheduleInfo, now: float) -> dict[str, Any]:
    """A schedule as the API shows it: its definition, state, next five ticks, last run."""
    job = service.backend.get(info.last_job) if info.last_job else None
    return {**info.to_dict(now), "last_job": None if job is None else {"id": job.id, "state": str(job.state)}}


def listing(service: Service, now: float) -> dict[str, Any]:
    """Every schedule, the stored records that cannot be fired, and who fires them now
    (GET /v1/schedules, the console's /v1/periodic)."""
    found, broken = Schedules(service.app).scan()
    return {"schedules": [view(service, info, now) for info in found],
            "broken": [record.to_dict() for record in broken], "leader": current_leader(service.backend)}


def _list(service: Service) -> dict[str, Any]:
    return listing(service, service.backend.now())


def _name(name: str) -> str:
    if not name or "/" in name or "\x00" in name or len(name) > 200:
        raise Invalid("a schedule's name is 1-200 characters, without / or NUL")
    return name


def _found(service: Service, name: str) -> ScheduleInfo:
    try:
        info = Schedules(service.app).get(name)
    except ConfigError as exc:  # a stored record that cannot be read: it says so (PUT or DELETE mends it)
        raise Invalid(str(exc)) from None
    if info is None:
        raise not_found(f"schedule {name!r}")
    return info


@store_route(READER)
async def list_schedules(service: Service) -> JSON:
    return JSON(await service.store(_list, service))


@store_route(READER)
async def get_schedule(service: Service, name: str) -> JSON:
    name = _name(name)

    def read() -> dict[str, Any]:
        return view(service, _found(service, name), service.backend.now())

    return JSON(await service.store(read))


@store_route(ADMIN)
async def put_schedule(service: Service, request: Request, name: str) -> JSON:
    """Add or change a schedule (201 when new); its paused state and last run are kept."""
    name = _name(name)
    data = await read_json(request)
    every = isinstance(data, dict) and data.get("every") is not None
    if every and data.get("cron") is not None:
        raise Invalid("a schedule takes either cron or every, not both")
    asked: Any = fields.parse(models.EverySchedule if every else models.CronSchedule, data, "a schedule")
    try:
        schedule = make_schedule(name, asked.task, asked.args or [], asked.kwargs or {},
                                 cron=getattr(asked, "cron", None), every=getattr(asked, "every", None),
                                 tz=getattr(asked, "tz", None), jitter=asked.jitter or 0.0,
                                 missed=asked.missed or "skip", **option_values(asked))
    except ConfigError as exc:
        raise Invalid(str(exc)) from None

    def put() -> tuple[dict[str, Any], bool]:
        schedules = Schedules(service.app)
        new = service.backend.kv_get(SCHEDULES, name) is None  # a broken record is replaced
        try:
            info = schedules.put(schedule, "api")
        except ConfigError as exc:
            raise Invalid(str(exc)) from None
        return view(service, info, service.backend.now()), new

    shown, new = await service.store(put)
    return JSON(shown, 201 if new else 200)


@store_route(ADMIN)
async def delete_schedule(service: Service, name: str) -> JSON:
    name = _name(name)
    if not await service.store(Schedules(service.app).remove, name):
        raise not_found(f"schedule {name!r}")
    return JSON({"deleted": name})


def _pausing(paused: bool) -> Handler:
    @store_route(ADMIN)
    async def handler(service: Service, name: str) -> JSON:
        name = _name(name)

        def change() -> dict[str, Any]:
            schedules = Schedules(service.app)
            _found(service, name)
            try:
                schedules.pause(name) if paused else schedules.resume(name)
            except KeyError:
                raise not_found(f"schedule {name!r}") from None
            return view(service, _found(service, name), service.backend.now())

        return JSON(await service.store(change))

    handler.__name__ = "pause_schedule" if paused else "resume_schedule"
    return handler


@store_route(ADMIN)
async def run_schedule_now(service: Service, name: str) -> JSON:
    """Enqueue the schedule's job now, outside its ticks."""
    name = _name(name)

    def run() -> dict[str, Any]:
        _found(service, name)
        job = Schedules(service.app).run_now(name)
        return {"id": job.id, "state": str(job.state)}

    return JSON(await service.store(run), 201)


ROUTES: dict[str, dict[str, Handler]] = {
    "/v1/schedules": {"GET": list_schedules},
    "/v1/schedules/{name}": {"GET": get_schedule, "PUT": put_schedule, "DELETE": delete_schedule},
    "/v1/schedules/{name}/pause": {"POST": _pausing(True)},
    "/v1/schedules/{name}/resume": {"POST": _pausing(False)},
    "/v1/schedules/{name}/run-now": {"POST": run_schedule_now},
}


def routes() -> list[Route]:
    return [Route(path, by_method(handlers, paths), methods=list(handlers)) for path, handlers in ROUTES.items()]


def paths() -> dict[str, Any]:
    name = [path_param("name", models.SCHEDULE_NAME)]
    one = {"200": answer("The schedule", ref("Schedule"))}
    return {
        "/v1/schedules": {"get": operation(
            "The store's schedules: next ticks, last run, state; and who fires them now", "reader",
            {"200": answer("The schedules", ref("ScheduleList"))}, errors=("503",))},
        "/v1/schedules/{name}": {
            "get": operation("A schedule", "reader", one, params=name),
            "put": operation("Add or change a schedule; it fires without a restart", "admin",
                             {**one, "201": answer("Added", ref("Schedule"))}, body=ref("ScheduleRequest"),
                             params=name, errors=("400", "413", "422", "503")),
            "delete": operation("Remove a schedule", "admin", {"200": answer("Removed", ref("Deleted"))},
                                params=name),
        },
        "/v1/schedules/{name}/pause": {"post": operation("Stop firing a schedule", "admin", one, params=name)},
        "/v1/schedules/{name}/resume": {"post": operation(
            "Fire a paused schedule again, from now", "admin", one, params=name)},
        "/v1/schedules/{name}/run-now": {"post": operation(
            "Enqueue the schedule's job now, outside its ticks", "admin",
            {"201": answer("The job", ref("JobStateAnswer"))}, params=name)},
    }
