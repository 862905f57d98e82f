"""`deferq steps check|retry-from`: durable jobs before a deploy, and after a fix
(docs/steps.md, "Safe deploys" and "Retry from a step")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..app import App
from ..observe.output import clip, print_json, width
from ..steps.check import Report
from ..steps.retry import RetryRefused

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def print_report(report: Report, as_json: bool) -> None:
    if as_json:
        print_json(report.to_dict())
        return
    columns = width()
    for finding in report.findings:
        click.echo(clip(f"{finding.job_id}  {finding.task}  ({finding.state})  {finding.problem}"
                        f"{f' at {finding.step!r}' if finding.step else ''}", columns))
        click.echo(clip(f"  {finding.detail}", columns))
    failing, unchecked = len(report.failing), len(report.findings) - len(report.failing)
    verdict = (f"{failing} would end dead or replay wrongly under the code loaded now" if failing
               else "the code loaded now fits every one")
    extra = f"; {unchecked} not checked (the task raised while replayed)" if unchecked else ""
    click.echo(f"{report.checked} durable job(s) replayed in {report.seconds:.2f}s: {verdict}{extra}")


def steps_group(existing_store: Decorator) -> click.Group:
    """The `deferq steps` commands, given the CLI's store option (cli/main.py)."""

    @click.group()
    def steps() -> None:
        """Durable jobs: check them against new code, retry one from a step (docs/steps.md)."""

    @steps.command("check")
    @existing_store
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    def steps_check(app: App, as_json: bool) -> None:
        """Replay every sleeping, waiting, retrying, queued, running or dead durable job
        against the code of --app, running no step's function; list each job that code
        would end dead (or whose recorded steps it would not find), with the step and
        why. Exits 1 when there is any."""
        if not app.tasks:
            raise click.UsageError("deferq steps check needs --app (or DEFERQ_APP): the code to check against")
        report = app.steps_check()
        print_report(report, as_json)
        if report.failing:
            raise SystemExit(1)

    @steps.command("retry-from")
    @existing_store
    @click.argument("job_id")
    @click.argument("step")
    def steps_retry_from(app: App, job_id: str, step: str) -> None:
        """Run a dead, cancelled or succeeded durable job again from STEP: its checkpoints
        from STEP on are dropped, the earlier ones kept."""
        try:
            app.retry_from(job_id, step)
        except RetryRefused as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"job {job_id} queued again from step {step!r}")

    return steps
