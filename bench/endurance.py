"""Endurance: real workers and a real HTTP server under steady load for many minutes, per
store, watching every figure that time alone can make grow.

    python -m bench.endurance                        # 10 minutes, every store at once
    python -m bench.endurance --minutes 3 --light    # the slice `make test` runs
    python -m bench.endurance --stores redis --json  # one store, JSON for machines

Per store (SQLite, Redis, Redis Cluster, PostgreSQL, MariaDB/MySQL; each a store of its
own: bench/endurance_stores.py), each store in a process of its own and all at once:
`deferq worker` processes and one `deferq serve` (bench/endurance_tasks.py), with
long jobs that report progress once a second, short jobs, `job.wait` callers, a
rate-limited and a concurrency-limited task, a queue paused and resumed, the producer's
history recorder, and HTTP clients enqueueing and reading jobs (bench/endurance_load.py).
Finished jobs older than a minute are purged as a deployment would.

Every `--interval` seconds (10) it samples: the store's connections (Redis CLIENT LIST,
PostgreSQL pg_stat_activity, the MySQL processlist, for SQLite the open descriptors of
the database file), the workers' descriptors, threads and RSS (summed over the workers)
and the server's (for SQLite, descriptors other than the database's files), and Redis's
used_memory less the jobs it holds (held jobs x the bytes one job took when the run
began).

It passes when:
- each figure is flat after the warm-up: the median sample of the last third is at most
  the largest of the baseline (the samples from the warm-up's end to the end of the first
  third) plus a small constant (`BOUNDS`: connections +4, descriptors +8, threads +6), and
  its largest at most three times that constant above (a pool may open a few more under
  a burst of concurrent calls and close them after; a leak keeps growing), or at most
  the figure's ceiling (SQLite's connections: each thread opens its own when it first
  uses the store, so their count may rise late to the threads', plus one a process that
  a thread that ended leaves until the next opens; a server's: a pool opens one for each
  thread calling at the same moment, which rare peaks may reach late, so the threads of
  every process, this one's included, times a Cluster's nodes; threads are watched as a
  figure of their own); for memory the
  largest sample of the last third is at most 1.2 x the baseline's + 16 MB (RSS) or + 4 MB
  (Redis);
- every job enqueued ran to its end exactly once (each run appends its job id to a
  record file) and none is left unfinished or dead;
- the workers' and the server's logs hold no store error (`LOG_ERRORS`) and the
  clients saw none (failed enqueues, waits, HTTP answers).
Exit status 1 when a store fails; its logs are kept (their folder is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import deferq
from bench import endurance_load as loads
from bench import endurance_stores as stores
from bench.endurance_report import table
from bench.endurance_tasks import PAUSABLE, make_app
from bench.redis_servers import free_port, stop

ROOT = Path(__file__).resolve().parent.parent
APP = "bench.endurance_tasks:app"
LOG_ERRORS = re.compile(r"Error|Too many connections|outcome dropped|could not")
# figure -> (kind, slack): "count" may grow by slack; "memory" by 20% and slack
BOUNDS: dict[str, tuple[str, float]] = {
    "connections": ("count", 4), "worker_fds": ("count", 8), "worker_threads": ("count", 6),
    "worker_rss_mb": ("memory", 16), "server_fds": ("count", 8), "server_threads": ("count", 6),
    "server_rss_mb": ("memory", 16), "redis_mb": ("memory", 4),
}
CALIBRATION_JOBS = 200
DATABASE = "deferq.db"  # the SQLite store's file (bench/endurance_stores.py)


@dataclass(frozen=True)
class Profile:
    """The load: seconds between jobs of each kind, and the workers."""

    workers: int = 2
    concurrency: int = 8
    long_every: float = 10.0  # one long job (20-60 s of progress) every ... s: ~4 running
    long_seconds: tuple[int, int] = (20, 60)
    short_every: float = 0.2
    rated_every: float = 0.5
    slotted_every: float = 1.0
    pausable_every: float = 1.0
    pause_every: float = 30.0  # paused for half of it
    waiter_pause: float = 0.5
    http_every: float = 0.3


FULL = Profile()
LIGHT = Profile(workers=2, concurrency=6, long_every=15.0, long_seconds=(20, 40), short_every=1.0,
                rated_every=2.0, slotted_every=3.0, pausable_every=3.0, pause_every=30.0,
                waiter_pause=2.0, http_every=1.5)


# -- one store -----------------------------------------------------------------------------


def run_store(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    profile = LIGHT if args.light else FULL
    folder = Path(tempfile.mkdtemp(prefix=f"deferq-endurance-{kind}-"))
    with stores.opened(kind, folder, args.postgres, args.mysql) as store:
        result = Run(kind, store, folder, profile, args).run()
    if result["passed"] and not args.keep_logs:
        shutil.rmtree(folder, ignore_errors=True)
    return result


class Run:
    def __init__(self, kind: str, store: stores.Store, folder: Path, profile: Profile,
                 args: argparse.Namespace) -> None:
        self.kind, self.store, self.folder, self.profile, self.args = kind, store, folder, profile, args
        self.record = folder / "runs.txt"  # not a *.log: the logs are scanned for errors
        self.app = make_app(store.url)
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {"worker": [], "server": []}
        self.per_job = 0.0  # Redis bytes one held job takes
        self.samples: list[dict[str, float | None]] = []

    def run(self) -> dict[str, Any]:
        load = loads.Load(self.app)
        try:
            self.app.backend.stats()  # opens (and migrates) the store before any process starts
            self.per_job = self.calibrate(load)
            with self.processes() as port:
                self.load(load, port)
                self.sample_for(self.args.minutes * 60)
                load.join()
                self.app.resume(PAUSABLE)
                self.drain(load.enqueued)
                self.stop_processes()
                return self.verdict(load)
        finally:
            self.app.close()

    def calibrate(self, load: loads.Load) -> float:
        """Bytes of Redis memory one queued job takes (0 on the SQL stores)."""
        if not self.store.redis_ports:
            return 0.0
        before = stores.redis_memory(self.store.redis_ports)
        for job in self.app.enqueue_many([self.app.tasks["short"].call(n) for n in range(CALIBRATION_JOBS)]):
            load.add(job.id)
        return max(0.0, (stores.redis_memory(self.store.redis_ports) - before) / CALIBRATION_JOBS)

    @contextmanager
    def processes(self) -> Iterator[int]:
        # the workers and the server import this deferq and this bench/ (they run in the
        # run's folder, where a relative PYTHONPATH would find another)
        paths = [str(ROOT), str(Path(deferq.__file__).resolve().parents[1])]
        env = {**os.environ, "DEFERQ_URL": self.store.url, "DEFERQ_ENDURANCE_RECORD": str(self.record),
               "PYTHONPATH": os.pathsep.join(paths)}
        env.pop("DEFERQ_APP", None)
        port = free_port()
        command = [sys.executable, "-m", "deferq"]
        try:
            self.spawn("server", [*command, "serve", "--no-auth", "--port", str(port), "--app", APP], env)
            for _ in range(self.profile.workers):
                self.spawn("worker", [*command, "worker", "--app", APP, "-c", str(self.profile.concurrency),
                                      "--log-level", "warning"], env)
            self.wait_for_server(port)
            yield port
        finally:
            stop([p for procs in self.procs.values() for p in procs], grace=30)

    def spawn(self, role: str, command: list[str], env: dict[str, str]) -> None:
        number = len(self.procs[role])
        with (self.folder / f"{role}{number}.log").open("ab") as log:
            self.procs[role].append(subprocess.Popen(command, cwd=self.folder, env=env, stdout=log, stderr=log))

    def wait_for_server(self, port: int) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline or self.procs["server"][0].poll() is not None:
                    raise RuntimeError(f"deferq serve did not answer on port {port}; see {self.folder}") from None
                time.sleep(0.2)

    def load(self, load: loads.Load, port: int) -> None:
        p = self.profile
        low, high = p.long_seconds
        load.start("long", loads.enqueue_every, "long", p.long_every, lambda n: [random.randint(low, high)])
        load.start("short", loads.enqueue_every, "short", p.short_every, lambda n: [n])
        load.start("rated", loads.enqueue_every, "rated", p.rated_every, lambda n: [n])
        load.start("slotted", loads.enqueue_every, "slotted", p.slotted_every, lambda n: [n])
        load.start("pausable", loads.enqueue_every, "pausable", p.pausable_every, lambda n: [n])
        load.start("pause", loads.pause_toggle, PAUSABLE, p.pause_every)
        load.start("waiter", loads.waiters, p.waiter_pause)
        load.start("http", loads.http_client, port, p.http_every)

    # -- sampling ------------------------------------------------------------------------

    def sample_for(self, seconds: float) -> None:
        """A sample every interval (on a fixed beat, whatever a sample takes) and one at the end."""
        start = time.monotonic()
        beats = [min(n * self.args.interval, seconds) for n in range(int(seconds // self.args.interval) + 2)]
        for beat in sorted(set(beats)):
            time.sleep(max(0.0, start + beat - time.monotonic()))
            self.samples.append({"t": round(time.monotonic() - start), **self.sample()})
            self.app.purge(["succeeded"], older_than=60)

    def sample(self) -> dict[str, float | None]:
        figures: dict[str, float | None] = {}
        connections = self.store.connections()
        sqlite = connections is None  # no server: count the database file's descriptors
        on_file = 0
        for role, procs in self.procs.items():
            seen = [process_figures(p.pid, DATABASE if sqlite else None) for p in procs]
            for name in ("fds", "threads", "rss_mb"):
                figures[f"{role}_{name}"] = round(sum(s[name] for s in seen), 1)
            on_file += sum(int(s["on_file"]) for s in seen)
        figures["connections"] = on_file if sqlite else connections
        threads = sum(figures[f"{role}_threads"] or 0 for role in self.procs)
        if sqlite:  # one a thread, and one a process that a thread that ended left behind
            figures["connections_ceiling"] = threads + sum(len(procs) for procs in self.procs.values())
        else:  # a pool holds one a thread that calls at once (each node's, on a Cluster), this process's too
            nodes = max(1, len(self.store.redis_ports))
            figures["connections_ceiling"] = (threads + threading.active_count()) * nodes
        figures["redis_mb"] = None
        if self.store.redis_ports:
            held = sum(sum(s.counts.values()) for s in self.app.backend.stats().values())
            used = stores.redis_memory(self.store.redis_ports)
            figures["redis_mb"] = round((used - held * self.per_job) / 2**20, 2)
        return figures

    # -- the end -------------------------------------------------------------------------

    def drain(self, enqueued: set[str]) -> None:
        """Wait until every enqueued job has run (the longest job, and then some)."""
        deadline = time.monotonic() + self.profile.long_seconds[1] + 90
        while time.monotonic() < deadline and not enqueued <= set(self.runs()):
            time.sleep(1)

    def runs(self) -> Counter[str]:
        if not self.record.exists():
            return Counter()
        return Counter(self.record.read_text().split())

    def stop_processes(self) -> None:
        for procs in self.procs.values():
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
        stop([p for procs in self.procs.values() for p in procs], grace=30)

    def verdict(self, load: loads.Load) -> dict[str, Any]:
        runs = self.runs()
        unfinished = sum(
            s.counts.get(state, 0) for s in self.app.backend.stats().values()
            for state in ("blocked", "scheduled", "queued", "active", "dead")
        )
        logs = sorted(self.folder.glob("*.log"))
        log_errors = [line for log in logs for line in log.read_text(errors="replace").splitlines()
                      if LOG_ERRORS.search(line)]
        outcomes = {
            "enqueued": len(load.enqueued),
            "recorded_once": sum(1 for job in load.enqueued if runs[job] == 1),
            "lost": sum(1 for job in load.enqueued if runs[job] == 0),
            "twice": sum(1 for job in load.enqueued if runs[job] > 1),
            "strangers": sum(1 for job in runs if job not in load.enqueued),
            "unfinished": unfinished,
        }
        bounds = flat(self.samples, self.args.warmup, self.args.minutes * 60)
        passed = (all(b["ok"] for b in bounds.values()) and outcomes["recorded_once"] == outcomes["enqueued"]
                  and outcomes["strangers"] == outcomes["unfinished"] == 0 and not log_errors
                  and not load.errors)
        return {
            "store": self.kind, "minutes": self.args.minutes, "profile": asdict(self.profile),
            "passed": passed, "outcomes": outcomes, "bounds": bounds, "samples": self.samples,
            "at_1min": nearest(self.samples, 60), "end": self.samples[-1],
            "errors_logged": len(log_errors), "log_errors": log_errors[:20],
            "client_errors": len(load.errors), "client_error_lines": load.errors[:20],
            "logs": str(self.folder), "redis_bytes_per_job": round(self.per_job),
        }


def process_figures(pid: int, database: str | None = None) -> dict[str, float]:
    """Open descriptors, threads and RSS (MB) of a process (0s once it has gone). Given the
    name of an SQLite database, `on_file` counts the descriptors on it (its connections)
    and `fds` leaves out those on it and its -wal and -shm files: the connections figure
    watches them, and it may rise to one per thread (each opens its own on first use)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        status = dict(line.split(":", 1) for line in lines if ":" in line)
        targets = descriptors(pid)
    except (OSError, KeyError):
        return {"fds": 0, "threads": 0, "rss_mb": 0.0, "on_file": 0}
    names = [target.rsplit("/", 1)[-1] for target in targets]
    on_file = names.count(database) if database else 0
    database_files = sum(1 for n in names if n.startswith(database)) if database else 0
    return {"fds": len(targets) - database_files, "threads": int(status["Threads"]),
            "rss_mb": int(status["VmRSS"].split()[0]) / 1024, "on_file": on_file}


