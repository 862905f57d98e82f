"""Run deferq and its peers one after another on the same store, print one table.

    python -m bench.peers.run                 # Redis: raw redis-py, deferq, celery, rq, ...
    python -m bench.peers.run --postgres      # PostgreSQL: deferq and procrastinate
    python -m bench.peers.run --sqlite        # SQLite: deferq and huey (SqliteHuey)
    python -m bench.peers.run --quick         # a small smoke run (2,000 jobs, 1 run)
    python -m bench.peers.run --only deferq,huey --runs 1 --jobs 5000

Workloads are those of /work/shared/PEERS.md (see workloads.py). Each cell is the
median over the runs, with the 1-minute load average it was measured at beside it; a
peer or workload that fails says "failed: <reason>" in its cell and the run goes on.
On Redis, when raw and deferq both run, each run also measures the no-op drains
(drains.py). The table goes to bench/results/peers-<store>.md too.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from .. import machine
from . import drains, workloads
from .base import ROOT, Peer
from .report import render
from .stores import drop, reset, sqlite_url
from .workers import Workers

REDIS_PEERS = ("raw", "deferq", "huey", "dramatiq", "celery", "rq", "arq", "saq", "taskiq")
PEERS = {"redis": REDIS_PEERS, "postgres": ("deferq", "procrastinate"), "sqlite": ("deferq", "huey")}
DEFERQ_ON = {  # deferq's store and row when the table is not Redis's
    "postgres": ("postgresql://postgres@127.0.0.1:5432/bench_peers_deferq", "deferq (PostgreSQL)"),
    "sqlite": (sqlite_url("deferq"), "deferq (SQLite)"),
}
MODULES = {("postgres", "procrastinate"): "procrastinate_pg", ("sqlite", "huey"): "huey_sqlite"}
METRICS = ("a", "a_batch", "b", "b_alt", "c", "d", "rss", "b_cpu")


@dataclass(frozen=True)
class Failure:
    reason: str

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        text = str(exc).strip().splitlines()
        return cls(f"{type(exc).__name__}: {text[0] if text else ''}"[:140])


class Unavailable(Peer):
    """A peer whose module cannot be imported: every cell says why."""

    def __init__(self, name: str, failure: Failure) -> None:
        self.name, self.label, self.failure = name, name, failure


def load_peer(name: str, store: str) -> Peer:
    try:
        module = importlib.import_module(f"bench.peers.{MODULES.get((store, name), name)}")
        if name == "deferq" and store in DEFERQ_ON:
            return module.Peer(*DEFERQ_ON[store])
        return module.Peer()
    except Exception as exc:  # a missing or broken library must not stop the others
        return Unavailable(name, Failure.of(exc))


def applicable(peer: Peer) -> list[str]:
    """The metrics a peer has: no batch call, no delays or no second worker mean "–"."""
    skip = {"a_batch": not peer.batch, "c": not peer.delays, "b_alt": not peer.alt_b}
    return [metric for metric in METRICS if not skip.get(metric)]


def fresh(peer: Peer) -> None:
    """Close the producer, empty the store, open the producer again."""
    peer.close()
    reset(peer.store)
    peer.open()


def run_peer(peer: Peer, sizes: workloads.Sizes) -> dict[str, Any]:
    """One run of every workload on one peer; failures become cells, never exceptions."""
    if isinstance(peer, Unavailable):
        return dict.fromkeys(applicable(peer), peer.failure)
    out: dict[str, Any] = {}
    r = workloads.driver()

    def attempt(metric: str, measure: Any) -> None:
        with machine.Load() as load:
            try:
                out[metric] = measure()
            except Exception as exc:
                out[metric] = Failure.of(exc)
        out[f"load:{metric}"] = load.value

    try:
        fresh(peer)
        attempt("a", lambda: workloads.enqueue_rate(peer, sizes.jobs, batched=False))
        if peer.batch:
            fresh(peer)
            attempt("a_batch", lambda: workloads.enqueue_rate(peer, sizes.jobs, batched=True))
        fresh(peer)
        workloads.prefill(peer, sizes.jobs)
        with Workers(peer.name, peer.worker_commands(), peer.env) as workers:
            attempt("b", lambda: workloads.processing(r, sizes.jobs, workers))
            if "b" in out and not isinstance(out["b"], Failure):
                out["b"], out["b_cpu"] = out["b"]
                out["load:b_cpu"] = out["load:b"]
            if peer.delays:
                attempt("c", lambda: workloads.delay_lateness(peer, r, workers, sizes.delayed))
            attempt("d", lambda: workloads.pickup_latency(peer, r, workers, sizes.pickups))
            attempt("rss", workers.rss)
        if peer.alt_b:
            total = min(sizes.jobs, peer.alt_b[1])
            fresh(peer)
            workloads.prefill(peer, total)
            with Workers(f"{peer.name}-alt", peer.alt_worker_commands(), peer.env) as workers:
                attempt("b_alt", lambda: workloads.processing_rate(r, total, workers))
    except Exception as exc:
        for metric in applicable(peer):
            out.setdefault(metric, Failure.of(exc))
    finally:
        try:
            peer.close()
        except Exception:
            pass
    return out


def drain_run(url: str, jobs: int) -> dict[str, Any]:
    """The drains of one run (drains.py); a failure in every figure's place."""
    with machine.Load() as load:
        try:
            out: dict[str, Any] = drains.measure(url, jobs)
        except Exception as exc:
            out = dict.fromkeys(("deferq", "raw", "ratio", "startup_deferq", "startup_raw"), Failure.of(exc))
    return {**out, "load": load.value}


