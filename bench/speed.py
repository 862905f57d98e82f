"""`make bench-speed`: the speed figures, each beside its raw reference measured in the
same run, medians of 3 runs (each ratio is the median of the runs' own ratios).

    .venv/bin/python -m bench.speed                  # every figure, 3 runs
    .venv/bin/python -m bench.speed --runs 1 --only enqueue,batch,memory

Figures (Redis on 127.0.0.1:6379 db 12, its probe db 13; SQLite in a temporary folder;
PostgreSQL database bench_peers_speed, created and dropped here):
- enqueue:  `task.enqueue()` one call per job vs a redis-py LPUSH loop of a preformatted
            45-byte message
- batch:    `app.enqueue_many()` of 1,000 calls vs pipelines of 1,000 LPUSHes of it
- drain:    2 `deferq worker --burst` processes (the command line's defaults) draining
            N no-op jobs vs 2 processes of a raw `RPOP key 16` loop draining N messages,
            each less its start-up on an empty queue (bench/peers/drains.py)
- b:        PEERS.md workload B (one INCR per job) vs the raw BRPOP+INCR loop; in the
            same worker session pickup (D, p50/p99) and delay lateness (C, 500 jobs)
- memory:   Redis bytes per queued job (MEMORY USAGE of every key, and the INFO
            used_memory delta) vs one LPUSHed payload
- sqlite:   `app.enqueue_many()` of 1,000 vs a bare executemany into the same table
- postgres: single enqueue with `options(durable=False)` vs the durable default
- limits:   this machine's ceilings: the least an enqueue script costs in Redis against an
            LPUSH (and so the best ratio a scripted one-call enqueue can reach here), what
            dropping the flush gives a bare PostgreSQL INSERT, and (with `drain`) the
            least time 500 starts take at the raw loop's own rate
The jobs of `deferq bench` and bench/peers are reused, so every figure is the one those
commands measure; only the raw references and the ratios are new here. The machine is
named at the top; each figure has the 1-minute load average beside it, and a ratio
measured above load 1 is marked (bench/machine.py).
"""

from __future__ import annotations

import os

os.environ.setdefault("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")  # the probe's db, before it loads

import argparse  # noqa: E402
import multiprocessing  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import orjson  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402

from deferq.cli import bench  # noqa: E402
from deferq.job import new_job_id  # noqa: E402

from . import machine  # noqa: E402
from .peers import drains, probe, raw, workloads  # noqa: E402
from .peers.deferq import Peer as DeferqPeer  # noqa: E402
from .peers.stores import recreate_database  # noqa: E402
from .peers.workers import Workers  # noqa: E402

REDIS_URL = os.environ.get("BENCH_SPEED_REDIS_URL", "redis://127.0.0.1:6379/12")
PG_URL = os.environ.get("BENCH_SPEED_PG_URL", "postgresql://postgres@127.0.0.1:5432/bench_peers_speed")
FIGURES = ("enqueue", "batch", "drain", "b", "memory", "sqlite", "postgres", "limits")
ARG = bench.ARG
Measure = Callable[[int], dict[str, float]]


def flush() -> None:
    """Empty the benchmark's databases, and drop what the bench app learned of them (its
    store would skip registering a queue it saw before the flush: no worker finds it)."""
    for url in (REDIS_URL, probe.REDIS_URL):
        redis.Redis.from_url(url).flushdb()
    bench.app.close()


def use(url: str) -> None:
    bench.app.close()
    bench.app.url = url


def message(i: int) -> bytes:
    """The raw references' job: the same arguments, in the form bench.peers.raw runs."""
    return orjson.dumps(["noop", [i, ARG]])


