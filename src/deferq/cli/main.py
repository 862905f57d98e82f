"""The `deferq` command line. Every command takes --url and --app, like uvicorn or celery.

Text output is for people (times as ISO 8601 with "in 4 min" / "2 h ago", tables that fit
the terminal, 80 columns when it is not one); `--json` is for programs (epoch seconds).
Every command's --help ends with the environment variables it reads and an example, both
built by `document()` from ENV_HELP, ENV_READ and EXAMPLES below.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import click
import orjson

from ..app import App
from ..backends.base import Resharding, TopologyRefused
from ..backends.search import SCHEDULED_KINDS, JobQuery, find_retrying
from ..encryption.jobs import shown_dict
from ..errors import ConfigError
from ..job import Job, JobState
from ..observe.logs import setup_logging
from ..observe.output import clip, job_lines, last_error_line, print_json, say, when, width
from ..server.http.auth import SCOPES
from ..server.http.overload import OVERLOADS, Overload
from ..steps.children import child_ids, place_of
from ..steps.events import shown_state, waiting_for
from ..values import format_duration
from .encryption import encryption_group
from .root import APP_META, UPKEEP_OPTION, command_name, main, store_options
from .run import no_create_option, run_command, status_command
from .schedules import schedule_group
from .steps import steps_group
from .worker import worker

STATE_COLUMNS = ("blocked", "scheduled", "queued", "active", "succeeded", "dead", "cancelled")
STATE_HEADERS = ("block", "sched", "queued", "active", "done", "dead", "cancel")  # fit 80 columns

# What each environment variable is, for the help of the commands that read it.
ENV_HELP = {
    "DEFERQ_URL": "the store URL, as --url",
    "DEFERQ_APP": "your App (module:attr), as --app",
    "DEFERQ_CALLBACK_POLICY": "outbound targets allowed (docs/http.md)",
    "DEFERQ_DELIVERY_LOG": "a file for the log of callback deliveries",
    "DEFERQ_DELIVERY_STATS_SECONDS": "seconds between delivery count updates",
    "DEFERQ_ALERTS": "the service's alert targets, as JSON",
    "PROMETHEUS_MULTIPROC_DIR": "where several processes' metrics are summed",
    "DEFERQ_ENCRYPTION_KEYS": "encryption keys: id:key,... (first writes)",
}
# Variables a command reads other than as an option's envvar (those are found by themselves).
DELIVERY_ENV = ("DEFERQ_CALLBACK_POLICY", "DEFERQ_DELIVERY_LOG", "DEFERQ_DELIVERY_STATS_SECONDS")
ENV_READ: dict[str, tuple[str, ...]] = {
    "worker": (*DELIVERY_ENV, "PROMETHEUS_MULTIPROC_DIR", "DEFERQ_ENCRYPTION_KEYS"),
    "run": ("DEFERQ_APP", "DEFERQ_URL", *DELIVERY_ENV, "DEFERQ_ENCRYPTION_KEYS"),
    "status": ("DEFERQ_URL",),
    "serve": ("DEFERQ_CALLBACK_POLICY", "DEFERQ_ALERTS", "PROMETHEUS_MULTIPROC_DIR", "DEFERQ_ENCRYPTION_KEYS"),
    "enqueue": ("DEFERQ_ENCRYPTION_KEYS",),
    "job": ("DEFERQ_ENCRYPTION_KEYS",),
    "encryption rotate": ("DEFERQ_ENCRYPTION_KEYS",),
}
EXAMPLE_ID = "06H03YF9DC6FKSQWZ4CWQYAW9G"
EXAMPLES = {
    "": "deferq worker --app tasks:app --queue email",
    "worker": "deferq worker --app tasks:app -q email -c 8 --tries 5 --delay 30",
    "enqueue": "deferq enqueue send_reset_email --app tasks:app --args '[42]' --delay 300",
    "job": f"deferq job {EXAMPLE_ID}",
    "cancel": f"deferq cancel {EXAMPLE_ID}",
    "run-now": f"deferq run-now {EXAMPLE_ID}",
    "retrying": "deferq retrying --queue payments",
    "stats": "deferq stats --url redis://127.0.0.1:6379/0 --watch",
    "event": "deferq event send payment user:42 --data '{\"amount\": 10}'",
    "event list": "deferq event list --json",
    "event send": "deferq event send payment user:42 --data '{\"amount\": 10}'",
    "remark": "deferq remark 06H0G30DX5YKGH6BGCZVYCJVWC 'refunded by support, ticket 4711'",
    "queue": "deferq queue pause email",
    "queue list": "deferq queue list --json",
    "queue pause": "deferq queue pause email",
    "jobs": "deferq jobs --tag tenant:7 --state dead",
    "limits": "deferq limits set send_sms --rate 50/s",
    "limits list": "deferq limits list --json",
    "limits set": "deferq limits set customer:7 --rate 10/s --concurrency 2",
    "limits pause": "deferq limits pause send_sms 30",
    "limits resume": "deferq limits resume send_sms",
    "limits clear": "deferq limits clear send_sms",
    "queue resume": "deferq queue resume email",
    "schedule": "deferq schedule list",
    "schedule list": "deferq schedule list --json",
    "schedule add": "deferq schedule add report send_report --cron '0 9 * * 1-5' --tz Asia/Tokyo",
    "schedule pause": "deferq schedule pause report",
    "schedule resume": "deferq schedule resume report",
    "schedule remove": "deferq schedule remove report",
    "schedule run-now": "deferq schedule run-now report",
    "steps": "deferq steps check --app tasks:app",
    "steps check": "deferq steps check --app tasks:app --json",
    "steps retry-from": f"deferq steps retry-from {EXAMPLE_ID} charge",
    "dead": "deferq dead list --queue email",
    "dead list": "deferq dead list --queue email --limit 10",
    "dead retry": "deferq dead retry --all",
    "dead purge": "deferq dead purge --older-than 604800",
    "migrate": "deferq migrate --url postgresql://app@127.0.0.1/app",
    "bench": "deferq bench --url redis://127.0.0.1:6379/0 --jobs 20000",
    "demo": "deferq demo",
    "run": "deferq run --config deferq.toml --app myproj.tasks:app",
    "status": "deferq status --url redis://127.0.0.1:6379/0",
    "serve": "deferq serve --url redis://127.0.0.1:6379/0 --port 8088 --workers 2",
    "shard": "deferq shard list --url 'redis+shards://10.0.0.1:6379/0,10.0.0.2:6379/0'",
    "shard list": "deferq shard list --json",
    "shard add": "deferq shard add 10.0.0.3:6379/0",
    "shard drain": "deferq shard drain 10.0.0.3:6379/0",
    "shard undrain": "deferq shard undrain 10.0.0.3:6379/0",
    "shard remove": "deferq shard remove 10.0.0.3:6379/0",
    "token": "deferq token create --scope producer --note shop",
    "token create": "deferq token create --scope producer --note shop",
    "token list": "deferq token list --url redis://127.0.0.1:6379/0",
    "token revoke": "deferq token revoke 1f0c2d9e",
    "encryption": "deferq encryption new-key",
    "encryption new-key": "deferq encryption new-key",
    "encryption rotate": "deferq encryption rotate --app tasks:app --json",
}


app_options = store_options()  # commands that may start a store: enqueue, migrate, pause, token create
#: commands that read or change what a store holds: on a missing store they refuse, making nothing
existing_store_options = store_options(lambda app: f"{command_name()} works on an existing store and makes none")


def print_job(job: Job, as_json: bool) -> None:
    if as_json:
        print_json(shown_dict(job))
    else:
        click.echo("\n".join(job_lines(shown_dict(job))))


@main.command()
@app_options
@click.argument("task")
@click.option("--args", "args_json", default="[]", help="JSON list of positional arguments.")
@click.option("--kwargs", "kwargs_json", default="{}", help="JSON object of keyword arguments.")
@click.option("--delay", type=float, default=None, help="Seconds from now.")
@click.option("--queue", default=None)
@click.option("--priority", type=click.Choice(["high", "normal", "low"]), default=None)
@click.option("--key", default=None, help="Unique key: no duplicate while one is unfinished.")
@click.option("--max-attempts", type=int, default=None)
@click.option("--timeout", type=float, default=None)
@click.option("--remark", default=None, help="Free text kept with the job for people.")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
def enqueue(app: App, task: str, args_json: str, kwargs_json: str, as_json: bool, **options: Any) -> None:
    """Enqueue TASK by name and print the job. With --app, TASK must be one of the app's
    tasks (and takes its defaults); without, any name goes."""
    named = click.get_current_context().meta.get(APP_META)
    if named and task not in app.tasks:
        raise click.BadParameter(unknown_task(named, task, sorted(app.tasks)), param_hint="TASK")
    try:
        args, kwargs = orjson.loads(args_json), orjson.loads(kwargs_json)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from None
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise click.BadParameter("--args must be a JSON list and --kwargs a JSON object")
    options = {k: v for k, v in options.items() if v is not None}
    try:
        job = app.enqueue(task, args, kwargs, **options)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    print_job(job, as_json)


def unknown_task(app_path: str, task: str, known: list[str], shown: int = 5) -> str:
    if not known:
        return f"the app {app_path} has no tasks, so none named {task!r}"
    listed = ", ".join(known[:shown]) + (f" and {len(known) - shown} more" if len(known) > shown else "")
    return f"the app {app_path} has no task {task!r}: its tasks are {listed}"


@main.command("job")
@existing_store_options
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times as epoch seconds).")
def show_job(app: App, job_id: str, as_json: bool) -> None:
    """Show one job (by id, or by key with key:NAME)."""
    job = app.get_by_key(job_id[4:]) if job_id.startswith("key:") else app.get(job_id)
    if job is None:
        raise click.ClickException(f"no job {job_id}")
    links = app.dependencies(job)
    steps = app.steps(job.id)
    if as_json:
        print_json({**shown_dict(job), **links, "steps": steps, "waiting_for": waiting_for(job, steps)})
        return
    click.echo("\n".join(job_lines({**shown_dict(job), "state": shown_state(job, steps)})))
    for label, ids in (("runs after", links["after"]), ("waited on by", links["waiting"]),
                       ("child jobs", child_ids(app.backend, job.id, 10) if steps else []),
                       ("child of", [place["id"]] if (place := place_of(job)) else [])):
        if ids:
            click.echo(f"{label + ':':<13} {', '.join(ids)}")
    for number, step in enumerate(steps, 1):
        click.echo(f"{'steps:' if number == 1 else '':<13} {number}. {step_line(step)}")


def step_line(step: dict[str, Any]) -> str:
    """One durable step of `deferq job`: its name, kind and state, and what it gave or awaits."""
    text = f"{step['name']} ({step['kind']}) {step['state']}"
    if step["state"] == "retrying":
        text += f": try {step['failures']} failed: {step['error'][:60]}"
    elif step["kind"] == "children":  # a gather: `deferq job CHILD-ID` shows each child
        text += f": {step['ended']} of {step['total']} child jobs ended" + (
            f", {step['failed']} failed" if step["failed"] else "")
    elif step["kind"] == "step":
        text += f" in {step['took']:.3f}s: {orjson.dumps(step['result']).decode()[:60]}"
        if step.get("undone"):  # its undo handler ran: the job ended dead or was cancelled
            text += f"; undo {step['undone']['state']}"
    elif step["state"] in ("sleeping", "waiting"):
        awaited = f"{step['event']} {step['key']} " if step["kind"] == "wait" else ""
        text += f": {awaited}until {when(step['until'])}"
    elif step["kind"] == "wait" and step["state"] == "done":
        text += f": {orjson.dumps(step['result']).decode()[:60]}"
    return text


@main.group()
def event() -> None:
    """Events for jobs waiting in job.wait_for(...)."""


@event.command("list")
@existing_store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def event_list(app: App, as_json: bool) -> None:
    """The events kept for jobs that wait for them later, newest first."""
    events = app.events()
    if as_json:
        print_json(events)
        return
    for sent in events:
        data = orjson.dumps(sent["data"]).decode()[:80]
        click.echo(f"{when(sent['at'])}  {sent['event']} {sent['key']}  {data}  (woke {sent['woke']})")
    if not events:
        click.echo("no events kept")


@event.command("send")
@existing_store_options
@click.argument("name")
@click.argument("key")
@click.option("--data", default="null", help="The event's data, as JSON.")
@click.option("--keep", type=float, default=7 * 86400.0, show_default=True,
              help="Seconds the event is kept for jobs that wait for it later.")
def event_send(app: App, name: str, key: str, data: str, keep: float) -> None:
    """Send event NAME for KEY: wake the jobs waiting for it."""
    try:
        value = orjson.loads(data)
    except ValueError as exc:
        raise click.BadParameter(f"--data is not JSON: {exc}") from None
    try:
        woken = app.send_event(name, key, value, keep)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    click.echo(f"sent {name} {key}: woke {woken} waiting job{'s' if woken != 1 else ''}")


@main.command()
@existing_store_options
@click.argument("job_id")
def cancel(app: App, job_id: str) -> None:
    """Cancel a waiting job, or ask a running one to stop."""
    done = app.cancel(job_id)
    job = app.get(job_id)
    if not done:
        state = f"it is {job.state}" if job else "it does not exist"
        raise click.ClickException(f"job {job_id} was not cancelled: {state}")
    if job is not None and job.state == JobState.ACTIVE:
        click.echo(f"asked running job {job_id} to stop: it ends cancelled when its worker hears it")
    else:
        click.echo(f"cancelled {job_id}")


@main.command("run-now")
@existing_store_options
@click.argument("job_id")
def run_now(app: App, job_id: str) -> None:
    """Run a scheduled job now (delayed, or waiting for its next retry)."""
    if not app.run_now(job_id):
        job = app.get(job_id)
        state = f"it is {job.state}" if job else "it does not exist"
        raise click.ClickException(f"job {job_id} was not made due: {state} (only scheduled jobs can run now)")
    click.echo(f"{job_id} is due now")


@main.command()
@existing_store_options
@click.option("--queue", default=None)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000), help="Jobs shown at most.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times as epoch seconds).")
def retrying(app: App, queue: str | None, limit: int, as_json: bool) -> None:
    """List jobs waiting for their next attempt (scheduled after a failure), each with
    when it runs again and its last error."""
    found = find_retrying(app.backend, JobQuery(queue=queue, limit=limit))
    if as_json:
        print_json([shown_dict(j) for j in found.jobs])
        return
    columns, now = width(), time.time()
    for job in found.jobs:
        click.echo("\n".join([
            clip(f"{job.id}  {job.task}  (queue {job.queue}, {job.attempts} of {job.max_attempts} attempts)",
                 columns),
            clip(f"  runs again {when(job.run_at, now)}", columns),
            clip(f"  {last_error_line(job.error) or 'no error recorded'}", columns)]))
    if not found.jobs:
        click.echo("no job is waiting to be retried")
    if found.cursor:
        click.echo(f"the first {len(found.jobs)} shown: --limit N for more")


def stats_table(stats: dict[str, dict[str, Any]]) -> Any:
    """Jobs per queue and state in 80 columns: short state names, explained below the table."""
    from rich import box
    from rich.table import Table

    # blocked jobs (options(after=...)) get a column only when there are some: 80 columns
    shown = [(c, h) for c, h in zip(STATE_COLUMNS, STATE_HEADERS, strict=True)
             if c != "blocked" or any(counts.get(c) for counts in stats.values())]
    blocked = " block: blocked, waiting for the jobs it runs after." if len(shown) == len(STATE_COLUMNS) else ""
    table = Table(title="deferq queues", box=box.SIMPLE_HEAD, caption_justify="left",
                  caption="sched: scheduled, due later. done: succeeded. wait: of the oldest due job." + blocked)
    table.add_column("queue", overflow="fold")
    for _, header in shown:
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("wait", justify="right", no_wrap=True)
    for queue, counts in stats.items():
        wait = float(counts.get("oldest_wait", 0))
        name = f"{queue} (paused)" if counts.get("paused") else queue
        table.add_row(name, *(str(counts.get(s, 0)) for s, _ in shown),
                      f"{wait:.1f}s" if wait < 60 else format_duration(wait))
    return table


def console() -> Any:
    from rich.console import Console

    return Console(width=width())


@main.command()
@existing_store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--watch", is_flag=True, help="Refresh every second until Ctrl-C.")
def stats(app: App, as_json: bool, watch: bool) -> None:
    """Jobs per queue by state."""
    if as_json:
        print_json(read_stats(app))
        return
    from rich.live import Live

    if not watch:
        console().print(stats_table(read_stats(app)))
        return
    with Live(stats_table(read_stats(app)), console=console(), refresh_per_second=2) as live:
        try:
            while True:
                time.sleep(1)
                live.update(stats_table(read_stats(app)))
        except KeyboardInterrupt:
            pass


def read_stats(app: App) -> dict[str, dict[str, Any]]:
    """Per-queue counts; a store part that did not answer (a Redis shard) is named on stderr."""
    table = app.stats()
    if table.missing:
        click.echo(f"warning: Redis shard(s) {', '.join(table.missing)} did not answer; "
                   "the counts leave out the jobs stored there", err=True)
    return table


@main.group()
def queue() -> None:
    """Queues: list them, pause and resume them."""


@main.command()
@existing_store_options
@click.argument("job_id")
@click.argument("text", required=False)
def remark(app: App, job_id: str, text: str | None) -> None:
    """Set a job's remark (free text for people); without TEXT, clear it."""
    if not app.set_remark(job_id, text or None):
        raise click.ClickException(f"no job {job_id}")
    click.echo(f"remark of {job_id} {'set' if text else 'cleared'}")


