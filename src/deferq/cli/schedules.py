"""`deferq schedule list|add|pause|resume|remove|run-now`: the store's schedules at run time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import orjson

from ..app import App
from ..errors import ConfigError
from ..observe.output import aligned, print_json
from ..schedules.definition import MISSED, make_schedule
from ..schedules.store import SCHEDULES, Schedules
from ..schedules.timing import local_time
from ..upkeep.leader import current_leader

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def json_value(text: str | None, kind: type, what: str) -> Any:
    if text is None:
        return kind()
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise click.BadParameter(f"is not JSON: {text!r}", param_hint=what) from None
    if not isinstance(value, kind):
        raise click.BadParameter(f"must be a JSON {'list' if kind is list else 'object'}", param_hint=what)
    return value


def remove(schedules: Schedules, name: str) -> None:
    if not schedules.remove(name):
        raise KeyError(name)


def print_listing(app: App, as_json: bool) -> None:
    """`deferq schedule list`: each schedule, each stored record that cannot be fired, the leader."""
    now = app.backend.now()
    found, broken = app.schedules.scan()
    leader = current_leader(app.backend)
    if as_json:
        print_json({"schedules": [info.to_dict(now) for info in found],
                    "broken": [record.to_dict() for record in broken], "leader": leader})
        return
    for record in broken:
        click.echo(f"{record.name}  BROKEN, not fired: {record.problem}")
    if not found and not broken:
        click.echo("no schedules: declare them with @app.periodic or add one with `deferq schedule add`")
        return
    rows: list[tuple[str, ...]] = [("name", "timing", "task", "from", "next", "last")]
    for info in found:
        upcoming = info.upcoming(now, 1)
        state = "paused" if info.paused else local_time(upcoming[0], info.schedule.tz)
        last = local_time(info.last_tick, info.schedule.tz) if info.last_tick else "never fired"
        rows.append((info.name, info.schedule.timing.label(), info.schedule.task, info.source, state, last))
    for line in aligned(rows):
        click.echo(line)
    click.echo(f"fired by {leader}" if leader else "no process fires schedules now: start a worker")


def schedule_group(existing_store: Decorator, any_store: Decorator) -> click.Group:
    """The `deferq schedule` commands, given the CLI's store options (cli/main.py)."""

    @click.group()
    def schedule() -> None:
        """Schedules: list, add or change, pause, resume, remove, run one now (docs/schedules.md)."""

    @schedule.command("list")
    @existing_store
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    def schedule_list(app: App, as_json: bool) -> None:
        """Every schedule: timing, state, where it was declared, next tick and last run."""
        print_listing(app, as_json)

    @schedule.command("add")
    @any_store
    @click.argument("name")
    @click.argument("task")
    @click.option("--cron", help='Cron expression, e.g. "0 9 * * 1-5"; six fields: seconds first '
                                 '("*/10 * * * * *").')
    @click.option("--every", type=float, help="Seconds between ticks (at least 1), instead of --cron.")
    @click.option("--tz", help="Time zone of --cron, e.g. Europe/Berlin (default UTC).")
    @click.option("--jitter", type=float, default=0.0, help="Delay each tick's job by up to this many seconds.")
    @click.option("--missed", type=click.Choice(MISSED), default="skip", show_default=True,
                  help="Ticks missed while no process fired schedules: none, the newest, or all.")
    @click.option("--args", "args_json", help="Positional arguments as a JSON list.")
    @click.option("--kwargs", "kwargs_json", help="Keyword arguments as a JSON object.")
    @click.option("--queue", help="Queue of the jobs (default: the task's).")
    @click.option("--priority", type=click.Choice(["high", "normal", "low"]))
    @click.option("--max-attempts", type=int)
    @click.option("--timeout", type=float, help="Seconds an attempt may run.")
    def schedule_add(app: App, name: str, task: str, cron: str | None, every: float | None, tz: str | None,
                     jitter: float, missed: str, args_json: str | None, kwargs_json: str | None,
                     queue: str | None, priority: str | None, max_attempts: int | None,
                     timeout: float | None) -> None:
        """Add a schedule, or change the one of that name (its paused state and last run
        kept). It fires without any restart."""
        options = {key: value for key, value in (("queue", queue), ("priority", priority),
                                                 ("max_attempts", max_attempts), ("timeout", timeout))
                   if value is not None}
        try:
            made = make_schedule(name, task, json_value(args_json, list, "--args"),
                                 json_value(kwargs_json, dict, "--kwargs"), cron=cron, every=every, tz=tz,
                                 jitter=jitter, missed=missed, **options)
            existed = bool(app.backend.kv_get(SCHEDULES, name))  # a broken record is replaced
            info = app.schedules.put(made, "api")
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from None
        upcoming = ", ".join(local_time(t, tz) for t in info.upcoming(app.backend.now(), 3))
        click.echo(f"{'changed' if existed else 'added'} schedule {name}: {made.timing.label()}; "
                   f"next {upcoming}")

    def named(action: str, doc: str, act: Callable[[Schedules, str], Any], said: Callable[[Any], str]) -> None:
        @existing_store
        @click.argument("name")
        def command(app: App, name: str) -> None:
            try:
                done = act(app.schedules, name)
            except KeyError:
                raise click.ClickException(f"no schedule named {name!r}") from None
            except ConfigError as exc:  # its stored record cannot be read
                raise click.ClickException(str(exc)) from None
            click.echo(said(done).format(name=name))

        command.__doc__ = doc
        schedule.command(action)(command)

    named("pause", "Stop firing a schedule (kept in the store until resumed).", Schedules.pause,
          lambda changed: "paused schedule {name}" if changed else "schedule {name} was already paused")
    named("resume", "Fire a paused schedule again, from now (its paused ticks are not missed runs).",
          Schedules.resume,
          lambda changed: "resumed schedule {name}" if changed else "schedule {name} was not paused")
    named("remove", "Delete a schedule (one still declared in code comes back at the next start).",
          remove, lambda _: "removed schedule {name}")
    named("run-now", "Enqueue a schedule's job now, outside its ticks.", Schedules.run_now,
          lambda job: f"enqueued {job.id} from schedule {{name}}")
    return schedule
