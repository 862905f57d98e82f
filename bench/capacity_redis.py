"""Redis topologies of the benchmark's own (bench/redis_servers.py): for each, one
producer enqueueing one call per job, one enqueueing 100 per call (each call to one
queue, the queue turning), and 2 worker processes (16 threads each) draining no-op
jobs spread over 6 queues (bench/spread.py). Per figure: jobs/s, the servers' CPU per
job (INFO cpu, summed over the servers), the producer's or the workers' CPU per job."""

from __future__ import annotations

from deferq.cli import bench

from .redis_servers import Topology, flush, server_cpu, started
from .spread import children_cpu, enqueue_spread, marginal, own_cpu, phase, process_spread

TOPOLOGIES = "single,cluster:1,cluster:3,shards:1,shards:2,shards:4"


def measure(topology: Topology, jobs: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with started(topology) as ports:
        url = topology.url(ports)
        app = bench.app
        app.close()
        app.url = url
        store = lambda: server_cpu(ports)  # noqa: E731

        def fresh() -> None:
            flush(ports)
            app.close()  # forget what the backend knew of the servers (its queue registry)

        enqueue_spread(app, 200, batched=False)  # connect, load the scripts: untimed
        fresh()
        out["enqueue"] = phase(jobs, lambda: enqueue_spread(app, jobs, batched=False), store, own_cpu)
        fresh()
        out["batch"] = phase(jobs, lambda: enqueue_spread(app, jobs, batched=True), store, own_cpu)
        runs = {}
        for size in (max(1000, jobs // 4), jobs):
            fresh()
            runs[size] = phase(size, lambda size=size: process_spread(app, url, size),  # type: ignore[misc]
                               store, children_cpu)
        out["process"] = marginal(runs)
        app.close()
    return out


def render(results: dict[Topology, dict[str, dict[str, float]]]) -> list[str]:
    lines = ["| topology | enqueue one call/s | enqueue 100 per call/s | 2 workers, no-op jobs/s "
             "| Redis CPU µs/job (one call / batched / processing) "
             "| producer CPU µs/job (one call / batched) | worker CPU µs/job |",
             "|---|---:|---:|---:|---|---|---:|"]
    for topology, m in results.items():
        e, b, p = m["enqueue"], m["batch"], m["process"]
        lines.append(f"| {topology.label} | {e['rate']:,.0f} | {b['rate']:,.0f} | {p['rate']:,.0f} "
                     f"| {e['server_us']:.1f} / {b['server_us']:.1f} / {p['server_us']:.1f} "
                     f"| {e['client_us']:.1f} / {b['client_us']:.1f} | {p['client_us']:.1f} |")
    return lines