@queue.command("list")
@existing_store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def queue_list(app: App, as_json: bool) -> None:
    """Every queue: jobs by state, the oldest wait, and whether it is paused."""
    table = read_stats(app)
    if as_json:
        print_json(table)
    elif table:
        console().print(stats_table(table))
    else:
        click.echo("no queues yet: a queue exists once a job was enqueued to it (or it was paused)")


@queue.command("pause")
@app_options
@click.argument("name")
def queue_pause(app: App, name: str) -> None:
    """Stop workers taking jobs of a queue (enqueues still go in; running jobs finish).
    Kept in the store: it stays paused until `deferq queue resume`."""
    changed = app.pause(name)
    click.echo(f"paused queue {name}" if changed else f"queue {name} was already paused")


@queue.command("resume")
@app_options
@click.argument("name")
def queue_resume(app: App, name: str) -> None:
    """Let workers take jobs of a paused queue again."""
    changed = app.resume(name)
    click.echo(f"resumed queue {name}" if changed else f"queue {name} was not paused")


@main.command("jobs")
@existing_store_options
@click.option("--state", type=click.Choice([*(str(s) for s in JobState), *SCHEDULED_KINDS]), metavar="STATE",
              help=f"Only jobs in this state: {', '.join(map(str, JobState))}; or retrying, waiting "
                   "(scheduled jobs that failed before, scheduled jobs in a durable wait).")
