"""Claim latency against table size (S3-2): does a claim cost the same with 1,000 and
with 1,000,000 rows in the jobs table?

For each size a table is filled by bulk load (COPY on PostgreSQL, multi-row
INSERT on MySQL): half the rows finished (succeeded), half waiting and due in the
claimed queue, then vacuumed / analyzed as the database would do by itself. Each
round enqueues 16 jobs, times one claim of 16 (`Backend.reserve`, the worker's
call), and settles them, so the waiting backlog stays the same size throughout.

    python bench/claim_growth.py --url postgresql://postgres@127.0.0.1/test
    python bench/claim_growth.py --url mysql://root@127.0.0.1/deferq_growth

Each size gets a store of its own (schema deferq_growth_SIZE, or database NAME_SIZE)
and the rounds alternate between them, so machine noise hits every size alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

import deferq
from deferq.backends.base import Outcome
from deferq.job import new_job_id
from deferq.task import JobOptions

BATCH = 16
WARM_UP = 20
COLUMNS = ("id", "task", "payload", "queue", "priority", "state", "attempts", "max_attempts",
           "run_at", "created_at", "finished_at")


def rows(count: int, now: float):
    """Half succeeded (finished an hour ago), half waiting and due, in the claimed queue."""
    for i in range(count):
        finished = i % 2 == 0
        yield (new_job_id(), "growth", '[[0],{}]', "growth", 1,
               "succeeded" if finished else "queued", int(finished), 3,
               now - 3600 + i * 1e-3, now - 3600, now - 3500 if finished else None)


def load_postgres(backend, count: int) -> None:
    jobs = backend.names["jobs"]
    with backend.pool().connection() as conn:
        conn.execute(f"TRUNCATE {jobs}")
        with conn.cursor() as cur, cur.copy(f"COPY {jobs} ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for row in rows(count, backend.now()):
                copy.write_row(row)
        conn.execute(f"VACUUM ANALYZE {jobs}")


def load_mysql(backend, count: int) -> None:
    jobs = backend.names["jobs"]
    insert = f"INSERT INTO {jobs} ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"
    with backend.connection() as conn, conn.cursor() as cur:
        cur.execute(f"TRUNCATE TABLE {jobs}")
        batch = []
        for row in rows(count, backend.now()):
            batch.append(row)
            if len(batch) == 5000:
                cur.executemany(insert, batch)
                batch = []
        if batch:
            cur.executemany(insert, batch)
        cur.execute(f"ANALYZE TABLE {jobs}")
        cur.fetchall()


def store_url(url: str, size: int) -> str:
    """The URL of a store of its own for one table size: schema or database + _SIZE."""
    parts = urlsplit(url)
    if parts.scheme.startswith("postgres"):
        query = dict(parse_qsl(parts.query))
        query["schema"] = f"{query.get('schema', 'deferq_growth')}_{size}"
        return urlunsplit(parts._replace(query=urlencode(query)))
    database = f"{parts.path.strip('/') or 'deferq_growth'}_{size}"
    import pymysql

    admin = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                            user=parts.username or "root", password=parts.password or "")
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    admin.close()
    return urlunsplit(parts._replace(path=f"/{database}"))


def load(app: deferq.App, count: int) -> float:
    backend = app.backend
    started = time.perf_counter()
    (load_postgres if backend.dialect == "postgres" else load_mysql)(backend, count)
    return time.perf_counter() - started


def drop(app: deferq.App) -> None:
    """Remove the bench's schema / database."""
    backend = app.backend
    if backend.dialect == "postgres":
        with backend.pool().connection() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{backend.options["schema"]}" CASCADE')
    else:
        with backend.connection() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{backend.database}`")
    app.close()


def claim_once(app: deferq.App, call: deferq.Call) -> float:
    """Enqueue a batch, time the claim of a batch, settle it: the backlog stays put."""
    app.enqueue_many([call] * BATCH)
    start = time.perf_counter()
    jobs = app.backend.reserve(["growth"], BATCH, "growth-bench", 30.0, (1, 0, 2))
    took = time.perf_counter() - start
    app.backend.settle([Outcome(job, "succeeded") for job in jobs])
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--rounds", type=int, default=500)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    apps = {size: deferq.App(store_url(args.url, size)) for size in sizes}
    call = deferq.Call("growth", (0,), {}, JobOptions(queue="growth"))
    try:
        loaded = {size: load(app, size) for size, app in apps.items()}
        times: dict[int, list[float]] = {size: [] for size in sizes}
        # Rounds alternate between the tables, so a busy moment of the machine
        # weighs on every size alike.
        for round_ in range(WARM_UP + args.rounds):
            for size, app in apps.items():
                took = claim_once(app, call)
                if round_ >= WARM_UP:  # connections open, statements prepared
                    times[size].append(took)
    finally:
        for app in apps.values():
            drop(app)
    results = []
    for size in sizes:
        ordered = sorted(times[size])
        results.append({
            "rows": size, "load_s": round(loaded[size], 1),
            "claim_p50_ms": round(statistics.median(ordered) * 1000, 3),
            "claim_p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 3),
        })
    print(f"claim of {BATCH} jobs, {args.rounds} rounds per table, {urlsplit(args.url).scheme}")
    print(f"{'rows':>10} {'load s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for r in results:
        print(f"{r['rows']:>10,} {r['load_s']:>8} {r['claim_p50_ms']:>8} {r['claim_p99_ms']:>8}")
    if len(results) > 1:
        ratio = results[-1]["claim_p50_ms"] / results[0]["claim_p50_ms"]
        print(f"largest / smallest table, p50: {ratio:.2f}x")
    print(orjson.dumps(results).decode())


if __name__ == "__main__":
    main()
