"""`deferq serve` with 1, 2 and 4 server processes (`--workers`), on a redis-server of the
benchmark's own: bench/http.py's load (64 keep-alive connections from one client
process, one `POST /v1/jobs` in flight on each) for a few seconds per figure, after a
2 s warm-up. Reported: requests/s (one job each), p50/p99 latency, and CPU per request
of the server processes, of Redis and of the load generator, which shares the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

from .redis_servers import Topology, started
from .spread import ROOT

CLIENTS = 64


def measure(counts: list[int], seconds: float) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for count in counts:
        with started(Topology("single", 1)) as ports:
            done = subprocess.run(
                [sys.executable, str(ROOT / "bench" / "http.py"), "--url", f"redis://127.0.0.1:{ports[0]}/0",
                 "--workers", str(count), "--clients", str(CLIENTS), "--seconds", str(seconds), "--json"],
                cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120,
            )
        if done.returncode != 0:
            raise RuntimeError(f"bench/http.py with {count} server processes failed: {done.stderr.strip()[-300:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        out[count] = {key: float(value) for key, value in result.items() if isinstance(value, int | float)}
    return out


def render(results: dict[int, dict[str, float]]) -> list[str]:
    lines = ["| server processes | requests/s | p50 / p99 ms | server CPU µs/request | Redis CPU µs/request "
             "| load generator CPU µs/request |", "|---:|---:|---|---:|---:|---:|"]
    for count, r in results.items():
        cpu = " | ".join(f"{r[key]:.0f}" for key in ("server_cpu_us", "redis_cpu_us", "client_cpu_us"))
        lines.append(f"| {count} | {r['req_per_s']:,.0f} | {r['p50_ms']:.1f} / {r['p99_ms']:.1f} | {cpu} |")
    return lines
