"""Worker CPU per 1,000 jobs and drain rate of `deferq worker` processes, A/B between
source trees, interleaved (load on a shared machine disturbs CPU time far less than
wall-clock rates).

    .venv/bin/python -m bench.worker_cpu --jobs 20000 --task noop --rounds 3 \
        --tree main=/path/to/main/src --tree new=src [-- extra worker args]

Each round runs every tree once, in turn: the queue is paused, N jobs are enqueued, the
worker processes start (the command a user types: `deferq worker --app ... --url ...`,
library defaults unless extra args are given) and go idle; their CPU time is read from
/proc, the queue resumed, and when every job has succeeded their CPU time is read again.
So start-up is not counted. Printed: per tree, the median over rounds of the workers'
CPU ms per 1,000 jobs and of the drain rate (jobs / seconds from resume to the last
completion seen by polling every 10 ms), and the least CPU and best rate of any round
(on a loaded machine the least CPU is the steadier figure: load only adds to it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from deferq import App

URL = os.environ.get("BENCH_CPU_URL", "redis://127.0.0.1:6379/7?prefix=cpubench")
COUNTER = os.environ.get("BENCH_CPU_COUNTER", "redis://127.0.0.1:6379/8")
QUEUE = "cpu"
ARG = "x" * 32
ROOT = Path(__file__).resolve().parents[1]

app = App(URL)
_counter: redis.Redis | None = None


@app.task(queue=QUEUE)
def noop(i: int, text: str) -> None:
    return None


@app.task(queue=QUEUE)
def incr(i: int, text: str) -> None:
    global _counter
    if _counter is None:
        _counter = redis.Redis.from_url(COUNTER)
    _counter.incr("cpubench:count")


def cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def succeeded() -> int:
    count: int = app.stats().get(QUEUE, {}).get("succeeded", 0)
    return count


def empty(url: str) -> None:
    """A clean store at `url`: its Redis database flushed, or its SQLite file removed."""
    if url.startswith("sqlite:"):
        for suffix in ("", "-wal", "-shm"):
            Path(url.split("///", 1)[1].split("?")[0] + suffix).unlink(missing_ok=True)
    else:
        redis.Redis.from_url(url.split("?")[0]).flushdb()


def one_run(src: str, task: str, jobs: int, processes: int, extra: list[str], url: str,
            profile: str = "") -> tuple[float, float]:
    """(worker CPU ms per 1,000 jobs, jobs/s) of one drain by the tree at `src`, on the
    Redis or SQLite store at `url` (emptied first)."""
    from deferq.cli.bench import stop  # here: the workers import this module from a tree that may lack it
    app.close()
    app.url = url
    empty(url)
    app.close()
    app.pause(QUEUE)
    call = app.tasks[task].call
    for first in range(0, jobs, 1000):
        app.enqueue_many([call(i, ARG) for i in range(first, min(first + 1000, jobs))])
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}"}
    command = [sys.executable, "-m", "deferq", "worker", "--app", "bench.worker_cpu:app", "--url", url, *extra]
    errors = tempfile.TemporaryFile()
    procs = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
             for _ in range(processes)]
    try:
        deadline = time.monotonic() + 60
        while len(app.backend.kv_list("workers")) < processes:  # each says so once it is up
            if any(proc.poll() is not None for proc in procs) or time.monotonic() > deadline:
                errors.seek(0)
                raise RuntimeError(f"a worker did not start: {' '.join(command)}\n{errors.read().decode()}")
            time.sleep(0.1)
        time.sleep(1.0)  # and idle in their wait
        pids = [proc.pid for proc in procs]
        spy = None
        if profile:  # py-spy samples the first worker while it drains (collapsed stacks)
            spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pids[0]),
                                    "--format", "raw", "--rate", "500", "--gil", "-o", profile],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        before = cpu_seconds(pids)
        started = time.perf_counter()
        app.resume(QUEUE)
        deadline = time.monotonic() + 300
        while succeeded() < jobs:
            if time.monotonic() > deadline:
                raise TimeoutError("the workers did not finish")
            time.sleep(0.01)
        seconds = time.perf_counter() - started
        spent = cpu_seconds(pids) - before
        if spy is not None:
            spy.send_signal(2)
            spy.wait(timeout=30)
    finally:
        stop(procs)
        app.close()
    return spent / jobs * 1e6, jobs / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_cpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--task", choices=("noop", "incr"), default="noop")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default=URL)
    parser.add_argument("--profile", default="", help="py-spy samples of one worker, to files of this prefix")
    parser.add_argument("--tree", action="append", required=True, help="name=path of a src folder (repeatable)")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    trees = dict(t.split("=", 1) for t in args.tree)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        for name, src in trees.items():
            profile = f"{args.profile}.{name}.{round_}.txt" if args.profile else ""
            cpu, rate = one_run(str(Path(src).resolve()), args.task, args.jobs, args.processes, extra, args.url,
                                profile)
            results[name].append((cpu, rate))
            print(f"round {round_ + 1} {name}: {cpu:.0f} ms CPU / 1,000 jobs, {rate:,.0f} jobs/s",
                  file=sys.stderr, flush=True)
    print(f"{args.task}, {args.jobs} jobs, {args.processes} processes, extra {extra or 'none'}, "
          f"medians of {args.rounds}:")
    for name, runs in results.items():
        cpu = statistics.median(r[0] for r in runs)
        rate = statistics.median(r[1] for r in runs)
        print(f"  {name}: {cpu:.0f} ms CPU per 1,000 jobs (least {min(r[0] for r in runs):.0f}), "
              f"{rate:,.0f} jobs/s (most {max(r[1] for r in runs):,.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
