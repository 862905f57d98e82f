"""How deferq scales out, measured: what one job costs each part of a deployment, on
Redis topologies, on PostgreSQL and through `deferq serve`. docs/capacity.md turns
the figures into a sizing model.

    .venv/bin/python -m bench.capacity                          # everything (make bench-capacity)
    .venv/bin/python -m bench.capacity --only redis --jobs 5000
    .venv/bin/python -m bench.capacity --topologies single,cluster:3 --only redis

Redis (`--topologies`, default single, cluster:1, cluster:3, shards:1, shards:2,
shards:4): redis-servers of its own on free loopback ports (bench/redis_servers.py: no
persistence, so no other traffic counts in their CPU), jobs spread round robin over 6
queues whose hash slots put 2 on each master of a 3-master Cluster, and for each
topology: one producer enqueueing one call per job, one enqueueing 100 per call (each
call to one queue, the queue turning), and 2 worker processes (16 threads each)
draining no-op jobs, each consuming 3 of the queues. Reported: jobs/s, the servers' CPU
per job (INFO cpu, summed over the servers) and the producer's or the workers' CPU per
job (the workers' as the difference between two runs of different sizes, so their
start-up is not counted).
PostgreSQL (bench/capacity_pg.py) and `deferq serve` (bench/capacity_serve.py): see
those modules. Each cell is the median of --runs runs (3), taken round robin. The
tables go to stdout and to bench/results/capacity.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from . import capacity_pg, capacity_redis, capacity_serve
from .redis_servers import Topology
from .spread import ROOT, Figures, medians

PARTS = ("redis", "postgres", "serve")


def heading(jobs: int) -> str:
    load = os.getloadavg()
    return (f"bench/capacity.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load average {load[0]:.1f} at the end (the VM is shared "
            f"with other work); {jobs:,} jobs per figure")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    topologies = [Topology.parse(t) for t in args.topologies.split(",") if t.strip()]
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    started_at = time.time()
    sections: list[str] = []

    def emit(title: str, lines: list[str]) -> None:
        """Add a section and write what is there so far: a later failure loses no figure."""
        sections.extend([f"### {title}", "", *lines, ""])
        footer = f"Medians of {args.runs} run(s); the whole run took {time.time() - started_at:.0f} s."
        output.write_text("\n".join([heading(args.jobs), "", *sections, footer, ""]))
        print("\n".join([f"### {title}", "", *lines, ""]), flush=True)

    def status(what: str) -> None:
        print(what, file=sys.stderr, flush=True)

    if "redis" in args.parts:
        runs: dict[Topology, list[Figures]] = {t: [] for t in topologies}
        for number in range(args.runs):  # round robin: a noisy minute hits every topology alike
            for topology in topologies:
                status(f"run {number + 1}/{args.runs}: {topology.label} ...")
                runs[topology].append(capacity_redis.measure(topology, args.jobs))
        emit("Redis topologies", capacity_redis.render({t: medians(r) for t, r in runs.items()}))
    if "postgres" in args.parts:
        status("PostgreSQL ...")
        emit("PostgreSQL", capacity_pg.render(medians([capacity_pg.measure(args.jobs) for _ in range(args.runs)])))
    if "serve" in args.parts:
        counts = [int(c) for c in args.serve_processes.split(",") if c.strip()]
        status(f"deferq serve with {counts} processes ...")
        served = medians([capacity_serve.measure(counts, args.seconds) for _ in range(args.runs)])
        emit("deferq serve", capacity_serve.render(served))
    status(f"written to {output}")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--only", default=",".join(PARTS), help="parts: redis, postgres, serve (default all)")
    add("--topologies", default=capacity_redis.TOPOLOGIES, help="Redis topologies (default: all six)")
    add("--jobs", type=int, default=20_000, help="jobs per figure (default 20000)")
    add("--runs", type=int, default=3, help="runs; each cell is their median (default 3)")
    add("--serve-processes", default="1,2,4", help="deferq serve --workers values (default 1,2,4)")
    add("--seconds", type=float, default=8.0, help="seconds of HTTP load per figure (default 8)")
    add("--output", default=str(ROOT / "bench" / "results" / "capacity.md"))
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    if unknown := [p for p in args.parts if p not in PARTS]:
        parser.error(f"unknown part {unknown[0]!r}: choose from {', '.join(PARTS)}")
    try:
        [Topology.parse(t) for t in args.topologies.split(",") if t.strip()]
    except ValueError as exc:
        parser.error(str(exc))
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.jobs < 4000:
        parser.error("--jobs must be at least 4000 (the workers' CPU is a difference of two runs)")
    return args


if __name__ == "__main__":
    sys.exit(main())
