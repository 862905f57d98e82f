"""HTTP enqueue throughput: N keep-alive clients POST /v1/jobs to `deferq serve` on loopback.

    .venv/bin/python bench/http.py --url redis://127.0.0.1:6379/3 --workers 2 --clients 64

Starts `deferq serve` (with auth, as in production: a producer token), registers a
topic, then runs a tight asyncio client (raw HTTP/1.1 over keep-alive connections, one
request in flight per connection, uvloop when installed) for a fixed time after a
warm-up, and reports requests per second and latency percentiles. The client runs in
its own process(es) on the same machine, so it competes with the server for CPU: the
numbers are a floor, not a ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

# This file is named http.py: keep its folder off the import path, or it shadows the
# standard library's `http` package that httpx needs.
sys.path[:] = [p for p in sys.path if p and not p.rstrip("/").endswith("bench")]

import httpx  # noqa: E402 - after the path fix above

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_request(port: int, token: str, body: bytes, path: str = "/v1/jobs") -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def one_connection(port: int, request: bytes, until: float, warm_until: float,
                         latencies: list[float], statuses: dict[int, int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    clock = time.perf_counter
    try:
        while (started := clock()) < until:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            if started >= warm_until:
                latencies.append(clock() - started)
                statuses[status] = statuses.get(status, 0) + 1
    finally:
        writer.close()


async def load(port: int, token: str, clients: int, seconds: float, warmup: float,
               batch: int) -> dict:
    job = {"topic": "bench", "body": {"user": 42, "email": "a" * 32}}
    if batch > 1:  # POST /v1/jobs/batch with `batch` jobs per request
        request = make_request(port, token, json.dumps({"jobs": [job] * batch}).encode(),
                               "/v1/jobs/batch")
    else:
        request = make_request(port, token, json.dumps(job).encode())
    now = time.perf_counter()
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    await asyncio.gather(*(one_connection(port, request, now + warmup + seconds, now + warmup,
                                          latencies, statuses) for _ in range(clients)))
    return {"latencies": latencies, "statuses": statuses}


def client_process(args: tuple) -> dict:
    port, token, clients, seconds, warmup, batch = args
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    started = time.process_time()
    result = asyncio.run(load(port, token, clients, seconds, warmup, batch))
    result["cpu"] = time.process_time() - started
    return result


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by a process and all its descendants (Linux /proc)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])))
    tick = os.sysconf("SC_CLK_TCK")
    members, grew = {root}, True
    while grew:
        more = {pid for pid, (ppid, _) in stats.items() if ppid in members} - members
        members |= more
        grew = bool(more)
    return sum(stats[pid][1] for pid in members if pid in stats) / tick


def redis_cpu(url: str) -> float | None:
    """CPU seconds the Redis server has used, when the store is one Redis server (a
    Cluster's or shards' work is spread over several: not measured)."""
    if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        return None
    from deferq.backends.redis.connection import parse_url, sync_client

    client = sync_client(parse_url(url))  # the URL as deferq reads it: without ?prefix=
    try:
        info = client.info("cpu")
    finally:
        client.close()
    return float(info["used_cpu_user"] + info["used_cpu_sys"])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=None, help="store (default: a temporary SQLite file)")
    parser.add_argument("--workers", type=int, default=2, help="server processes")
    parser.add_argument("--clients", type=int, default=64, help="concurrent connections")
    parser.add_argument("--client-processes", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--batch", type=int, default=1, help="jobs per request (>1: /v1/jobs/batch)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="deferq-http-bench-")
    url = args.url or f"sqlite:///{tmp}/bench.db"
    # the receiver is on loopback, which callback targets may not be by default
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"),
           "DEFERQ_CALLBACK_POLICY": '{"allow_networks": ["loopback"]}'}
    deferq = [sys.executable, "-m", "deferq"]

    def token(scope: str) -> str:
        made = subprocess.run([*deferq, "token", "create", "--scope", scope, "--url", url],
                              capture_output=True, text=True, env=env, check=True)
        return made.stdout.strip()

    admin, producer = token("admin"), token("producer")
    port = free_port()
    server = subprocess.Popen([*deferq, "serve", "--url", url, "--port", str(port),
                               "--workers", str(args.workers)], env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, trust_env=False, timeout=5) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("deferq serve did not start")
                time.sleep(0.1)
            client.put("/v1/topics/bench", json={"url": "http://127.0.0.1:9/never-called"},
                       headers={"authorization": f"Bearer {admin}"}).raise_for_status()
        per_process = max(1, args.clients // args.client_processes)
        jobs = [(port, producer, per_process, args.seconds, args.warmup, args.batch)] * args.client_processes
        with multiprocessing.get_context("spawn").Pool(args.client_processes) as pool:
            waiting = pool.map_async(client_process, jobs)
            time.sleep(args.warmup + 0.5)  # CPU is counted over the measured part only
            cpu_before, store_before = tree_cpu(server.pid), redis_cpu(url)
            wall_before = time.perf_counter()
            parts = waiting.get()
            cpu_window = time.perf_counter() - wall_before
            server_cpu, store_after = tree_cpu(server.pid) - cpu_before, redis_cpu(url)
    finally:
        server.terminate()
        server.wait(10)
    latencies = [x for part in parts for x in part["latencies"]]
    statuses: dict[int, int] = {}
    for part in parts:
        for status, count in part["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    result = {
        "store": url.split("://")[0], "server_processes": args.workers,
        "clients": per_process * args.client_processes, "seconds": args.seconds,
        "requests": len(latencies), "req_per_s": round(len(latencies) / args.seconds),
        "jobs_per_s": round(len(latencies) * args.batch / args.seconds),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
    }
    # CPU per request, so runs on a busy machine can still be compared: the server's
    # processes, the Redis server (if any) and the load generator itself.
    measured = result["req_per_s"] * cpu_window or 1
    result["server_cpu_us"] = round(server_cpu / measured * 1e6)
    if store_before is not None and store_after is not None:
        result["redis_cpu_us"] = round((store_after - store_before) / measured * 1e6)
    result["client_cpu_us"] = round(sum(p["cpu"] for p in parts) / max(len(latencies), 1) * 1e6)
    if args.json:
        print(json.dumps(result))
    else:
        jobs = f" ({result['jobs_per_s']:,} jobs/s)" if args.batch > 1 else ""
        print(f"{result['req_per_s']:,} req/s{jobs}  p50 {result['p50_ms']} ms  p99 {result['p99_ms']} ms"
              f"  ({result['requests']:,} requests, {result['clients']} clients, "
              f"{args.workers} server processes, {result['store']}; statuses {result['statuses']})")
        cpu = ", ".join(f"{k[:-7]} {v} us" for k, v in result.items() if k.endswith("_cpu_us"))
        print(f"CPU per request: {cpu}")


if __name__ == "__main__":
    main()
