"""The `deferq` command line. Every command takes --url and --app, like uvicorn or celery."""

from __future__ import annotations

import functools
import importlib
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import click
import orjson

from .app import App
from .errors import DeferqError
from .job import Job, JobState
from .logs import setup_logging
from .supervisor.cli import run_command, status_command

STATE_COLUMNS = ("scheduled", "queued", "active", "succeeded", "dead", "cancelled")


def load_app(app_path: str | None, url: str | None) -> App:
    """`module:attr` names an App; --url (or DEFERQ_URL) overrides its store."""
    app_path = app_path or os.environ.get("DEFERQ_APP")
    if not app_path:
        return App(url)
    module_name, _, attr = app_path.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.UsageError(f"cannot import {module_name!r} for --app: {exc}") from None
    app = getattr(module, attr or "app", None)
    if not isinstance(app, App):
        raise click.UsageError(f"--app {app_path!r} does not name a deferq.App")
    if url:
        app.url = url
    return app


def app_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--url, --app, and logging options; passes `app` to the command."""

    @click.option("--url", envvar="DEFERQ_URL", help="Store URL (default sqlite:///deferq.db).")
    @click.option("--app", "app_path", envvar="DEFERQ_APP", help="Your App, as module:attr.")
    @click.option("--log-level", default="info", show_default=True,
                  type=click.Choice(["debug", "info", "warning", "error"]))  # fmt: skip
    @click.option("--log-format", default="text", show_default=True, type=click.Choice(["text", "json"]))
    @functools.wraps(fn)
    def wrapper(url: str | None, app_path: str | None, log_level: str, log_format: str, **kw: Any) -> Any:
        setup_logging(log_level, log_format)
        return fn(load_app(app_path, url), **kw)

    return wrapper


def print_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode())


class FriendlyGroup(click.Group):
    """Turns deferq's own errors into one sentence and exit code 2, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DeferqError as exc:
            click.echo(f"deferq: {exc}", err=True)
            ctx.exit(2)
        except (ConnectionError, OSError) as exc:
            click.echo(f"deferq: the store cannot be reached: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=FriendlyGroup)
@click.version_option(package_name="deferq")
def main() -> None:
    """deferq: background jobs and delayed jobs that are never lost."""


@main.command()
@app_options
@click.option("--queue", "-q", "queues", multiple=True, help="Queue to consume (repeatable).")
@click.option("--concurrency", "-c", default=8, show_default=True, help="Jobs run at once.")
@click.option("--burst", is_flag=True, help="Exit when no job is due.")
@click.option("--once", is_flag=True, help="Run one job, then exit.")
@click.option("--grace", default=25.0, show_default=True, help="Seconds to finish jobs on stop.")
@click.option("--max-jobs", type=int, default=None, help="Exit after this many jobs.")
def worker(app: App, queues: tuple[str, ...], concurrency: int, burst: bool, once: bool,
           grace: float, max_jobs: int | None) -> None:  # fmt: skip
    """Run jobs from the given queues (default: every queue your tasks use)."""
    from .worker import Worker, WorkerConfig

    if not app.tasks:
        raise click.UsageError("the worker needs your tasks: pass --app module:app")
    queues = queues or tuple(sorted({t.defaults.queue for t in app.tasks.values()}))
    config = WorkerConfig(queues=queues, concurrency=concurrency, burst=burst, once=once,
                          grace=grace, max_jobs=max_jobs)  # fmt: skip
    code = Worker(app, config).run()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never wait on a hung job's thread


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
def enqueue(app: App, task: str, args_json: str, kwargs_json: str, **options: Any) -> None:
    """Enqueue TASK by name and print the job."""
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
    print_json(job.to_dict())


@main.command("job")
@app_options
@click.argument("job_id")
def show_job(app: App, job_id: str) -> None:
    """Show one job (by id, or by key with key:NAME)."""
    job = app.get_by_key(job_id[4:]) if job_id.startswith("key:") else app.get(job_id)
    if job is None:
        raise click.ClickException(f"no job {job_id}")
    print_json(job.to_dict())


@main.command()
@app_options
@click.argument("job_id")
def cancel(app: App, job_id: str) -> None:
    """Cancel a waiting job."""
    if not app.cancel(job_id):
        job = app.get(job_id)
        state = f"it is {job.state}" if job else "it does not exist"
        raise click.ClickException(f"job {job_id} was not cancelled: {state}")
    click.echo(f"cancelled {job_id}")


def stats_table(stats: dict[str, dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="deferq queues")
    table.add_column("queue")
    for state in STATE_COLUMNS:
        table.add_column(state, justify="right")
    table.add_column("oldest wait", justify="right")
    for queue, counts in stats.items():
        table.add_row(queue, *(str(counts.get(s, 0)) for s in STATE_COLUMNS),
                      f"{counts.get('oldest_wait', 0):.1f}s")  # fmt: skip
    return table


@main.command()
@app_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--watch", is_flag=True, help="Refresh every second until Ctrl-C.")
def stats(app: App, as_json: bool, watch: bool) -> None:
    """Jobs per queue by state."""
    if as_json:
        print_json(app.stats())
        return
    from rich.console import Console
    from rich.live import Live

    if not watch:
        Console().print(stats_table(app.stats()))
        return
    with Live(stats_table(app.stats()), refresh_per_second=2) as live:
        try:
            while True:
                time.sleep(1)
                live.update(stats_table(app.stats()))
        except KeyboardInterrupt:
            pass


@main.group()
def dead() -> None:
    """Dead letters: jobs whose attempts are used up."""


def _job_line(job: Job) -> str:
    error = (job.error or "").strip().splitlines()
    return f"{job.id}  {job.queue:<10} {job.task:<24} attempts={job.attempts}  {error[-1] if error else ''}"


@dead.command("list")
@app_options
@click.option("--queue", default=None)
@click.option("--limit", default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def dead_list(app: App, queue: str | None, limit: int, as_json: bool) -> None:
    """List dead jobs, newest first."""
    jobs = app.list_jobs(JobState.DEAD, queue, limit)
    if as_json:
        print_json([j.to_dict() for j in jobs])
        return
    for job in jobs:
        click.echo(_job_line(job))
    if not jobs:
        click.echo("no dead jobs")


@dead.command("retry")
@app_options
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
    if not app.retry_dead(job_id):
        raise click.ClickException(f"job {job_id} is not dead")
    click.echo(f"retried {job_id}")


@dead.command("purge")
@app_options
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
    from .backends import open_backend

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


main.add_command(run_command)  # deferq run: the supervisor
main.add_command(status_command)  # deferq status: masters, pools, children


@main.command()
@click.option("--url", envvar="DEFERQ_URL", help="Store URL (default sqlite:///deferq.db).")
@click.option("--app", "app_path", envvar="DEFERQ_APP", help="Your App (module:attr), for task defaults.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8088, show_default=True)
@click.option("--workers", default=1, show_default=True, help="Server processes sharing the port.")
@click.option("--no-auth", is_flag=True, help="Open every route without a token (local development).")
@click.option("--max-body", default=1024 * 1024, show_default=True, help="Largest request body, bytes.")
@click.option("--max-queue-length", type=int, default=None, help="Unfinished jobs a queue may hold (429 past it).")
@click.option("--queue-limit", multiple=True, help="QUEUE=N: a limit for one queue (repeatable).")
@click.option("--max-inflight", type=int, default=None, help="API requests one process answers at once.")
@click.option("--request-log", default="off", show_default=True, help="File, - (stderr) or off.")
@click.option("--error-log", default="-", show_default=True, help="File, - (stderr) or off.")
def serve(url: str | None, app_path: str | None, host: str, port: int, workers: int, no_auth: bool,
          max_body: int, max_queue_length: int | None, queue_limit: tuple[str, ...],
          max_inflight: int | None, request_log: str, error_log: str) -> None:  # fmt: skip
    """The HTTP API: jobs, topics with signed callbacks, dead letters, metrics (docs/http.md)."""
    from .server.cli import ServerConfig, parse_queue_limits
    from .server.cli import serve as run_server

    config = ServerConfig(url=url, app_path=app_path, auth=not no_auth, max_body=max_body,
                          max_queue_length=max_queue_length,
                          queue_limits=parse_queue_limits(queue_limit), max_inflight=max_inflight,
                          request_log=request_log, error_log=error_log)  # fmt: skip
    run_server(config, host, port, workers)


@main.group()
def token() -> None:
    """API tokens of the HTTP service."""


@token.command("create")
@app_options
@click.option("--scope", type=click.Choice(["producer", "admin"]), required=True)
@click.option("--note", default="", help="What the token is for.")
def token_create(app: App, scope: str, note: str) -> None:
    """Make a token and print it (once: only its hash is stored)."""
    from .server.cli import create_token

    create_token(app.backend, scope, note)


@token.command("list")
@app_options
def token_list(app: App) -> None:
    """Tokens by id, scope and note (the tokens themselves are not stored)."""
    from .server.auth import list_tokens

    for record in list_tokens(app.backend):
        click.echo(f"{record['id']}  {record['scope']:<8}  {record.get('note', '')}")


@token.command("revoke")
@app_options
@click.argument("token_id")
def token_revoke(app: App, token_id: str) -> None:
    """Revoke a token by its id (servers notice within 5 seconds)."""
    from .server.auth import revoke

    if not revoke(app.backend, token_id):
        raise click.ClickException(f"no token with id {token_id}")
    click.echo(f"revoked {token_id}")

if __name__ == "__main__":
    main()