def descriptors(pid: int) -> list[str]:
    """What each of a process's open descriptors points at (a path, socket:[...], ...)."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    return targets


def nearest(samples: list[dict[str, Any]], t: float) -> dict[str, Any]:
    return min(samples, key=lambda s: abs(s["t"] - t))


def flat(samples: list[dict[str, Any]], warmup: float, duration: float) -> dict[str, dict[str, Any]]:
    """Each figure's bound (see the module's docstring) and whether the last third kept it."""
    first_third = max(warmup + 1, duration / 3)
    base = [s for s in samples if warmup <= s["t"] <= first_third]
    tail = [s for s in samples if s["t"] >= duration * 2 / 3]
    found: dict[str, dict[str, Any]] = {}
    for name, (kind, slack) in BOUNDS.items():
        before = [s[name] for s in base if s.get(name) is not None]
        after = [s[name] for s in tail if s.get(name) is not None]
        if not before or not after:
            continue
        if kind == "count":  # the middle of the tail under the limit, a burst within 3 x the slack
            # or under the figure's ceiling where it has one (never above it is not growth)
            ceilings = [s[f"{name}_ceiling"] for s in tail if s.get(f"{name}_ceiling") is not None]
            limit = max(max(before) + slack, min(ceilings, default=0))
            seen = sorted(after)[len(after) // 2]
            ok = seen <= limit and max(after) <= max(limit, max(before) + 3 * slack)
        else:
            limit = max(before) * 1.2 + slack
            seen = max(after)
            ok = seen <= limit
        found[name] = {"baseline": max(before), "limit": round(limit, 1), "tail": seen, "ok": ok}
    return found


# -- every store ---------------------------------------------------------------------------


def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each store in a child process of its own, all at once; their results."""
    base = [sys.executable, "-m", "bench.endurance", "--minutes", str(args.minutes), "--interval",
            str(args.interval), "--warmup", str(args.warmup), "--postgres", args.postgres, "--mysql", args.mysql,
            *(["--light"] if args.light else []), *(["--keep-logs"] if args.keep_logs else [])]
    children = {kind: subprocess.Popen([*base, "--one", kind], cwd=ROOT, stdout=subprocess.PIPE, text=True)
                for kind in args.stores}
    results = []
    for kind, child in children.items():
        out, _ = child.communicate()
        try:
            results.append(json.loads(out))
        except json.JSONDecodeError:
            results.append({"store": kind, "passed": False, "crashed": f"exit {child.returncode}: {out[-500:]}"})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.endurance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("ENDURANCE_MINUTES", 10)))
    parser.add_argument("--stores", type=lambda text: text.split(","), default=list(stores.STORES),
                        help=f"comma-separated, of {','.join(stores.STORES)}")
    parser.add_argument("--light", action="store_true", help="a lighter load (the slice make test runs)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds before the baseline starts")
    parser.add_argument("--postgres", default=stores.POSTGRES,
                        help="a PostgreSQL server (a database is made there)")
    parser.add_argument("--mysql", default=stores.MYSQL, help="a MySQL/MariaDB server (a database is made there)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the logs of stores that passed too")
    parser.add_argument("--json", action="store_true", help="the results as JSON")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: one store, JSON out
    args = parser.parse_args(argv)
    if unknown := set(args.stores) - set(stores.STORES):
        parser.error(f"no store {', '.join(sorted(unknown))}: the stores are {', '.join(stores.STORES)}")
    if args.one:
        print(json.dumps(run_store(args.one, args)))
        return 0
    results = run_all(args)
    print(json.dumps(results, indent=1) if args.json else "\n\n".join(map(table, results)))
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
