"""`deferq bench`: the workloads of shared/PEERS.md, measured on any store URL.

- enqueue: one `task.enqueue` call per job (args: an int and a 32-char string)
- batch:   `app.enqueue_many`, 100 jobs per call
- process: N no-op jobs enqueued first, then worker processes started; rate is
           (N-1) / (last completion - first completion)
- pickup:  idle workers; one job at a time; enqueue-to-start latency
- delay:   500 jobs all due 2 s ahead; lateness of each start against its due time
- rss:     resident memory of the worker processes after the processing run

It leaves the store as it found it: only its own queue's jobs are deleted (never other
queues' finished jobs), its workers take no part in firing schedules, and at the end
its queue's history counters and its place in the store's list of queues are removed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from ..app import App
from ..backends.base import Outcome, OutcomeKind
from ..backends.history import minute_of
from ..job import Job, JobState

app = App(os.environ.get("DEFERQ_URL", "memory://"))
ARG = "x" * 32
QUEUE = "bench"
WORKLOADS = ("enqueue", "batch", "process", "pickup", "delay")


@app.task(queue=QUEUE)
def bench_noop(i: int, text: str) -> None:
    return None


@app.task(queue=QUEUE)
def bench_stamp(i: int) -> float:
    return time.time()  # when the job started, on this machine's clock


# -- measurements (also used by bench/peers) ----------------------------------------


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 of samples, in milliseconds."""
    if not samples:
        return (float("nan"), float("nan"))
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (statistics.median(ordered) * 1000, p99 * 1000)


def measure_enqueue(bound: App, jobs: int, tick: Callable[[int], None]) -> float:
    task = bound.tasks["bench_noop"]
    start = time.perf_counter()
    for i in range(jobs):
        task.enqueue(i, ARG)
        if i % 1000 == 999:
            tick(1000)
    return rate(jobs, time.perf_counter() - start)


def measure_batch(bound: App, jobs: int, tick: Callable[[int], None], size: int = 100) -> float:
    task = bound.tasks["bench_noop"]
    start = time.perf_counter()
    for first in range(0, jobs, size):
        bound.enqueue_many([task.call(i, ARG) for i in range(first, min(first + size, jobs))])
        tick(size)
    return rate(jobs, time.perf_counter() - start)


