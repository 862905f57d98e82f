"""The result as one markdown table, headed by when, where and with which versions."""

from __future__ import annotations

import argparse
import os
import platform
import time
from importlib import metadata
from typing import Any

import redis

from . import probe
from .base import Peer

COLUMNS = ("peer", "A enqueue/s", "A vs raw", "A batch/s", "B processed/s", "C late p50/p99 ms",
           "D pickup p50/p99 ms", "worker RSS MiB (procs)", "B worker CPU ms per 1,000 jobs")
RATIO = COLUMNS.index("A vs raw")  # shown only when the raw reference ran


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


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


def row(label: str, cells: dict[str, Any], raw_a: Any) -> list[str]:
    failures = {c for c in cells.values() if c is not None}
    if len(failures) == 1 and hasattr(next(iter(failures)), "reason"):  # failed as a whole
        return [label, cell(failures.pop(), "rate")] + ["–"] * (len(COLUMNS) - 2)
    a = cells["a"]
    ratio = f"{a / raw_a:.2f}x" if isinstance(a, float) and isinstance(raw_a, float) else "–"
    b = cell(cells["b"], "rate")
    if cells.get("b_alt") is not None:
        b += " / " + cell(cells["b_alt"], "rate")
    return [label, cell(a, "rate"), ratio, cell(cells["a_batch"], "rate"), b,
            cell(cells["c"], "pair"), cell(cells["d"], "pair"), cell(cells["rss"], "rss"),
            cell(cells.get("b_cpu"), "cpu")]


def table(rows: list[list[str]], with_ratio: bool) -> list[str]:
    keep = [i for i in range(len(COLUMNS)) if with_ratio or i != RATIO]
    lines = [[COLUMNS[i] for i in keep], ["---"] + ["---:"] * (len(keep) - 1)]
    lines += [[r[i] for i in keep] for r in rows]
    return ["| " + " | ".join(line) + " |" for line in lines]


def render(peers: list[Peer], cells: dict[str, dict[str, Any]], args: argparse.Namespace,
           elapsed: float) -> str:
    raw_a = next((cells[p.label]["a"] for p in peers if p.name == "raw"), None)
    versions = ", ".join(f"{d} {version(d)}" for p in peers for d in p.dists)
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores "
        f"({cpu_model()}), Python {platform.python_version()}, {server_versions(args.store == 'postgres')}.",
        f"{args.jobs:,} jobs, median of {args.runs} run(s), {args.pickups} pickups per run, "
        f"2 worker processes per peer, library defaults; the whole run took {elapsed:.0f} s.",
        f"Versions: {versions}.",
        "",
        *table([row(p.label, cells[p.label], raw_a) for p in peers], raw_a is not None),
        "",
    ]
    return "\n".join(lines)
