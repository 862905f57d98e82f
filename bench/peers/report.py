"""The result as one markdown table, headed by when, where and with which versions; each
figure with the 1-minute load average it was measured at beside it (bench/machine.py)."""

from __future__ import annotations

import argparse
import time
from importlib import metadata
from typing import Any

import redis

from .. import machine
from . import probe
from .base import Peer

COLUMNS = ("peer", "A enqueue/s", "A vs raw", "A batch/s", "B processed/s", "C late p50/p99 ms",
           "D pickup p50/p99 ms", "worker RSS MiB (procs)", "B worker CPU ms per 1,000 jobs")
RATIO = COLUMNS.index("A vs raw")  # shown only when the raw reference ran


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def server_versions(postgres: bool) -> str:
    parts = []
    try:
        parts.append(f"Redis {redis.Redis.from_url(probe.REDIS_URL).info('server')['redis_version']}")
    except Exception as exc:
        parts.append(f"Redis unreachable ({type(exc).__name__})")
    if postgres:
        try:
            import psycopg

            with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres") as conn:
                row = conn.execute("SHOW server_version").fetchone()
            parts.append(f"PostgreSQL {row[0] if row else '?'}")
        except Exception as exc:
            parts.append(f"PostgreSQL unreachable ({type(exc).__name__})")
    return ", ".join(parts)


def number(value: float) -> str:
    if value < 1:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def cell(value: Any, shape: str) -> str:
    if value is None:
        return "–"
    if hasattr(value, "reason"):
        return "failed: " + value.reason.replace("|", "/")
    if shape == "rate":
        return f"{value:,.0f}"
    if shape == "cpu":
        return f"{value:,.0f}"
    if shape == "pair":
        return f"{number(value[0])}/{number(value[1])}"
    return f"{value[0]:.0f} ({value[1]:.0f})"  # rss


def at(text: str, load: float | None) -> str:
    """A figure's text with the load it was measured at: `8,962 [0.61]`."""
    return text if load is None or text == "–" or text.startswith("failed") else f"{text} [{load:.2f}]"


def row(label: str, cells: dict[str, Any], loads: dict[str, float | None], raw_a: Any,
        raw_load: float | None) -> list[str]:
    """A peer's cells; `raw_a` and `raw_load`: the raw reference's A and its load, if it ran."""
    failures = {c for c in cells.values() if c is not None}
    if len(failures) == 1 and hasattr(next(iter(failures)), "reason"):  # failed as a whole
        return [label, cell(failures.pop(), "rate")] + ["–"] * (len(COLUMNS) - 2)

    def shown(metric: str, shape: str) -> str:
        return at(cell(cells.get(metric), shape), loads.get(metric))

    ratio = "–"
    if (load := ratio_load(cells, loads, raw_a, raw_load)) is not None:
        ratio = at(machine.ratio(cells["a"] / raw_a, load), load)
    b = shown("b", "rate") + (" / " + shown("b_alt", "rate") if cells.get("b_alt") is not None else "")
    return [label, shown("a", "rate"), ratio, shown("a_batch", "rate"), b, shown("c", "pair"),
            shown("d", "pair"), shown("rss", "rss"), shown("b_cpu", "cpu")]


def ratio_load(cells: dict[str, Any], loads: dict[str, float | None], raw_a: Any,
               raw_load: float | None) -> float | None:
    """The load "A vs raw" was measured at (the higher of the two A's), or None: no ratio."""
    if not (isinstance(cells["a"], float) and isinstance(raw_a, float)):
        return None
    return max(loads.get("a") or 0.0, raw_load or 0.0)


def drain_table(drain: dict[str, Any], jobs: int) -> list[str]:
    """The no-op drains (drains.py): both rates, their start-up, and deferq's / raw's."""
    load = drain["load"]
    if hasattr(drain["ratio"], "reason"):
        return [f"No-op drains of {jobs:,} jobs: failed: {drain['ratio'].reason}"]
    return [
        f"No-op drains of {jobs:,} jobs on the same Redis, each rate less the processes' start-up on an "
        "empty queue (bench/peers/drains.py):",
        "",
        "| drain | jobs/s | start-up, empty queue | load |",
        "|---|---:|---:|---:|",
        f"| 2 `deferq worker --burst`, the command line's defaults | {drain['deferq']:,.0f} | "
        f"{drain['startup_deferq']:.2f} s | {load:.2f} |",
        f"| 2 processes of an `RPOP key 16` loop | {drain['raw']:,.0f} | {drain['startup_raw']:.2f} s | "
        f"{load:.2f} |",
        f"| ratio, deferq / raw (target >= 0.15x) | {machine.ratio(drain['ratio'], load)} | | {load:.2f} |",
    ]


def table(rows: list[list[str]], with_ratio: bool) -> list[str]:
    keep = [i for i in range(len(COLUMNS)) if with_ratio or i != RATIO]
    lines = [[COLUMNS[i] for i in keep], ["---"] + ["---:"] * (len(keep) - 1)]
    lines += [[r[i] for i in keep] for r in rows]
    return ["| " + " | ".join(line) + " |" for line in lines]


def render(peers: list[Peer], cells: dict[str, dict[str, Any]], loads: dict[str, dict[str, float | None]],
           drain: dict[str, Any] | None, args: argparse.Namespace, elapsed: float) -> str:
    raw = next((p.label for p in peers if p.name == "raw"), None)
    raw_a, raw_load = (cells[raw]["a"], loads[raw]["a"]) if raw else (None, None)
    versions = ", ".join(f"{d} {version(d)}" for p in peers for d in p.dists)
    rows = [row(p.label, cells[p.label], loads[p.label], raw_a, raw_load) for p in peers]
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine.describe()}, "
        f"{server_versions(args.store == 'postgres')}.",
        f"{args.jobs:,} jobs, median of {args.runs} run(s), {args.pickups} pickups per run, "
        f"2 worker processes per peer, library defaults; the whole run took {elapsed:.0f} s.",
        f"Versions: {versions}.",
        "[x.xx] beside a figure: the 1-minute load average it was measured at (the higher of the readings at "
        "the start and the end of its measurement, the highest over the runs).",
        "",
        *table(rows, raw_a is not None),
        "",
    ]
    marked = [ratio_load(cells[p.label], loads[p.label], raw_a, raw_load) for p in peers]
    marked = [load for load in marked if load is not None]
    if drain is not None:
        lines += [*drain_table(drain, args.drain_jobs), ""]
        if not hasattr(drain["ratio"], "reason"):
            marked.append(drain["load"])
    if note := machine.footnote(marked):
        lines += [*note, ""]
    return "\n".join(lines)