@contextmanager
def workers(url: str, processes: int, concurrency: int | None) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Worker processes running this module's tasks; stopped (and reaped) on exit.
    `concurrency` None: the worker's defaults as a user starts it (its slots, job lines
    at INFO, schedules on), else these slots, warnings only and no schedules."""
    env = {**os.environ, "DEFERQ_URL": url}
    command = [sys.executable, "-m", "deferq", "worker", "--app", "deferq.cli.bench:app",
               "--url", url, "-q", QUEUE]
    if concurrency is not None:
        command += ["-c", str(concurrency), "--log-level", "warning", "--no-upkeep"]
    # Their job lines go to a file, as a deployed worker's do, not among the figures;
    # its end is shown if the measurement fails.
    with tempfile.TemporaryFile() as log:
        procs = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
                 for _ in range(processes)]
        try:
            yield procs
        except BaseException:
            stop(procs)
            log.seek(max(0, log.seek(0, os.SEEK_END) - 3000))
            sys.stderr.write(log.read().decode(errors="replace"))
            raise
        finally:
            stop(procs)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop worker processes as a user would (SIGTERM), and reap them."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def rss_mib(procs: list[subprocess.Popen[bytes]]) -> float:
    total = 0
    for proc in procs:
        try:
            with open(f"/proc/{proc.pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.002) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the workers did not finish in time")
        time.sleep(interval)


def succeeded(bound: App) -> int:
    count: int = bound.stats().get(QUEUE, {}).get("succeeded", 0)
    return count


def measure_process(bound: App, url: str, jobs: int, processes: int, concurrency: int | None,
                    tick: Callable[[int], None]) -> tuple[float, float]:
    """Rate of no-op jobs by `processes` workers (`concurrency` None: as `deferq worker`
    starts with its defaults); and their RSS in MiB."""
    task = bound.tasks["bench_noop"]
    first_ids: list[str] = []
    for first in range(0, jobs, 1000):
        batch = bound.enqueue_many([task.call(i, ARG) for i in range(first, min(first + 1000, jobs))])
        if not first_ids:
            first_ids = [job.id for job in batch[:64]]
    with workers(url, processes, concurrency) as procs:
        done = 0
        deadline = time.monotonic() + max(120, jobs / 200)
        while done < jobs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {done} of {jobs} jobs finished")
            # the rate comes from the jobs' finish times in the store: this loop only
            # notices the end, and polls seldom so as not to compete with the workers
            time.sleep(0.25)
            now_done = succeeded(bound)
            tick(now_done - done)
            done = now_done
        memory = rss_mib(procs)
    finished = [j.finished_at for j in map(bound.get, first_ids) if j and j.finished_at]
    last = bound.list_jobs("succeeded", QUEUE, limit=1)[0].finished_at or 0
    return rate(jobs - 1, last - min(finished)), memory


def measure_pickup(bound: App, url: str, samples: int, processes: int,
                   tick: Callable[[int], None]) -> tuple[float, float]:
    task = bound.tasks["bench_stamp"]
    latencies: list[float] = []
    with workers(url, processes, 1):
        task.enqueue(-1)  # warm up: the workers are running and idle after this
        wait_for(lambda: succeeded(bound) >= 1, 60, 0.05)
        time.sleep(0.5)
        for i in range(samples):
            sent = time.time()
            job = task.enqueue(i)

            def done(job: Job = job) -> bool:
                return (bound.get(job.id) or job).state == "succeeded"

            wait_for(done, 30, 0.005)
            latencies.append(started_at(bound, job) - sent)
            tick(1)
            time.sleep(0.02)  # let the workers go idle again
    return percentiles(latencies)


def measure_delay(bound: App, url: str, jobs: int, processes: int, concurrency: int,
                  tick: Callable[[int], None]) -> tuple[float, float]:
    task = bound.tasks["bench_stamp"]
    with workers(url, processes, concurrency):
        task.enqueue(-1)
        wait_for(lambda: succeeded(bound) >= 1, 60, 0.05)
        due = bound.backend.now() + 2.0
        queued = bound.enqueue_many([task.options(at=due).call(i) for i in range(jobs)])
        wait_for(lambda: succeeded(bound) >= jobs + 1, 60, 0.25)  # starts are stamped by the jobs
    late = [started_at(bound, job) - due for job in queued]
    tick(jobs)
    return percentiles(late)


def started_at(bound: App, job: Job) -> float:
    """When a bench_stamp job started: its result, read back from the store."""
    stored = bound.get(job.id)
    if stored is None:
        raise LookupError(f"job {job.id} is no longer in the store")
    stamp: float = stored.result
    return stamp


def clean(bound: App) -> None:
    """Delete the bench queue's finished jobs (and no other queue's)."""
    for state in ("succeeded", "dead", "cancelled"):
        while found := bound.backend.list_jobs(JobState(state), QUEUE, limit=1000):
            for job in found:
                bound.backend.delete(job.id)


def forget(bound: App, started: float) -> None:
    """Remove what the store still keeps of the bench queue once its jobs are deleted:
    its history counters since the run started, and its place in the list of queues."""
    backend = bound.backend
    backend.history_forget(QUEUE, minute_of(started), minute_of(time.time()) + 2)
    backend.forget_queue(QUEUE)


# -- the command ----------------------------------------------------------------------


def run_bench(url: str | None, jobs: int, processes: int, as_json: bool,
              only: set[str] | None = None, concurrency: int = 16) -> dict[str, Any]:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    tempdir = None
    if url is None:
        tempdir = tempfile.TemporaryDirectory(prefix="deferq-bench-")
        url = f"sqlite:///{tempdir.name}/bench.db"
    app.url = url
    app.close()
    wanted = only or set(WORKLOADS)
    results: dict[str, Any] = {"url": _redact(url), "jobs": jobs, "processes": processes}
    console = Console(stderr=True)
    started = time.time()
    try:
        with Progress(console=console, transient=True, disable=as_json) as progress:

            def stage(name: str, total: int) -> Callable[[int], None]:
                task_id = progress.add_task(name, total=total)
                return lambda n: progress.advance(task_id, n)

            if "enqueue" in wanted:
                results["enqueue_per_s"] = measure_enqueue(app, jobs, stage("enqueue one by one", jobs))
                clean_waiting(app)
            if "batch" in wanted:
                results["batch_per_s"] = measure_batch(app, jobs, stage("enqueue in batches", jobs))
                clean_waiting(app)
            if "process" in wanted:
                rate_, memory = measure_process(
                    app, url, jobs, processes, concurrency, stage("process no-op jobs", jobs)
                )
                results["process_per_s"], results["worker_rss_mib"] = rate_, memory
                clean(app)
            if "pickup" in wanted:
                p50, p99 = measure_pickup(app, url, 200, processes, stage("pickup latency", 200))
                results["pickup_ms"] = {"p50": p50, "p99": p99}
                clean(app)
            if "delay" in wanted:
                p50, p99 = measure_delay(app, url, 500, processes, concurrency, stage("delay lateness", 500))
                results["delay_late_ms"] = {"p50": p50, "p99": p99}
                clean(app)
    finally:
        app.close()  # its history counts are written now, so the next line finds them
        if tempdir is None:
            forget(app, started)
            app.close()
        else:
            tempdir.cleanup()
    if as_json:
        print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
    else:
        table = Table(title=f"deferq bench on {results['url']} ({jobs} jobs, {processes} worker processes)")
        table.add_column("workload")
        table.add_column("result", justify="right")
        for label, value in describe(results):
            table.add_row(label, value)
        Console().print(table)
    return results


def describe(results: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for key, label in [("enqueue_per_s", "enqueue, one call per job"),
                       ("batch_per_s", "enqueue, 100 per call"),
                       ("process_per_s", "processed no-op jobs")]:
        if key in results:
            rows.append((label, f"{results[key]:,.0f} jobs/s"))
    if "worker_rss_mib" in results:
        rows.append(("worker RSS (all processes)", f"{results['worker_rss_mib']:.0f} MiB"))
    for key, label in [("pickup_ms", "pickup latency p50 / p99"),
                       ("delay_late_ms", "delay lateness p50 / p99")]:
        if key in results:
            rows.append((label, f"{results[key]['p50']:.2f} / {results[key]['p99']:.2f} ms"))
    return rows


def clean_waiting(bound: App) -> None:
    """Drop the jobs an enqueue workload left waiting, so the next workload starts empty."""
    while leased := bound.backend.reserve([QUEUE], 5000, "bench-drain", 60, (0, 1, 2)):
        bound.backend.settle([Outcome(job, OutcomeKind.SUCCEEDED) for job in leased])
    clean(bound)


def _redact(url: str) -> str:
    if "@" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