@click.option("--queue", help="Only jobs of this queue.")
@click.option("--task", help="Only jobs of this task.")
@click.option("--tag", help="Only jobs with this tag.")
@click.option("--chunk", help="Only the jobs of this chunk call (a job's chunk_call).")
@click.option("--text", default="", help="Text (3 characters or more) in the arguments, error or key.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000), help="Jobs shown at most.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times as epoch seconds).")
def find_jobs(app: App, state: str | None, queue: str | None, task: str | None, tag: str | None,
              chunk: str | None, text: str, limit: int, as_json: bool) -> None:
    """Find jobs, newest first: the filters combine."""
    page = app.find_jobs(state=state, queue=queue, task=task, tag=tag, chunk=chunk, text=text, limit=limit)
    if as_json:
        print_json([shown_dict(job) for job in page.jobs])
        return
    columns = width()
    for job in page.jobs:
        tags = f"  [{', '.join(job.tags)}]" if job.tags else ""
        shown = "waiting" if job.waiting else str(job.state)
        click.echo(clip(f"{job.id}  {shown:<9}  {job.task}  (queue {job.queue}){tags}", columns))
    if not page.jobs:
        click.echo("no jobs match")
    if page.cursor is not None or not page.complete:
        click.echo(f"more may match: the newest {len(page.jobs)} shown", err=as_json)


