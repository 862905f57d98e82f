"""Soak: many jobs through worker processes that are SIGKILLed again and again.

    python -m bench.soak                                  # 100,000 jobs on a fresh SQLite file
    python -m bench.soak --url redis://127.0.0.1:6379/0   # or: make soak SOAK_URL=...

Enqueues `--jobs` jobs, starts `--workers` worker processes (`deferq worker`, the
command users run) and, every 2 to 4 s (at random), SIGKILLs one of them and starts
another in its place, until every job has succeeded. Each run of a job appends the
job's number to a record file, so the runs are counted across killed processes.

After each kill the store is asked which jobs the dead worker still held (its
leases): those, and only those, may run again once their lease expires. Printed at
the end: jobs lost, re-runs (runs beyond the first of each job), kills, re-runs per
kill, the leases the killed workers held, and the time. Exit 1 when a job was lost or
the re-runs exceed the bound, kills x (concurrency + prefetch): a worker never holds
more leases than that (prefetch = concurrency, the worker's default).

On SQLite the store is a new file in a temporary directory unless --url names one;
on Redis a key prefix of its own is used and deleted; on PostgreSQL a schema of its
own (dropped at the end); on MySQL the URL's database, whose deferq tables are emptied
first. The workers use a lease of --lease seconds (5), so the jobs of a killed worker
come back quickly; production's default is 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import deferq

ROOT = Path(__file__).resolve().parent.parent
TASK = "soak"

# The workers import this module (`--app bench.soak:app`): the store and lease come from
# the environment the soak gives them.
app = deferq.App(os.environ.get("DEFERQ_URL", "memory://"), lease=float(os.environ.get("DEFERQ_SOAK_LEASE", "5")))


@app.task(name=TASK, max_attempts=100)  # the soak counts re-runs; no job may go dead
def soak(i: int) -> None:
    fd = os.open(os.environ["DEFERQ_SOAK_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"%d\n" % i)  # one write: atomic with O_APPEND, even if killed next
    finally:
        os.close(fd)


class Soak:
    def __init__(self, args: argparse.Namespace, url: str, workdir: Path) -> None:
        self.args = args
        self.url = url
        self.record = workdir / "runs.log"
        self.logs = workdir / "workers.log"
        self.workers: list[subprocess.Popen[bytes]] = []
        self.held: list[list[int]] = []  # per kill: the jobs the killed worker held (leases)
        self.rng = random.Random(args.seed)

    def start_worker(self) -> subprocess.Popen[bytes]:
        env = {
            **os.environ, "DEFERQ_URL": self.url, "DEFERQ_SOAK_RECORD": str(self.record),
            "DEFERQ_SOAK_LEASE": str(self.args.lease),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        env.pop("DEFERQ_APP", None)
        with self.logs.open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "deferq", "worker", "--app", "bench.soak:app",
                 "--url", self.url, "--concurrency", str(self.args.concurrency),
                 "--log-level", "warning"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log,
            )

    def kill_one(self, store: deferq.App) -> None:
        index = self.rng.randrange(len(self.workers))
        victim = self.workers[index]
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        # What the dead worker held is what may run again: its leases, in the store.
        active = store.list_jobs("active", limit=10_000)
        self.held.append([int(job.args[0]) for job in active if f":{victim.pid}:" in (job.worker or "")])
        self.workers[index] = self.start_worker()

    def succeeded(self, store: deferq.App) -> int:
        return sum(stats.counts.get("succeeded", 0) for stats in store.queue_stats().values())

    def run(self) -> dict[str, Any]:
        args = self.args
        store = deferq.App(self.url)
        try:
            for start in range(0, args.jobs, 1000):
                calls = [deferq.Call(TASK, (i,), {}) for i in range(start, min(start + 1000, args.jobs))]
                store.enqueue_many(calls)
            began = time.monotonic()
            self.workers = [self.start_worker() for _ in range(args.workers)]
            deadline = began + args.timeout
            # the first kill as soon as jobs are done (a fast machine finishes a short run
            # within kill-min of the start), then one every kill-min..kill-max seconds
            next_kill: float | None = None
            done = 0
            while time.monotonic() < deadline:
                done = self.succeeded(store)
                if done >= args.jobs:
                    break
                if next_kill is None and done:
                    next_kill = time.monotonic()
                if next_kill is not None and time.monotonic() >= next_kill:
                    self.kill_one(store)
                    next_kill = time.monotonic() + self.rng.uniform(args.kill_min, args.kill_max)
                time.sleep(0.2)
            seconds = time.monotonic() - began
            states = Counter({s: n for q in store.queue_stats().values() for s, n in q.counts.items() if n})
        finally:
            for worker in self.workers:
                worker.terminate()
            for worker in self.workers:
                try:
                    worker.wait(30)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait(10)
            store.close()
        text = self.record.read_text() if self.record.exists() else ""
        runs = Counter(int(line) for line in text.split())  # job number -> times it ran
        kills = len(self.held)
        bound = kills * 2 * args.concurrency  # concurrency + prefetch (= concurrency)
        reruns = sum(runs.values()) - len(runs)
        # A re-run is explained by a kill when a killed worker held that job's lease.
        times_held = Counter(i for held in self.held for i in held)
        unexplained = sum(max(0, n - 1 - times_held[i]) for i, n in runs.items())
        per_kill = [sum(1 for i in held if runs[i] > 1) for held in self.held]
        return {
            "store": urlsplit(self.url).scheme, "jobs": args.jobs, "workers": args.workers,
            "concurrency": args.concurrency, "lease": args.lease,
            # lost: not succeeded in the end (a job cannot succeed without a recorded run)
            "lost": args.jobs - min(done, args.jobs), "never_ran": args.jobs - len(runs),
            "states": dict(states),
            "reruns": reruns, "kills": kills,
            "reruns_per_kill": round(reruns / kills, 1) if kills else 0.0,
            "most_reruns_after_one_kill": max(per_kill, default=0),
            "unexplained_reruns": unexplained,
            "most_reruns_of_one_job": max(runs.values(), default=1) - 1,
            "held_at_kills": sum(map(len, self.held)), "most_held": max(map(len, self.held), default=0),
            "bound_per_kill": 2 * args.concurrency, "bound": bound, "seconds": round(seconds, 1),
            "timed_out": done < args.jobs,
        }


def with_query(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.update(options)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


def prepare(url: str | None, workdir: Path) -> tuple[str, Callable[[], None]]:
    """The soak's own store on `url`, and a function that removes it afterwards."""
    if not url:
        return f"sqlite:///{workdir}/soak.db", lambda: None
    scheme = urlsplit(url).scheme
    if scheme.startswith("redis") or scheme in ("rediss", "unix"):
        prefix = f"soak{uuid.uuid4().hex[:8]}"
        soak_url = with_query(url, prefix=prefix)

        def drop_redis() -> None:
            import redis

            client = redis.Redis.from_url(url.split("?", 1)[0])
            for pattern in (f"{{{prefix}:*", f"{prefix}:*"):
                keys = list(client.scan_iter(match=pattern, count=1000))
                for i in range(0, len(keys), 500):
                    client.delete(*keys[i : i + 500])
            client.close()

        return soak_url, drop_redis if scheme == "redis" else (lambda: None)
    if scheme in ("postgresql", "postgres"):
        schema = f"deferq_soak_{uuid.uuid4().hex[:8]}"

        def drop_schema() -> None:
            import psycopg

            with psycopg.connect(url.split("?", 1)[0], autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

        return with_query(url, schema=schema), drop_schema
    if scheme in ("mysql", "mariadb"):
        store = deferq.App(url)
        store.purge(["succeeded", "dead", "cancelled"])
        if any(sum(stats.counts.values()) for stats in store.queue_stats().values()):
            store.close()
            raise SystemExit(f"soak: the database of {url} has unfinished deferq jobs: use an empty one")
        store.close()
        return url, lambda: None
    return url, lambda: None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("SOAK_URL") or None,
                        help="the store (default: a new SQLite file in a temporary directory)")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease", type=float, default=5.0, help="the workers' lease, seconds")
    parser.add_argument("--kill-min", type=float, default=2.0)
    parser.add_argument("--kill-max", type=float, default=4.0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="deferq-soak-"))
    url, cleanup = prepare(args.url, workdir)
    try:
        result = Soak(args, url, workdir).run()
        problems = verdict(result)
        if problems:
            tail = (workdir / "workers.log").read_text(errors="replace")[-3000:]
            print(f"soak: the workers' log ends:\n{tail}", file=sys.stderr)
    finally:
        cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
    else:
        print(summary(result, args))
    for problem in problems:
        print(f"soak: FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


def verdict(result: dict[str, Any]) -> list[str]:
    """What went wrong, in sentences (none: the soak passed)."""
    problems = []
    if result["lost"]:
        problems.append(f"{result['lost']} job(s) did not succeed ({result['states']})")
    if result["reruns"] > result["bound"]:
        problems.append(f"{result['reruns']} re-runs for {result['kills']} kills: more than "
                        f"{result['bound_per_kill']} per kill")
    if result["most_reruns_after_one_kill"] > result["bound_per_kill"]:
        problems.append(f"one kill was followed by {result['most_reruns_after_one_kill']} re-runs: "
                        f"more than {result['bound_per_kill']}")
    return problems


def summary(result: dict[str, Any], args: argparse.Namespace) -> str:
    unexplained = result["unexplained_reruns"]
    return (
        f"soak on {result['store']}: {result['jobs']:,} jobs, {result['workers']} workers x "
        f"{result['concurrency']} slots, lease {result['lease']:g}s, one SIGKILLed every "
        f"{args.kill_min:g}-{args.kill_max:g}s\n"
        f"  lost     {result['lost']}\n"
        f"  re-runs  {result['reruns']}: {result['reruns_per_kill']} per kill, at most "
        f"{result['most_reruns_after_one_kill']} after one kill (bound {result['bound_per_kill']}); "
        f"{unexplained or 'none'} not explained by a kill\n"
        f"  kills    {result['kills']}; the killed workers held {result['held_at_kills']} leases, "
        f"at most {result['most_held']} at once\n"
        f"  time     {result['seconds']}s" + ("  (gave up: --timeout)" if result["timed_out"] else "")
    )


if __name__ == "__main__":
    sys.exit(main())
