"""Bursts against `deferq serve` past --max-inflight, in both overload modes (S3-4).

    .venv/bin/python -m bench.overload [--url sqlite:///...] [--bursts 10] [--size 64]

Each mode gets its own server on a fresh SQLite file (or --url), started with
--max-inflight 4 and --workers 1..4 (shed-oldest also with --max-waiting 16 --max-wait 2).
A client process sends --bursts bursts of --size concurrent POST /v1/jobs, one burst
every --gap seconds, each request on its own connection, and prints per mode: the share
of requests answered busy, the p50/p99 latency of the served ones, and the number of
server processes sampled over time (how the range grew and shrank).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

MODES = {
    "refuse": ["--overload", "refuse"],
    "shed-oldest": ["--overload", "shed-oldest", "--max-waiting", "16", "--max-wait", "2"],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_up(base: str, server: subprocess.Popen[bytes], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"deferq serve exited with {server.returncode}")
        try:
            if httpx.get(base + "/healthz", timeout=1, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("deferq serve did not answer in time")


def processes_under(pid: int) -> int:
    """The server processes under `deferq serve` (not multiprocessing's resource tracker)."""
    with open(f"/proc/{pid}/task/{pid}/children") as listed:
        children = listed.read().split()
    count = 0
    for child in children:
        try:
            with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                count += b"resource_tracker" not in cmdline.read()
        except FileNotFoundError:
            continue
    return count


async def bursts(base: str, count: int, size: int, gap: float) -> tuple[list[float], int, int]:
    served: list[float] = []
    busy = sent = 0
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=30, limits=limits) as client:

        async def one(number: int) -> None:
            nonlocal busy, sent
            started = time.perf_counter()
            answer = await client.post("/v1/jobs", json={"task": "t", "args": [number]})
            sent += 1
            if answer.status_code == 201:
                served.append(time.perf_counter() - started)
            elif answer.status_code == 503:
                busy += 1

        for burst in range(count):
            began = time.monotonic()
            await asyncio.gather(*(one(burst * size + i) for i in range(size)))
            await asyncio.sleep(max(0.0, gap - (time.monotonic() - began)))
    return served, busy, sent


def measure(mode: str, url: str | None, count: int, size: int, gap: float) -> dict[str, object]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="deferq-overload-") as folder:
        store = url or f"sqlite:///{Path(folder) / 'deferq.db'}"
        command = [sys.executable, "-m", "deferq", "serve", "--url", store, "--port", str(port), "--no-auth",
                   "--max-inflight", "4", "--workers", "1..4", "--calm", "3", *MODES[mode]]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DEFERQ_", "PROMETHEUS_"))}
        server = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        timeline: list[int] = []
        stop = threading.Event()
        try:
            wait_up(base, server)

            def sample() -> None:
                while not stop.wait(0.5):
                    timeline.append(processes_under(server.pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            served, busy, sent = asyncio.run(bursts(base, count, size, gap))
            time.sleep(5)  # the calm after the bursts, for the timeline's shrink
            stop.set()
            sampler.join(2)
        finally:
            server.terminate()
            server.wait(20)
    quantiles = statistics.quantiles(served, n=100) if len(served) > 1 else [0.0] * 99
    return {"mode": mode, "sent": sent, "busy_share": busy / max(sent, 1),
            "p50_ms": quantiles[49] * 1000, "p99_ms": quantiles[98] * 1000, "processes": timeline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="the store (default: a fresh SQLite file per mode)")
    parser.add_argument("--bursts", type=int, default=10)
    parser.add_argument("--size", type=int, default=64, help="concurrent requests a burst")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds from one burst's start to the next's")
    options = parser.parse_args()
    print(f"{options.bursts} bursts of {options.size} POST /v1/jobs, --max-inflight 4, --workers 1..4")
    print(f"{'mode':<12} {'sent':>6} {'busy':>6} {'p50 ms':>8} {'p99 ms':>8}  processes every 0.5 s")
    for mode in MODES:
        row = measure(mode, options.url, options.bursts, options.size, options.gap)
        timeline = "".join(str(n) for n in row["processes"])  # type: ignore[attr-defined]
        print(f"{mode:<12} {row['sent']:>6} {row['busy_share']:>6.0%} {row['p50_ms']:>8.1f} "
              f"{row['p99_ms']:>8.1f}  {timeline}")


if __name__ == "__main__":
    main()