@main.group()
def limits() -> None:
    """Rate and concurrency limits set at run time: every worker holds them within a second."""


@limits.command("list")
@existing_store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def limits_list(app: App, as_json: bool) -> None:
    """The limits set at run time, and the pauses running."""
    listed = app.limits.list()
    if as_json:
        print_json(listed)
        return
    for name, limit in listed.items():
        parts = [f"rate {limit['rate']}" if limit["rate"] else "",
                 f"concurrency {limit['concurrency']}" if limit["concurrency"] else "",
                 f"paused for {limit['paused_for']:.0f}s" if limit["paused_for"] else ""]
        click.echo(f"{name}: {', '.join(p for p in parts if p)}")
    if not listed:
        click.echo("no limits set at run time: the tasks' own limits hold")


@limits.command("set")
@app_options
@click.argument("name")
@click.option("--rate", help='Runs per period, like "50/s" or "100/m".')
@click.option("--concurrency", type=int, help="Runs at once, across the fleet.")
def limits_set(app: App, name: str, rate: str | None, concurrency: int | None) -> None:
    """Set the limit of a task, a limit key or a queue (NAME: a task's name, a key like
    customer:7, or queue:emails for every job of the queue emails); it replaces what was
    set before."""
    try:
        setting = app.limits.set(name, rate=rate, concurrency=concurrency)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    shown = ", ".join(f"{k} {v}" for k, v in setting.items() if v is not None)
    click.echo(f"{name}: {shown} (every worker within a second)")
    if app.tasks and not app.registry.names_limit(name):
        say(f"note: {name!r} is no task, no queue:NAME and no limit key your tasks declare: the limit is set, "
            f"but no job of this App meets it (a misspelt name?)")