def interleaved(ours: Callable[[int], float], reference: Callable[[int], float], jobs: int,
                chunk: int) -> dict[str, float]:
    """Both rates, measured in alternating chunks of `chunk` jobs: a burst of load on
    this shared machine then hits both sides alike (each callable returns a rate)."""
    ours(min(chunk, 200))  # connect, load scripts, warm up: untimed
    reference(min(chunk, 200))
    spent = {"deferq": 0.0, "raw": 0.0}
    for _ in range(max(1, jobs // chunk)):
        spent["deferq"] += chunk / ours(chunk)
        spent["raw"] += chunk / reference(chunk)
    done = max(1, jobs // chunk) * chunk
    return {side: bench.rate(done, seconds) for side, seconds in spent.items()}


def m_enqueue(jobs: int) -> dict[str, float]:
    flush()
    use(REDIS_URL)
    r = redis.Redis.from_url(REDIS_URL)
    return interleaved(lambda n: bench.measure_enqueue(bench.app, n, lambda _: None),
                       lambda n: raw.lpush_loop(r, n), jobs, 500)


def m_batch(jobs: int) -> dict[str, float]:
    flush()
    use(REDIS_URL)
    r = redis.Redis.from_url(REDIS_URL)
    return interleaved(lambda n: bench.measure_batch(bench.app, n, lambda _: None, size=1000),
                       lambda n: raw.lpush_pipelined(r, n), jobs, 2000)


def m_drain(jobs: int) -> dict[str, float]:
    flush()
    return drains.measure(REDIS_URL, jobs)


def m_b(jobs: int) -> dict[str, float]:
    """B, then D and C in the same worker session (as bench/peers does)."""
    out: dict[str, float] = {}
    r = workloads.driver()
    for name, peer in (("raw", raw.Peer()), ("deferq", DeferqPeer(REDIS_URL))):
        flush()
        peer.open()
        try:
            workloads.prefill(peer, jobs)
            with Workers(f"speed-{name}", peer.worker_commands(), peer.env) as workers:
                out[name] = workloads.processing_rate(r, jobs, workers)
                if name == "deferq":
                    out["late_p50"], out["late_p99"] = workloads.delay_lateness(peer, r, workers)
                out[f"pickup_p50_{name}"], out[f"pickup_p99_{name}"] = workloads.pickup_latency(
                    peer, r, workers, 200
                )
        finally:
            peer.close()
    return out


def used_memory(r: redis.Redis) -> int:
    used: int = r.info("memory")["used_memory"]
    return used


def key_bytes(r: redis.Redis) -> int:
    """MEMORY USAGE of every key of the database (exact for each key's own structures)."""
    return sum(r.memory_usage(key, samples=0) or 0 for key in r.scan_iter(count=1000))


def m_memory(jobs: int) -> dict[str, float]:
    flush()
    use(REDIS_URL)
    r = redis.Redis.from_url(REDIS_URL)
    task = bench.app.tasks["bench_noop"]
    bench.app.enqueue_many([task.call(0, ARG)])  # the queue's own keys exist before
    before_keys, before = key_bytes(r), used_memory(r)
    for first in range(0, jobs, 1000):
        bench.app.enqueue_many([task.call(i, ARG) for i in range(first, min(first + 1000, jobs))])
    out = {"deferq": (key_bytes(r) - before_keys) / jobs, "deferq_info": (used_memory(r) - before) / jobs}
    ready = bench.app.backend.keys.queue("bench").ready[1]  # type: ignore[attr-defined]
    out["deferq_ready"] = (r.memory_usage(ready, samples=0) or 0) / jobs
    out["deferq_hash"] = out["deferq"] - out["deferq_ready"]
    flush()
    before = used_memory(r)
    raw.lpush_pipelined(r, jobs)
    out["raw"] = key_bytes(r) / jobs
    out["raw_info"] = (used_memory(r) - before) / jobs
    flush()
    return out


def m_sqlite(jobs: int) -> dict[str, float]:
    """Both write the same table of the same file, in alternating chunks."""
    with tempfile.TemporaryDirectory(prefix="deferq-speed-") as folder:
        use(f"sqlite:///{folder}/deferq.db")
        bench.app.backend.migrate()
        conn = sqlite3.connect(f"{folder}/deferq.db", isolation_level=None)
        conn.execute("PRAGMA synchronous=NORMAL")  # as deferq's connections (WAL is the file's)
        insert = ("INSERT INTO deferq_jobs (id, task, payload, queue, priority, max_attempts, timeout,"
                  " key, run_at, created_at, expires_at, state)"
                  " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued')")

        def executemany(count: int) -> float:
            started = time.perf_counter()
            for first in range(0, count, 1000):
                now = time.time()
                rows = [(new_job_id(), "bench_noop", message(i), "bench", 1, 1, None, None,
                         now, now, None) for i in range(first, min(first + 1000, count))]
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(insert, rows)
                conn.execute("COMMIT")
            return bench.rate(count, time.perf_counter() - started)

        try:
            return interleaved(lambda n: bench.measure_batch(bench.app, n, lambda _: None, size=1000),
                               executemany, jobs, 2000)
        finally:
            conn.close()
            bench.app.close()


def m_postgres(jobs: int) -> dict[str, float]:
    recreate_database(PG_URL)
    try:
        use(PG_URL)
        task = bench.app.tasks["bench_noop"]
        fast = task.options(durable=False)

        def loop(t: Any, count: int) -> float:
            started = time.perf_counter()
            for i in range(count):
                t.enqueue(i, ARG)
            return bench.rate(count, time.perf_counter() - started)

        return interleaved(lambda n: loop(fast, n), lambda n: loop(task, n), max(200, jobs // 5), 200)
    finally:
        bench.app.close()
        recreate_database(PG_URL, create=False)


# The least a scripted enqueue must do in the store: read its clock, write the job, add
# it to a sorted set, look at the wake list (add.lua does this and no more for one job).
LEAST_SCRIPT = """local t = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], t[1], ARGV[1])
return redis.call('LLEN', KEYS[3])"""


def server_micros(r: redis.Redis, command: str, send: Callable[[int], Any], calls: int) -> tuple[float, float]:
    """(µs of server time per call from INFO commandstats, µs of wall time per call)."""
    r.config_resetstat()
    started = time.perf_counter()
    for i in range(calls):
        send(i)
    wall = (time.perf_counter() - started) / calls * 1e6
    return float(r.info("commandstats")[f"cmdstat_{command}"]["usec_per_call"]), wall


def pool_loop(threads: int, jobs: int) -> None:
    """One process of a bare thread pool: each thread loops a B job's INCR plus one
    short script call (its settle), with no queue and no bookkeeping."""
    r = redis.Redis.from_url(REDIS_URL)
    sha = r.script_load(LEAST_SCRIPT)

    def loop() -> None:
        for i in range(jobs // threads):
            r.incr("pool:count")
            r.evalsha(sha, 3, f"h{i % 1000}", "z", "w", str(i), "x")

    pool = [threading.Thread(target=loop) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


def pool_rate(threads: int, jobs: int) -> float:
    """Jobs/s of 2 processes of `threads` threads each running pool_loop."""
    procs = [multiprocessing.get_context("fork").Process(target=pool_loop, args=(threads, jobs // 2))
             for _ in range(2)]
    started = time.perf_counter()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    return jobs / (time.perf_counter() - started)


def m_limits(jobs: int) -> dict[str, float]:
    """This machine's ceilings for the figures whose targets it may not allow: a script's
    least server time against an LPUSH's (with the round trip, the best a scripted
    one-call enqueue can reach), what 8 threads a process cost a worker whose jobs each
    make a round trip (B), and what skipping the flush gives a bare PostgreSQL INSERT
    (the best `durable=False` can reach)."""
    flush()
    r = redis.Redis.from_url(REDIS_URL)
    sha = r.script_load(LEAST_SCRIPT)
    out: dict[str, float] = {}
    for _ in range(3):  # alternating, the last of each kept: the first warms up
        out["lpush_us"], out["rtt_us"] = server_micros(r, "lpush", lambda i: r.lpush("q", message(i)), jobs)
        out["script_us"], _ = server_micros(
            r, "evalsha", lambda i: r.evalsha(sha, 3, f"h{i % 1000}", "z", "w", str(i), message(i)), jobs
        )
    flush()
    out["ratio_ceiling"] = out["rtt_us"] / (out["rtt_us"] + out["script_us"] - out["lpush_us"])
    out["pool_1"], out["pool_8"] = pool_rate(1, jobs * 5), pool_rate(8, jobs * 5)
    flush()
    recreate_database(PG_URL)
    try:
        with psycopg.connect(PG_URL, autocommit=True) as durable, psycopg.connect(PG_URL, autocommit=True) as fast:
            durable.execute("CREATE TABLE bare (id bigint PRIMARY KEY, payload text)")
            fast.execute("SET synchronous_commit = off")
            spent = {"durable": 0.0, "fast": 0.0}
            for chunk in range(0, max(200, jobs // 5), 200):
                for name, conn in (("durable", durable), ("fast", fast)):
                    started = time.perf_counter()
                    for i in range(chunk, chunk + 200):
                        conn.execute("INSERT INTO bare VALUES (%s, %s)", (i * 2 + (name == "fast"), "x"))
                    spent[name] += time.perf_counter() - started
        done = max(200, jobs // 5) // 200 * 200
        out["pg_durable"], out["pg_fast"] = done / spent["durable"], done / spent["fast"]
        out["pg_ceiling"] = spent["durable"] / spent["fast"]
    finally:
        recreate_database(PG_URL, create=False)
    return out


MEASURES: dict[str, tuple[Measure, int]] = {  # the figure, and its job count at --scale 1
    "enqueue": (m_enqueue, 5_000),
    "batch": (m_batch, 20_000),
    "drain": (m_drain, 50_000),
    "b": (m_b, 10_000),
    "memory": (m_memory, 10_000),
    "sqlite": (m_sqlite, 20_000),
    "postgres": (m_postgres, 10_000),
    "limits": (m_limits, 2_000),
}

# figure: (label, deferq's unit, reference, target ratio or None)
ROWS = {
    "enqueue": ("Redis task.enqueue(), one call per job", "jobs/s", "LPUSH loop, preformatted 45 bytes", ">= 0.9"),
    "batch": ("Redis app.enqueue_many(), 1,000 per call", "jobs/s", "pipelines of 1,000 such LPUSHes", ">= 0.8"),
    "drain": ("Redis, 2 `deferq worker --burst` (CLI defaults) draining no-op jobs, less start-up", "jobs/s",
              "2 processes of an `RPOP key 16` loop, the same", ">= 0.15"),
    "b": ("Redis workload B (one INCR per job)", "jobs/s", "BRPOP+INCR loop, 2 processes", ">= 0.75"),
    "memory": ("Redis bytes per queued job (MEMORY USAGE)", "bytes", "one LPUSHed payload", "<= 200 bytes"),
    "sqlite": ("SQLite app.enqueue_many(), 1,000 per call", "jobs/s", "bare executemany, same table", ">= 0.8"),
    "postgres": ("PostgreSQL task.enqueue() durable=False", "jobs/s", "the same, durable (default)", ">= 3"),
    "limits": ("This machine's ceilings", "", "", ""),
}


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the runs; its load the highest of the runs'."""
    keys = runs[0].keys()
    out = {key: statistics.median(run[key] for run in runs) for key in keys}
    if "raw" in keys:
        out["ratio"] = statistics.median(run["deferq"] / run["raw"] for run in runs)
    out["load"] = max(run["load"] for run in runs)
    return out


def met(figure: str, m: dict[str, float]) -> str:
    if figure == "memory":
        return "met" if m["deferq"] <= 200 else "not met"
    limit = float(ROWS[figure][3].split()[-1])
    return "met" if m["ratio"] >= limit else "not met"


def render(results: dict[str, dict[str, float]], runs: int, failed: dict[str, str] | None = None) -> str:
    lines = [f"bench/speed.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, medians of {runs}, "
             f"{machine.describe()}",
             "load: the 1-minute load average, the higher of its readings at the start and the end of the "
             "figure's measurement (the highest over the runs)",
             "", "| figure | deferq | reference | ratio | target | | load |", "|---|---:|---|---:|---|---|---:|"]
    loads: list[float] = []

    def add(row: str, load: float) -> None:
        """A row: `row`'s cells, then the load it was measured at."""
        lines.append(f"{row} {load:.2f} |")
        loads.append(load)

    for figure, m in results.items():
        load = m["load"]
        if figure == "limits":
            for row, at in limit_rows(m, results.get("drain"), results.get("b"), results.get("postgres")):
                add(row, at)
            continue
        label, unit, reference, target = ROWS[figure]
        add(f"| {label} | {m['deferq']:,.0f} {unit} | {reference}: {m['raw']:,.0f} | "
            f"{machine.ratio(m['ratio'], load)} | {target} | {met(figure, m)} |", load)
        if figure == "drain":
            add(f"| (start-up on an empty queue: deferq / raw) | {m['startup_deferq']:.2f} s | "
                f"{m['startup_raw']:.2f} s | | | |", load)
        if figure == "memory":
            add(f"| (INFO used_memory delta per job) | {m['deferq_info']:,.0f} bytes | "
                f"{m['raw_info']:,.0f} | | | |", load)
            add(f"| (of which: job record / ready-list entry) | {m['deferq_hash']:,.0f} / "
                f"{m['deferq_ready']:,.0f} bytes | | | | |", load)
        if figure == "b":
            pickup = "met" if m["pickup_p50_deferq"] <= 0.6 and m["pickup_p99_deferq"] <= 1.5 else "not met"
            floor = 500 / m["raw"] * 1000  # ms: 500 starts at the raw loop's own rate
            late = "met" if m["late_p99"] <= 1.3 * floor else "not met"
            add(f"| pickup latency p50/p99 (idle workers) | {m['pickup_p50_deferq']:.2f}/"
                f"{m['pickup_p99_deferq']:.2f} ms | BRPOP: {m['pickup_p50_raw']:.2f}/"
                f"{m['pickup_p99_raw']:.2f} ms | | <= 0.6/1.5 ms | {pickup} |", load)
            add(f"| delay lateness p50/p99, 500 jobs due at once | {m['late_p50']:.2f}/"
                f"{m['late_p99']:.2f} ms | floor, 500 starts at its rate: {floor:.1f} ms | "
                f"{machine.ratio(m['late_p99'] / floor, load)} | p99 <= 1.3x | {late} |", load)
    for figure, reason in (failed or {}).items():
        lines.append(f"| {ROWS[figure][0]} | failed in every run: {reason.replace('|', '/')} | | | | | |")
    note = machine.footnote(loads)
    return "\n".join(lines + ([""] + note if note else []))


def limit_rows(m: dict[str, float], drain: dict[str, float] | None, b: dict[str, float] | None,
               postgres: dict[str, float] | None = None) -> list[tuple[str, float]]:
    """The ceilings' rows (without their last cell) and the load each was measured at."""
    load = m["load"]
    rows = [
        (f"| ceiling: a scripted one-call enqueue (server µs: least script {m['script_us']:.1f}, LPUSH "
         f"{m['lpush_us']:.1f}; round trip {m['rtt_us']:.0f} µs) | | | "
         f"{machine.ratio(m['ratio_ceiling'], load)} | | |", load),
        (f"| ceiling: a bare PostgreSQL INSERT without the flush ({m['pg_fast']:,.0f}/s), vs with it "
         f"({m['pg_durable']:,.0f}/s) | | | {machine.ratio(m['pg_ceiling'], load)} | | |", load),
    ]
    if postgres is not None:  # durable=False's gain over the flush, against the bare INSERT's
        share, at = postgres["ratio"] / m["pg_ceiling"], max(load, postgres["load"])
        rows.append((f"| PostgreSQL durable=False: its gain ({postgres['ratio']:.2f}x) vs the bare INSERT's "
                     f"| | | {machine.ratio(share, at)} | >= 0.8 | {'met' if share >= 0.8 else 'not met'} |", at))
    rows.append((f"| ceiling: 2 processes of 8 threads, each looping INCR + one script call and nothing "
                 f"else ({m['pool_8']:,.0f}/s), vs of 1 thread ({m['pool_1']:,.0f}/s) | | | "
                 f"{machine.ratio(m['pool_8'] / m['pool_1'], load)} | | |", load))
    if drain is not None:  # 500 starts take at least 500 / the raw loop's own rate
        rows.append((f"| floor: 500 no-op starts at the raw drain's rate ({drain['raw']:,.0f}/s) | "
                     f"{500 / drain['raw'] * 1000:.1f} ms | | | | |", drain["load"]))
    if b is not None:  # each stamp job makes a round trip, as B's INCR job does
        rows.append((f"| floor: 500 stamp starts at the raw BRPOP+INCR loop's rate ({b['raw']:,.0f}/s) | "
                     f"{500 / b['raw'] * 1000:.1f} ms | | | | |", b["load"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs; figures are medians (default 3)")
    parser.add_argument("--scale", type=float, default=1.0, help="job counts times this (default 1)")
    parser.add_argument("--only", default="", help=f"comma-separated figures of {', '.join(FIGURES)}")
    args = parser.parse_args(argv)
    wanted = [f.strip() for f in args.only.split(",") if f.strip()] or list(FIGURES)
    if unknown := [f for f in wanted if f not in FIGURES]:
        parser.error(f"unknown figure {unknown[0]!r}: choose from {', '.join(FIGURES)}")
    runs: dict[str, list[dict[str, float]]] = {f: [] for f in wanted}
    failed: dict[str, str] = {}  # a figure's last failure: its row says so if no run succeeded
    try:
        for number in range(args.runs):
            for figure in wanted:
                print(f"run {number + 1}/{args.runs}: {figure} ...", file=sys.stderr, flush=True)
                measure, jobs = MEASURES[figure]
                with machine.Load() as load:
                    try:
                        figures = measure(max(100, int(jobs * args.scale)))
                    except Exception as exc:  # the other figures go on
                        failed[figure] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                        print(f"run {number + 1}/{args.runs}: {figure} failed: {failed[figure]}", file=sys.stderr)
                        continue
                runs[figure].append({**figures, "load": load.value})
    finally:
        flush()
        bench.app.close()
    print(render({f: median_run(r) for f, r in runs.items() if r}, args.runs,
                 {f: failed[f] for f, r in runs.items() if not r}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
