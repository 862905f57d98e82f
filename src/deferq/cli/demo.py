"""`deferq demo`: a one-minute guided tour on embedded SQLite.

It enqueues a mix of jobs (immediate, delayed, high priority, failing then
succeeding, always failing into the dead letters, one that times out), starts two
worker processes, shows the states live, and ends with a summary.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from .. import backoff
from ..app import App
from ..context import current_job
from ..errors import Retry
from ..job import Job

app = App(os.environ.get("DEFERQ_URL", "sqlite:///deferq-demo.db"))
quick_retry = backoff.fixed(1.0)


@app.task(queue="email")
def send_welcome_email(user: str) -> str:
    time.sleep(random.uniform(0.1, 0.4))  # talking to an SMTP server
    return f"welcome e-mail sent to {user}"


@app.task(queue="email", priority="high")
def send_password_reset(user: str) -> str:
    time.sleep(0.05)
    return f"reset link sent to {user}"


@app.task(queue="sms", max_attempts=4, backoff=quick_retry)
def send_sms(phone: str) -> str:
    job = current_job()
    if job is not None and job.attempts < 3:
        raise ConnectionError(f"SMS gateway busy (attempt {job.attempts})")
    return f"SMS delivered to {phone} on attempt {job.attempts if job else '?'}"


@app.task(queue="webhooks", max_attempts=3, backoff=quick_retry)
def call_partner_webhook(url: str) -> None:
    raise Retry(delay=1.0, reason=f"{url} answered 503")


@app.task(queue="reports", timeout=1.0, max_attempts=2, backoff=quick_retry)
async def build_report(name: str) -> str:
    await asyncio.sleep(10)  # far past its 1 s timeout: cancelled, retried, then dead
    return name


@app.task(queue="reminders")
def remind(user: str, what: str) -> str:
    return f"reminded {user}: {what}"


def same_key_twice(jobs: list[Job]) -> str:
    """What the second enqueue with the first one's key returned."""
    first, second = jobs
    if second.id == first.id:
        return f"the second call returned {second.id} again: no second job"
    return f"the second call made another job, {second.id}"  # never: the key forbids it


# (what is enqueued, how, and what to say of the jobs it returned)
STEPS: list[tuple[str, Callable[[], list[Job]], Callable[[list[Job]], str] | None]] = [
    ("3 welcome e-mails, enqueued now",
     lambda: [send_welcome_email.enqueue(u) for u in ("ana", "bo", "chen")], None),
    ("1 password reset at high priority", lambda: [send_password_reset.enqueue("dana")], None),
    ("2 reminders due in 4 s and 8 s", lambda: [remind.options(delay=4).enqueue("eve", "renew plan"),
                                                remind.options(delay=8).enqueue("fay", "check payment")], None),
    ("1 SMS whose gateway fails twice, then succeeds", lambda: [send_sms.enqueue("+15550100")], None),
    ("1 webhook that always fails: dead after 3 attempts",
     lambda: [call_partner_webhook.enqueue("https://partner.example/hook")], None),
    ("1 async report that overruns its 1 s timeout", lambda: [build_report.enqueue("q3")], None),
    ("1 reminder with the key remind:eve, then the same reminder again",
     lambda: [remind.options(key="remind:eve", delay=4).enqueue("eve", "plan renews tomorrow"),
              remind.options(key="remind:eve", delay=4).enqueue("eve", "plan renews tomorrow")], same_key_twice),
]


def _state_table() -> Table:
    table = Table(title="jobs by queue and state (live)")
    columns = ("scheduled", "queued", "active", "succeeded", "dead")
    table.add_column("queue")
    for column in columns:
        table.add_column(column, justify="right")
    for queue, counts in app.stats().items():
        table.add_row(queue, *(str(counts[c]) for c in columns))
    return table


def _unfinished() -> int:
    return sum(c["scheduled"] + c["queued"] + c["active"] for c in app.stats().values())


def _summary(jobs: list[Job]) -> Table:
    table = Table(title="what happened")
    for column in ("task", "state", "attempts", "result or last error"):
        table.add_column(column)
    seen = set()
    for job in jobs:
        if job.id in seen:
            continue
        seen.add(job.id)
        job = app.get(job.id) or job
        error = (job.error or "").strip().splitlines()
        outcome = str(job.result) if job.state == "succeeded" else (error[-1] if error else "")
        colour = {"succeeded": "green", "dead": "red"}.get(job.state, "yellow")
        table.add_row(job.task, f"[{colour}]{job.state}[/]", str(job.attempts), outcome[:70])
    return table


def run_demo(url: str | None = None, timeout: float = 55.0) -> int:
    console = Console()
    if url is None:  # a fresh file in the working directory, kept for you to explore
        for leftover in ("deferq-demo.db", "deferq-demo.db-wal", "deferq-demo.db-shm"):
            if os.path.exists(leftover):
                os.remove(leftover)
        url = "sqlite:///deferq-demo.db"
    app.url = url
    app.close()
    console.rule("[bold]deferq demo")
    console.print(f"Store: [cyan]{url}[/] (an embedded SQLite file: nothing else to run)\n")
    jobs: list[Job] = []
    for text, enqueue, say in STEPS:
        made = enqueue()
        jobs += made
        console.print(f"  enqueued {text}")
        if say is not None:
            console.print(f"    {say(made)}")
    console.print("\nStarting 2 worker processes: "
                  "[cyan]deferq worker --app deferq.cli.demo:app -c 4[/]\n")
    env = {**os.environ, "DEFERQ_URL": url}
    queues = [arg for q in ("email", "sms", "webhooks", "reports", "reminders") for arg in ("-q", q)]
    workers = [_start_worker(env, url, queues) for _ in range(2)]
    started = time.monotonic()
    try:
        with Live(_state_table(), console=console, refresh_per_second=4) as live:
            while _unfinished() and time.monotonic() - started < timeout:
                time.sleep(0.25)
                live.update(Group(_state_table(), f"{time.monotonic() - started:.1f} s\n"))
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)
    console.print(_summary(jobs))
    left = _unfinished()
    console.print(
        f"\nDone in {time.monotonic() - started:.1f} s. Try: [cyan]deferq stats --url {url}[/], "
        f"[cyan]deferq dead list --url {url}[/]." if not left else f"{left} job(s) unfinished."
    )
    app.close()
    return 0 if not left else 1


def _start_worker(env: dict[str, str], url: str, queues: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "deferq", "worker", "--app", "deferq.cli.demo:app",
         "--url", url, "-c", "4", "--log-level", "error", *queues],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
