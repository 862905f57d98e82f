"""Schedules: `python -m bench.schedules [URL] [--count N] [--seconds S] [--only cost|fleet]`.

1. cost: the next tick of one schedule, per kind (every=, a five-field cron, a six-field
   cron; in UTC, in Europe/Moscow, and in America/New_York and Europe/Berlin across
   their daylight-saving changes): µs of this thread's CPU per `next_after` (CPU, not
   wall time: a shared machine's preemption is not the call's cost), mean and p99 over 2,000
   moments spread over 2026 and 2027 (every change of the zone crossed), after one
   warm-up call (each expression is parsed, and each zone-year's changes found, once
   per process).
2. fleet: N schedules (1,000 by default) in the store at URL (a new SQLite file by
   default), fired for S seconds (40) by 2 plain `deferq worker` processes started as
   you start them; each schedule ticks every 10 seconds, so all N come due at once:
   half `every=10`, half the six-field cron `*/10 * * * * *` in America/New_York. How
   late each tick's job was enqueued (created_at - tick) and finished (finished_at -
   tick, a no-op job): p50 / p99, and whether every tick fired exactly once.
   It removes its schedules and their jobs afterwards.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import deferq
from deferq.job import JobState
from deferq.schedules.timing import Timing
from deferq.upkeep.leader import current_leader

app = deferq.App()  # the workers' App (--app bench.schedules:app --url URL)
QUEUE, EVERY, PREFIX = "bench-ticks", 10.0, "bench-tick-"
ROOT = Path(__file__).resolve().parent.parent


@app.task(queue=QUEUE)
def bench_tick() -> None:
    """A tick's job: nothing, so what is measured is the firing."""


KINDS = [  # (kind, Timing)
    ("every=60", Timing(every=60)),
    ("5-field cron, UTC", Timing("*/5 * * * *")),
    ("5-field cron, Europe/Moscow", Timing("*/5 * * * *", tz="Europe/Moscow")),
    ("5-field cron, America/New_York", Timing("*/5 * * * *", tz="America/New_York")),
    ("5-field daily 02:30, Europe/Berlin", Timing("30 2 * * *", tz="Europe/Berlin")),
    ("6-field cron, UTC", Timing("*/10 * * * * *")),
    ("6-field cron, Europe/Moscow", Timing("*/10 * * * * *", tz="Europe/Moscow")),
    ("6-field cron, America/New_York", Timing("*/10 * * * * *", tz="America/New_York")),
    ("6-field every second, Europe/Berlin", Timing("* * * * * *", tz="Europe/Berlin")),
]


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def costs() -> list[str]:
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    moments = [start + i * (2 * 365 * 86400 / 2000) + 0.37 for i in range(2000)]
    lines = ["next tick, µs of CPU per call (mean / p99 over 2,000 moments in 2026-2027):"]
    for kind, timing in KINDS:
        timing.next_after(start)  # parse once, as a process does
        spent = []
        for moment in moments:
            began = time.thread_time_ns()
            timing.next_after(moment)
            spent.append((time.thread_time_ns() - began) / 1e3)
        lines.append(f"  {kind:38} {statistics.fmean(spent):7.1f} / {percentile(spent, 99):7.1f}")
    return lines


def start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("DEFERQ_URL", None)
    command = [sys.executable, "-m", "deferq", "worker", "--app", "bench.schedules:app", "--url", url,
               "-q", QUEUE, "-c", "16"]
    with open(log, "ab") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def ticked(store: deferq.App) -> list[deferq.Job]:
    return [job for state in JobState for job in store.list_jobs(state, queue=QUEUE, limit=1_000_000)
            if (job.key or "").startswith(f"schedule:{PREFIX}")]


def fleet(url: str, count: int, seconds: float, folder: Path) -> list[str]:
    store = deferq.App(url)
    for n in range(count):
        timing = {"every": EVERY} if n % 2 else {"cron": "*/10 * * * * *", "tz": "America/New_York"}
        store.schedules.add(f"{PREFIX}{n:04d}", bench_tick.call(), **timing)
    workers = [start_worker(url, folder / f"worker{n}.log") for n in range(2)]
    try:
        began = time.time()
        while current_leader(store.backend) is None and time.time() < began + 30:
            time.sleep(0.2)
        first = (time.time() // EVERY + 1) * EVERY  # the first whole tick after a leader is elected
        last = first + seconds
        time.sleep(max(0.0, last - time.time() + 5))  # the last tick, and 5 s for its jobs to finish
        jobs = ticked(store)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(60)
        for n in range(count):
            store.schedules.remove(f"{PREFIX}{n:04d}")
        for job in ticked(store):
            store.backend.delete(job.id)
        store.close()
    tick_of = {job.id: float((job.key or "").rsplit(":", 1)[1]) for job in jobs}
    measured = [job for job in jobs if first <= tick_of[job.id] <= last]
    per_tick = Counter((job.key or "") for job in measured)
    expected = count * (int(seconds // EVERY) + 1)
    enqueued = [(job.created_at - tick_of[job.id]) * 1e3 for job in measured]
    finished = [(job.finished_at - tick_of[job.id]) * 1e3 for job in measured if job.finished_at]
    return [f"{count} schedules, 2 workers, {seconds:g} s: {len(measured)} ticks of {expected} expected, "
            f"{sum(1 for n in per_tick.values() if n > 1)} doubled",
            f"  enqueued after its tick, ms: {late(enqueued)}",
            f"  finished after its tick, ms: {late(finished)}" if finished else "  no tick's job finished"]


def late(values: list[float]) -> str:
    return f"p50 {percentile(values, 50):.0f} / p99 {percentile(values, 99):.0f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.schedules", description=__doc__.split("\n")[0])
    parser.add_argument("url", nargs="?", help="the store (default: a new SQLite file)")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--only", choices=("cost", "fleet"))
    args = parser.parse_args(argv)
    if args.only != "fleet":
        print("\n".join(costs()), flush=True)
    if args.only != "cost":
        with tempfile.TemporaryDirectory() as folder:
            url = args.url or f"sqlite:///{folder}/bench.db"
            print("\n".join(fleet(url, args.count, args.seconds, Path(folder))), flush=True)


if __name__ == "__main__":
    main()