@limits.command("pause")
@app_options
@click.argument("name")
@click.argument("seconds", type=float)
def limits_pause(app: App, name: str, seconds: float) -> None:
    """No job under a task, a limit key or a queue (queue:NAME) starts for SECONDS."""
    try:
        app.limits.pause(name, seconds)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"{name}: paused for {seconds:g}s")


@limits.command("resume")
@existing_store_options
@click.argument("name")
def limits_resume(app: App, name: str) -> None:
    """End the pause of a task, a limit key or a queue (queue:NAME) now: the jobs that met
    it are due at once; a limit set on it stays."""
    try:
        resumed = app.limits.resume(name)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if not resumed:
        raise click.ClickException(f"{name} is not paused")
    click.echo(f"{name}: resumed, the jobs it held due now (every worker within a second)")


@limits.command("clear")
@existing_store_options
@click.argument("name")
def limits_clear(app: App, name: str) -> None:
    """Clear a limit set at run time, and its pause: the task's own limits hold again, and
    the jobs it held are due at once."""
    if not app.limits.clear(name):
        raise click.ClickException(f"no limit set on {name}")
    click.echo(f"{name}: cleared, the jobs it held due now")


@main.group()
def dead() -> None:
    """Dead letters: jobs whose attempts are used up."""


def dead_lines(job: Job, columns: int, now: float) -> list[str]:
    """A dead job in three lines of at most `columns`: what, when, why (`deferq job` has all)."""
    return [
        clip(f"{job.id}  {job.task}  (queue {job.queue}, {job.attempts} attempt(s))", columns),
        clip(f"  died {when(job.finished_at, now)}", columns),
        clip(f"  {last_error_line(job.error) or 'no error recorded'}", columns),
    ]