def highest_load(results: list[dict[str, Any]], metric: str) -> float | None:
    """The highest load any run measured `metric` at."""
    return max((r[f"load:{metric}"] for r in results if f"load:{metric}" in r), default=None)


def median_cell(values: list[Any]) -> Any:
    """The median of the runs that succeeded; a failure only when every run failed."""
    good = [v for v in values if v is not None and not isinstance(v, Failure)]
    if not good:
        return next((v for v in values if isinstance(v, Failure)), None)
    if isinstance(good[0], tuple):
        return tuple(statistics.median(v[i] for v in good) for i in range(len(good[0])))
    return statistics.median(good)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=3, help="runs; cells are medians (default 3)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs for A and B (default 20000)")
    parser.add_argument("--pickups", type=int, default=200, help="D samples per run (default 200)")
    parser.add_argument("--delayed", type=int, default=workloads.DELAYED_JOBS,
                        help=f"C: jobs due at one moment (default {workloads.DELAYED_JOBS})")
    parser.add_argument("--drain-jobs", type=int, default=drains.JOBS,
                        help=f"jobs each no-op drain empties (Redis, raw and deferq; default {drains.JOBS})")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2,000 jobs, 1 run")
    stores = parser.add_mutually_exclusive_group()
    stores.add_argument("--postgres", action="store_const", dest="store", const="postgres",
                        help="deferq vs procrastinate on PostgreSQL")
    stores.add_argument("--sqlite", action="store_const", dest="store", const="sqlite",
                        help="deferq vs huey on SQLite")
    parser.add_argument("--only", default="", help="comma-separated peers, e.g. raw,deferq,huey")
    parser.add_argument("--output", help="the markdown file (default bench/results/peers-<store>.md)")
    args = parser.parse_args(argv)
    args.store = args.store or "redis"
    if args.quick:
        args.jobs, args.runs, args.pickups = 2_000, 1, 50
    if args.runs < 1 or args.jobs < 2 or args.pickups < 1 or args.delayed < 1 or args.drain_jobs < 1:
        parser.error("--runs, --pickups, --delayed, --drain-jobs must be at least 1 and --jobs at least 2")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = PEERS[args.store]
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            sys.exit(f"unknown peer {unknown[0]!r}: choose from {', '.join(names)}")
        names = tuple(n for n in names if n in wanted)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so every worker gets stopped
    peers = [load_peer(name, args.store) for name in names]
    sizes = workloads.Sizes(jobs=args.jobs, pickups=args.pickups, delayed=args.delayed)
    runs: dict[str, list[dict[str, Any]]] = {peer.label: [] for peer in peers}
    drained: list[dict[str, Any]] = []  # the drains' runs, when raw and deferq both run on Redis
    deferq = next((p for p in peers if p.name == "deferq"), None)
    started = time.time()
    try:
        for number in range(args.runs):
            for peer in peers:
                print(f"run {number + 1}/{args.runs}: {peer.label} ...", file=sys.stderr, flush=True)
                runs[peer.label].append(run_peer(peer, sizes))
            if args.store == "redis" and "raw" in names and deferq is not None:
                print(f"run {number + 1}/{args.runs}: drains ...", file=sys.stderr, flush=True)
                drained.append(drain_run(deferq.store, args.drain_jobs))
    finally:
        for peer in peers:
            try:
                drop(peer.store)
            except Exception as exc:
                print(f"could not clean {peer.store}: {exc}", file=sys.stderr)
    cells = {label: {m: median_cell([r.get(m) for r in results]) for m in METRICS}
             for label, results in runs.items()}
    loads = {label: {m: highest_load(results, m) for m in METRICS} for label, results in runs.items()}
    drain = {key: median_cell([r[key] for r in drained]) for key in drained[0]} if drained else None
    if drain:
        drain["load"] = max(r["load"] for r in drained)
    table = render(peers, cells, loads, drain, args, time.time() - started)
    print(table)
    output = args.output or str(ROOT / "bench" / "results" / f"peers-{args.store}.md")
    with open(output, "w") as out:
        out.write(table)
    print(f"written to {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
