"""`deferq worker`: the one command a worker process loads (cli/root.py), so that it
imports what running jobs needs and none of the other commands' modules."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

import click

from ..errors import DeferqError
from ..loading import require
from .root import UPKEEP_OPTION, MainDocumented, main, store_options

if TYPE_CHECKING:
    from ..app import App


def delivery_refusal(app: App) -> str | None:
    """The delivery worker serves the store of a running `deferq serve`, which exists:
    a new, empty one means a forgotten --url or DEFERQ_URL, not a fresh start."""
    delivery = sys.modules.get("deferq.server.tasks")
    if delivery is not None and app is getattr(delivery, "app", None):
        return "the delivery worker works on the store of a running deferq serve and makes none"
    return None


def cap_arenas() -> None:
    """Before the App loads and the store opens: the worker's threads share two malloc
    arenas (worker/memory.py)."""
    from ..worker.memory import limit_arenas

    limit_arenas()


@main.command(cls=MainDocumented)
@store_options(delivery_refusal, first=cap_arenas)
@click.option("--queue", "-q", "queues", multiple=True, help="Queue to consume (repeatable).")
@click.option("--concurrency", "-c", default=8, show_default=True, help="Jobs run at once (per process).")
@click.option("--processes", "-p", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Worker processes: this one and the children it forks once your App is loaded.")
@click.option("--burst", is_flag=True, help="Exit when no job is due.")
@click.option("--once", is_flag=True, help="Run one job, then exit.")
@click.option("--grace", default=25.0, show_default=True, help="Seconds to finish jobs on stop.")
@click.option("--max-jobs", type=int, default=None, help="Exit after this many jobs.")
@click.option("--tries", type=click.IntRange(1, 1000), default=None,
              help="Attempts of jobs whose task sets no max_attempts.")
@click.option("--delay", type=click.FloatRange(0, 86400), default=None,
              help="Seconds between tries of jobs whose task sets no backoff.")
@click.option("--poll-interval", type=click.FloatRange(0.01, 60), default=1.0, show_default=True,
              help="Longest idle wait before asking the store again.")
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              help="Serve Prometheus metrics of the jobs run on this port.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address for --metrics-port.")
@UPKEEP_OPTION
def worker(app: App, queues: tuple[str, ...], concurrency: int, processes: int, burst: bool, once: bool,
           grace: float, max_jobs: int | None, tries: int | None, delay: float | None,
           poll_interval: float, metrics_port: int | None, metrics_host: str, schedules: bool) -> None:
    """Run jobs from the given queues (default: every queue your tasks and your App's schedules name).

    A sync job that overruns its timeout fails its attempt; the worker then restarts
    itself in place (same PID) to leave the job's thread behind, and serves on."""
    from ..backoff import fixed
    from ..worker import Worker, WorkerConfig
    from ..worker.orphans import stop_when_orphaned
    from ..worker.processes import Family, take_parent
    from .restart import exit_code_or_restart, take_handover

    handover = take_handover()  # from this process's image before, if a job overran there
    parent = handover.parent or take_parent()  # a replacement child of --processes: its first process
    if not app.tasks:
        raise click.UsageError("the worker needs your tasks: pass --app module:app")
    if processes > 1 and (once or metrics_port is not None):
        raise click.UsageError("--processes takes neither --once (one job, one process) nor --metrics-port "
                               "(one process's jobs): deferq run serves the metrics of several processes")
    queues = queues or app.queues_in_use()
    if tries is not None or delay is not None:
        app.registry.use_worker_defaults(tries, None if delay is None else fixed(delay))
    if metrics_port is not None:
        serve_worker_metrics(app, metrics_port, metrics_host)
    if not (schedules and not burst and not once) and not parent:
        warn_unscheduled(app)
    family = None
    if processes > 1 and not parent:  # the first process: its children, forked or handed over
        family, parent = Family.start(app, processes - 1, handover.children if handover.restarts else None)
    config = WorkerConfig(queues=queues, concurrency=concurrency, burst=burst, once=once, grace=grace,
                          max_jobs=handover.jobs_left(max_jobs), idle_wait=poll_interval, schedules=schedules)
    runner = Worker(app, config)
    handover.resume(runner)
    if parent:
        stop_when_orphaned(runner, parent)
    if family is not None:
        family.watch(runner)
    # after an overrun: restarts in place
    code = exit_code_or_restart(runner, runner.run(), handover, parent, family.pids() if family else ())
    if family is not None:
        code = family.stop(grace, code, burst and not runner.asked_to_stop)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never wait on a hung job's thread


def warn_unscheduled(app: App) -> None:
    """This worker does not fire schedules (--burst, --once, --no-upkeep). Say so when
    the App has schedules and no other process fires them (checked once, at start)."""
    from ..upkeep.leader import current_leader

    if not app.periodic_jobs:
        return
    try:
        if current_leader(app.backend) is not None:
            return
    except DeferqError:
        return  # the store is down: the worker says so itself
    names = [job.name for job in app.periodic_jobs]
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    logging.getLogger("deferq.worker").warning(
        "your app has %d periodic schedule(s) (%s) and no process is firing them: this worker does not "
        "(--burst, --once or --no-upkeep); any other worker, `deferq run` or `deferq serve` does "
        "(docs/schedules.md)", len(names), listed)


def serve_worker_metrics(app: App, port: int, host: str) -> None:
    """`deferq worker --metrics-port`: count the jobs this process runs, serve them over HTTP."""
    require("prometheus_client", needed_by="--metrics-port")
    from ..worker.metrics import WorkerMetrics, serve

    try:
        serve(port, host)
    except OSError as exc:
        raise click.BadParameter(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                                 param_hint="--metrics-port") from None
    app.add_middleware(WorkerMetrics())
    logging.getLogger("deferq.worker").info("metrics of the jobs run here: http://%s:%d/metrics", host, port)