@dead.command("list")
@existing_store_options
@click.option("--queue", default=None)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10**9),  # a store's integer
              help="Jobs shown at most.")
@click.option("--all", "show_all", is_flag=True, help="Show every dead job.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times as epoch seconds).")
def dead_list(app: App, queue: str | None, limit: int, show_all: bool, as_json: bool) -> None:
    """List dead jobs, newest first, each with when it died and its last error; says how
    many there are when it shows fewer (to stderr with --json)."""
    total = sum(counts.get("dead", 0) for name, counts in app.stats().items() if queue in (None, name))
    jobs = app.list_jobs(JobState.DEAD, queue, max(total, 1) if show_all else limit)
    shown = f"{len(jobs)} of {total} shown: --limit N or --all" if len(jobs) < total else None
    if as_json:
        print_json([shown_dict(j) for j in jobs])
    else:
        columns, now = width(), time.time()
        for job in jobs:
            click.echo("\n".join(dead_lines(job, columns, now)))
        if not jobs:
            click.echo("no dead jobs")
    if shown:
        click.echo(shown, err=as_json)


@dead.command("retry")
@existing_store_options
@click.argument("job_id", required=False)
@click.option("--all", "retry_all", is_flag=True, help="Retry every dead job.")
def dead_retry(app: App, job_id: str | None, retry_all: bool) -> None:
    """Put a dead job (or all) back in its queue with fresh attempts."""
    if not job_id and not retry_all:
        raise click.UsageError("name a job id or pass --all")
    if retry_all:
        count = 0
        while batch := app.list_jobs(JobState.DEAD, limit=500):
            retried = sum(app.retry_dead(job.id) for job in batch)
            count += retried
            if not retried:
                break
        click.echo(f"retried {count} job(s)")
        return
    if job_id is None or not app.retry_dead(job_id):
        raise click.ClickException(f"job {job_id} is not dead")
    click.echo(f"retried {job_id}")


@dead.command("purge")
@existing_store_options
@click.option("--older-than", type=float, default=0, help="Only jobs dead this many seconds.")
def dead_purge(app: App, older_than: float) -> None:
    """Delete dead jobs for good."""
    click.echo(f"purged {app.purge([JobState.DEAD], older_than)} dead job(s)")


@main.command()
@app_options
def migrate(app: App) -> None:
    """Create or upgrade the store's tables (SQLite, PostgreSQL, MySQL); safe to run again.

    Whatever the URL's ?migrate= says: the store opens without preparing its schema
    (stores without one ignore that) and migrates here, to name what it applied."""
    from ..backends import open_backend

    backend = open_backend(app.url, prepare_schema=False)
    try:
        applied = backend.migrate()
    finally:
        backend.close()
    click.echo(f"applied {', '.join(applied)}" if applied else "the schema is up to date")


@main.command()
@click.option("--url", default=None, help="Store to measure (default: a temporary SQLite file).")
@click.option("--jobs", "-n", default=20000, show_default=True)
@click.option("--processes", default=2, show_default=True, help="Worker processes.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--only", multiple=True, help="Run only some workloads: enqueue, batch, process, pickup, delay.")
def bench(url: str | None, jobs: int, processes: int, as_json: bool, only: tuple[str, ...]) -> None:
    """Measure enqueue, processing, pickup latency and delay lateness on a store."""
    from .bench import run_bench

    setup_logging("warning")
    run_bench(url, jobs, processes, as_json, set(only) or None)


@main.command()
@click.option("--url", default=None, help="Store (default: a fresh SQLite file in a temp dir).")
def demo(url: str | None) -> None:
    """A guided one-minute tour on embedded SQLite."""
    from .demo import run_demo

    setup_logging("warning")
    sys.exit(run_demo(url))


