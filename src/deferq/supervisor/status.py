"""`deferq status`: masters, their pools and children, and what each child runs, for how long.

Read from the store: each master publishes itself in kv namespace "masters" (with a
TTL, so a dead master disappears) and each worker its heartbeat in "workers". Workers
that no master started (`deferq worker`) are listed on their own. The same report
feeds `deferq status --json` and the dashboard.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..backends.base import Backend
from ..observe.output import fit_all, relative, when
from ..values import format_duration


def _decoded(records: dict[str, bytes]) -> list[dict[str, Any]]:
    values = []
    for raw in records.values():
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            values.append(value)
    return values


def worker_view(status: dict[str, Any], now: float) -> dict[str, Any]:
    """A worker heartbeat as shown: its running jobs with how long each has run."""
    age = max(0.0, now - float(status.get("seen", now)))
    jobs = [
        {"id": job["id"], "task": job["task"],
         "running_for": round(float(status["monotonic"]) - float(job["started"]) + age, 1)}
        for job in status.get("running", [])
    ]
    return {
        "worker": status.get("name"), "pid": status.get("pid"), "host": status.get("host"),
        "queues": status.get("queues", []), "concurrency": status.get("concurrency"),
        "processed": status.get("processed"), "heartbeat_age": round(age, 1), "jobs": jobs,
        "quiet": bool(status.get("quiet")), "stopping": bool(status.get("stopping")),
    }


def running_masters(backend: Backend) -> list[dict[str, Any]]:
    """The masters running now (each publishes itself with a TTL)."""
    return sorted(_decoded(backend.kv_list("masters")), key=lambda m: str(m.get("id", "")))


def worker_heartbeats(backend: Backend) -> list[dict[str, Any]]:
    """The last heartbeat of each worker running now (each publishes it with a TTL), by name."""
    return sorted(_decoded(backend.kv_list("workers")), key=lambda w: str(w.get("name", "")))


def collect_status(backend: Backend) -> dict[str, Any]:
    now = time.time()
    masters = running_masters(backend)
    workers = {w.get("name"): w for w in worker_heartbeats(backend)}
    for master in masters:
        for pool in master.get("pools", {}).values():
            for child in pool.get("children", []):
                status = workers.pop(child.get("worker"), None)
                child["uptime"] = round(now - float(child.get("started", now)), 1)
                child["processed"] = status.get("processed") if status else None
                child["jobs"] = worker_view(status, now)["jobs"] if status else []
    standalone = [worker_view(w, now) for _, w in sorted(workers.items(), key=lambda kv: str(kv[0]))]
    return {"time": now, "masters": masters, "workers": standalone}


def _jobs_lines(jobs: list[dict[str, Any]], indent: str) -> list[str]:
    return [f"{indent}running {j['task']} {j['id']} for {format_duration(j['running_for'])}" for j in jobs]


def render_status(report: dict[str, Any], columns: int | None = None) -> list[str]:
    """The report as lines of text for a terminal, none wider than `columns` (the terminal's)."""
    now = report["time"]
    lines = []
    if not report["masters"]:
        lines.append("no master is running (start one with: deferq run --config deferq.toml)")
    for master in report["masters"]:
        store = "store up" if master.get("store_up", True) else "STORE UNREACHABLE"
        config = f", config {master['config']}" if master.get("config") else ""
        lines.append(f"master {master['id']} (pid {master['pid']}){config}")
        lines.append(f"  started {when(master.get('started'), now)}, {store}")
        for name, pool in master.get("pools", {}).items():
            lines.append(
                f"  pool {name}: queues {','.join(pool['queues'])}; {len(pool['children'])} "
                f"process(es), target {pool['target']} ({pool['min']}-{pool['max']}) "
                f"x {pool['concurrency']} jobs"
            )
            for child in pool["children"]:
                processed = "" if child["processed"] is None else f", {child['processed']} done"
                idle = "" if child["jobs"] else ", idle"
                lines.append(f"    #{child['index']} pid {child['pid']} {child['state']} since "
                             f"{when(child.get('started'), now)}{processed}{idle}")
                lines += _jobs_lines(child["jobs"], "      ")
    if report["workers"]:
        lines.append("workers without a master:")
        for worker in report["workers"]:
            idle = "" if worker["jobs"] else ", idle"
            lines.append(
                f"  {worker['worker']} (pid {worker['pid']}): queues {','.join(worker['queues'])}, "
                f"{worker['processed']} done, heartbeat {relative(now - worker['heartbeat_age'], now)}{idle}"
            )
            lines += _jobs_lines(worker["jobs"], "    ")
    return fit_all(lines, columns)