main.add_command(worker)  # cli/worker.py: what `deferq worker` loads, alone (cli/root.py)
main.add_command(run_command)  # deferq run: the supervisor
main.add_command(schedule_group(existing_store_options, app_options), "schedule")  # deferq schedule ...
main.add_command(encryption_group(existing_store_options), "encryption")  # deferq encryption new-key | rotate
main.add_command(status_command)  # deferq status: masters, pools, children
main.add_command(steps_group(existing_store_options), "steps")  # deferq steps check|retry-from


@main.command()
@click.option("--url", envvar="DEFERQ_URL", help="Store URL (default sqlite:///deferq.db).")
@click.option("--app", "app_path", envvar="DEFERQ_APP", help="Your App (module:attr), for task defaults.")
@no_create_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8088, show_default=True)
@click.option("--workers", default="1", show_default=True,
              help="Server processes sharing the port: N, or LO..HI to grow them under a waiting queue.")
@click.option("--no-auth", is_flag=True, help="Open every route without a token (development; loopback only).")
@click.option("--no-auth-beyond-loopback", is_flag=True,
              help="Allow --no-auth on a --host that is not loopback (anyone who reaches it may do anything).")
@click.option("--allowed-host", multiple=True,
              help="With --no-auth: a Host name served besides localhost, 127.0.0.1, [::1] (repeatable).")
@click.option("--max-body", default=1024 * 1024, show_default=True, help="Largest request body, bytes.")
@click.option("--max-queue-length", type=int, default=None, help="Unfinished jobs a queue may hold (429 past it).")
@click.option("--queue-limit", multiple=True, help="QUEUE=N: a limit for one queue (repeatable).")
@click.option("--max-inflight", type=click.IntRange(1), default=None,
              help="API requests one process answers at once; past it, see --overload.")
@click.option("--overload", type=click.Choice(OVERLOADS), default="refuse", show_default=True,
              help="Past --max-inflight: refuse (503 busy at once) or shed-oldest (wait in a queue; "
                   "when full, the oldest waiting is answered busy).")
@click.option("--max-waiting", type=click.IntRange(1), default=None,
              help="shed-oldest: requests one process keeps waiting for a slot.")
@click.option("--max-wait", type=click.FloatRange(0, min_open=True), default=None,
              help="shed-oldest: seconds a request may wait before it is answered busy.")
@click.option("--calm", type=click.FloatRange(0), default=30.0, show_default=True,
              help="--workers LO..HI: seconds without a waiting request before a process is retired.")
@click.option("--wait-threads", type=click.IntRange(1), default=16, show_default=True,
              help="?wait= requests blocked in the store at once per process; more poll.")
@click.option("--waits-per-token", type=click.IntRange(1), default=8, show_default=True,
              help="?wait= requests one token holds open at once; more get 429.")
@click.option("--request-log", default="off", show_default=True, help="File, - (stderr) or off.")
@click.option("--error-log", default="-", show_default=True, help="File, - (stderr) or off.")
@UPKEEP_OPTION
def serve(url: str | None, app_path: str | None, no_create: bool, host: str, port: int, workers: str,
          no_auth: bool, no_auth_beyond_loopback: bool, allowed_host: tuple[str, ...], max_body: int,
          max_queue_length: int | None, queue_limit: tuple[str, ...], max_inflight: int | None,
          overload: Overload, max_waiting: int | None, max_wait: float | None, calm: float,
          wait_threads: int, waits_per_token: int, request_log: str, error_log: str, schedules: bool) -> None:
    """The HTTP API (jobs, topics with signed callbacks, dead letters, metrics) and the
    operator console at http://HOST:PORT/dashboard/ (docs/http.md, docs/console.md).

    The API and the console need a token: `deferq token create --scope reader` makes
    one that looks only (producer: writes jobs; admin: everything); paste it into the
    console's sign-in. --no-auth opens both without one, on loopback only."""
    from .serve import ServerConfig, check_no_auth, check_overload, parse_queue_limits, parse_workers
    from .serve import serve as run_server

    allowed = check_no_auth(no_auth, host, no_auth_beyond_loopback, allowed_host)
    processes = parse_workers(workers)
    check_overload(overload, max_inflight, max_waiting, max_wait, processes)
    config = ServerConfig(url=url, app_path=app_path, auth=not no_auth, allowed_hosts=allowed, max_body=max_body,
                          max_queue_length=max_queue_length,
                          queue_limits=parse_queue_limits(queue_limit), max_inflight=max_inflight,
                          overload=overload, max_waiting=max_waiting or 0, max_wait=max_wait,
                          wait_threads=wait_threads, waits_per_token=waits_per_token,
                          request_log=request_log, error_log=error_log, schedules=schedules)
    run_server(config, host, port, processes, create=not no_create, calm=calm)


@main.group()
def token() -> None:
    """API tokens of the HTTP service."""


@token.command("create")
@app_options
@click.option("--scope", type=click.Choice(SCOPES), required=True,
              help="reader: look (the console); producer: and write jobs; admin: everything.")
@click.option("--note", default="", help="What the token is for.")
def token_create(app: App, scope: str, note: str) -> None:
    """Make a token and print it (once: only its hash is stored)."""
    from .serve import create_token

    create_token(app.backend, scope, note)


@token.command("list")
@existing_store_options
def token_list(app: App) -> None:
    """Tokens by id, scope and note (the tokens themselves are not stored)."""
    from ..server.http.auth import list_tokens

    for record in list_tokens(app.backend):
        click.echo(f"{record['id']}  {record['scope']:<8}  {record.get('note', '')}")


@token.command("revoke")
@existing_store_options
@click.argument("token_id")
def token_revoke(app: App, token_id: str) -> None:
    """Revoke a token by its id (servers notice within 5 seconds)."""
    from ..server.http.auth import revoke

    if not revoke(app.backend, token_id):
        raise click.ClickException(f"no token with id {token_id}")
    click.echo(f"revoked {token_id}")

@main.group()
def shard() -> None:
    """The servers of a redis+shards:// store: add one, drain one, remove a drained one.
    Every producer, worker and server follows within seconds, without a restart."""


def shard_change(app: App, change: Callable[[Resharding, str], dict[str, Any]]) -> None:
    """`change(the store's shards, who)` made, and the shards shown as `shard list` does."""
    import getpass
    import socket

    who = f"{getpass.getuser()}@{socket.gethostname()} from the command line"
    try:
        shown = change(app.backend.resharding(), who)
    except TopologyRefused as exc:
        raise click.ClickException(str(exc)) from None
    print_shards(shown, as_json=False)


def print_shards(shown: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(shown)
        return
    for row in shown["shards"]:
        click.echo(f"{row['number']:>3}  {row['name']:<28}  {row['role']:<7}  {row['state']}")
    for change in shown["log"][-5:]:
        click.echo(f"  {when(change['at'])}  {change['action']} {change['shard']} by {change['who']}")


@shard.command("list")
@existing_store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def shard_list(app: App, as_json: bool) -> None:
    """Each shard (number, host:port/db, anchor or added, state) and the latest changes."""
    try:
        print_shards(app.backend.resharding().describe(), as_json)
    except TopologyRefused as exc:
        raise click.ClickException(str(exc)) from None


@shard.command("add")
@existing_store_options
@click.argument("server")
def shard_add(app: App, server: str) -> None:
    """Add SERVER (host:port[/db], empty of this store's jobs): it takes new jobs at once."""
    shard_change(app, lambda shards, who: shards.add(server, who))


@shard.command("drain")
@existing_store_options
@click.argument("name")
def shard_drain(app: App, name: str) -> None:
    """No new jobs for shard NAME (host:port/db or number); its jobs still run."""
    shard_change(app, lambda shards, who: shards.drain(name, who))


@shard.command("undrain")
@existing_store_options
@click.argument("name")
def shard_undrain(app: App, name: str) -> None:
    """Let a draining shard take new jobs again."""
    shard_change(app, lambda shards, who: shards.drain(name, who, drain=False))


@shard.command("remove")
@existing_store_options
@click.argument("name")
def shard_remove(app: App, name: str) -> None:
    """Remove a drained shard; refused while it holds unfinished jobs."""
    shard_change(app, lambda shards, who: shards.remove(name, who))


def document(command: click.Command, path: str = "") -> set[str]:
    """Give `command` (and each command under it) an epilog listing the environment
    variables it reads and an example; return those variables."""
    names = {p.envvar for p in command.params if isinstance(p, click.Option) and isinstance(p.envvar, str)}
    names.update(ENV_READ.get(path, ()))
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            names |= document(sub, f"{path} {name}".strip())
    ordered = sorted(names, key=lambda n: (list(ENV_HELP).index(n), n))  # in ENV_HELP's order
    pad = max((len(n) for n in ordered), default=0)
    env = "\n".join(f"  {n:<{pad}}  {ENV_HELP[n]}" for n in ordered) or "  none"
    heading = "Environment (read by its commands)" if isinstance(command, click.Group) else "Environment"
    command.epilog = f"\b\n{heading}:\n{env}\n\n\b\nExample:\n  {EXAMPLES[path]}"
    return names


document(main)

if __name__ == "__main__":
    main()
