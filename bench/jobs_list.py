"""The jobs list at scale: with 1,000,000 jobs in the store, how long do a page of a
filtered list, a look-up by id or key and a text search take (GET /v1/jobs's store
calls: `find_jobs`, `get`, `get_by_key`)? And what do the list's indexes cost an enqueue?

    python bench/jobs_list.py --stores sqlite,postgres,redis [--jobs 1000000]
    python bench/jobs_list.py --enqueue-cost --stores sqlite,postgres,mysql

Each store is a fresh one of its own (a temporary SQLite file, PostgreSQL schema
deferq_bench_list, MySQL database deferq_bench_list, Redis database 14 under the prefix
benchlist; `--url redis=redis://127.0.0.1:6379/11?prefix=benchlist` picks another one),
filled fast: SQL by bulk insert (COPY on PostgreSQL, executemany elsewhere),
Redis through `enqueue_many` and then leased and settled into their states in batches.
The jobs: 10 queues, 20 tasks, 60% succeeded, 10% dead (with an error), 5% cancelled,
20% queued, 5% scheduled; every tenth has a key. Each query runs ROUNDS times; the
figures are p50 and p99 in milliseconds. The store is dropped at the end.

--enqueue-cost times single enqueues (app.enqueue) and batches of 100 (enqueue_many) on
two fresh stores, one with the list's indexes (migration 0009) and one without them,
alternating rounds so that machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson

import deferq
from deferq.backends.base import Enqueue, Outcome
from deferq.backends.search import JobQuery
from deferq.job import Job, JobState, new_job_id
from deferq.options import JobOptions
from deferq.task import Call

ROUNDS = 30
PAGE = 50
QUEUES, TASKS = 10, 20
URLS = {
    "sqlite": "sqlite:///{tmp}/bench-list.db",
    "postgres": "postgresql://postgres@127.0.0.1:5432/test?schema=deferq_bench_list",
    "mysql": "mysql://root@127.0.0.1:3306/deferq_bench_list",
    "redis": "redis://127.0.0.1:6379/14?prefix=benchlist",
}
COLUMNS = ("id", "task", "payload", "queue", "priority", "state", "attempts", "max_attempts", "run_at",
           "created_at", "finished_at", "error", "{key}")
# Without migration 0009's objects: what an enqueue cost before them.
DROP_0009 = {
    "sqlite": ["DROP TRIGGER deferq_jobs_fts_insert", "DROP TRIGGER deferq_jobs_fts_delete",
               "DROP TRIGGER deferq_jobs_fts_update", "DROP TABLE deferq_jobs_fts", "DROP INDEX deferq_jobs_state",
               "DROP INDEX deferq_jobs_queue_state", "DROP INDEX deferq_jobs_task_state"],
    "postgres": ["DROP INDEX {s}.deferq_jobs_state", "DROP INDEX {s}.deferq_jobs_queue_state",
                 "DROP INDEX {s}.deferq_jobs_task_state", "DROP INDEX IF EXISTS {s}.deferq_jobs_text_trgm",
                 "DROP INDEX IF EXISTS {s}.deferq_jobs_text_words"],
    "mysql": [f"DROP INDEX {name} ON {{s}}.deferq_jobs"
              for name in ("deferq_jobs_state", "deferq_jobs_queue_state", "deferq_jobs_task_state")],
}


def plan(i: int) -> str:
    """The state job i ends in."""
    r = i % 20
    return ("succeeded" if r < 12 else "dead" if r < 14 else "cancelled" if r < 15 else
            "queued" if r < 19 else "scheduled")


def shape(i: int) -> tuple[str, str, list[Any], str | None]:
    """(queue, task, args, key) of job i."""
    return (f"q{(i // 3) % QUEUES}", f"shop.task{(i // 7) % TASKS}", [f"user{i}@example.com", {"order": i}],
            f"order:{i}" if i % 10 == 0 else None)


def rows(count: int, now: float) -> Iterator[tuple[Any, ...]]:
    for i in range(count):
        queue, task, args, key = shape(i)
        state = plan(i)
        finished = state in ("succeeded", "dead", "cancelled")
        run_at = now + 86400 if state == "scheduled" else now - 3600 + i * 1e-3
        error = f"GatewayError: card declined (order {i})" if state == "dead" else None
        yield (new_job_id(), task, orjson.dumps([args, {}]).decode(), queue, 1,
               "queued" if state == "scheduled" else state, int(finished), 3, run_at, run_at,
               run_at + 1 if finished else None, error, key)


# -- filling ----------------------------------------------------------------------------------


def fill_sql(backend: Any, count: int) -> None:
    jobs = backend.names["jobs"]
    dialect = backend.dialect
    columns = ", ".join(COLUMNS).format(key="key" if dialect == "sqlite" else "unique_key")
    if dialect == "postgres":
        with backend.pool().connection() as conn:
            with conn.cursor() as cur, cur.copy(f"COPY {jobs} ({columns}) FROM STDIN") as copy:
                for row in rows(count, backend.now()):
                    copy.write_row(row)
            conn.execute(f"VACUUM ANALYZE {jobs}")
        return
    mark = "?" if dialect == "sqlite" else "%s"
    insert = f"INSERT INTO {jobs} ({columns}) VALUES ({', '.join([mark] * len(COLUMNS))})"
    batch: list[tuple[Any, ...]] = []
    if dialect == "sqlite":
        conn = backend.connection()
        for row in rows(count, backend.now()):
            batch.append(row)
            if len(batch) == 10_000:
                with conn:
                    conn.execute("BEGIN")
                    conn.executemany(insert, batch)
                batch = []
        if batch:
            conn.execute("BEGIN")
            conn.executemany(insert, batch)
            conn.execute("COMMIT")
        conn.execute("ANALYZE")
        started = time.perf_counter()  # the text index is kept asynchronously: catch it up, as workers would
        backend.run(backend.index_text_plan(10**9))
        print(f"sqlite: text index of {count:,} jobs built in {time.perf_counter() - started:.0f} s")
        return
    with backend.connection() as conn, conn.cursor() as cur:
        for row in rows(count, backend.now()):
            batch.append(row)
            if len(batch) == 5000:
                cur.executemany(insert, batch)
                conn.commit()
                batch = []
        if batch:
            cur.executemany(insert, batch)
            conn.commit()
        cur.execute(f"ANALYZE TABLE {jobs}")
        cur.fetchall()


def fill_redis(backend: Any, count: int) -> None:
    """Jobs that end finished are enqueued, leased and settled first; then the waiting."""

    def item(i: int) -> Enqueue:
        queue, task, args, key = shape(i)
        job = Job(id=new_job_id(), task=task, args=tuple(args), kwargs={}, queue=queue, key=key, max_attempts=3)
        return Enqueue(job, delay=86400.0 if plan(i) == "scheduled" else 0.0)

    finished = [i for i in range(count) if plan(i) in ("succeeded", "dead", "cancelled")]
    waiting = [i for i in range(count) if plan(i) not in ("succeeded", "dead", "cancelled")]
    queues = [f"q{n}" for n in range(QUEUES)]
    for start in range(0, len(finished), 5000):
        backend.enqueue_many([item(i) for i in finished[start : start + 5000]])
        while jobs := backend.reserve(queues, 1000, "bench", 600.0, (0, 1, 2)):
            outcomes = []
            for job in jobs:
                i = job.args[1]["order"]
                kind = plan(i)
                error = f"GatewayError: card declined (order {i})" if kind == "dead" else None
                outcomes.append(Outcome(job, kind, error=error))
            backend.settle(outcomes)
    for start in range(0, len(waiting), 5000):
        backend.enqueue_many([item(i) for i in waiting[start : start + 5000]])


# -- timing -----------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], rounds: int = ROUNDS) -> tuple[float, float, Any]:
    """(p50 ms, p99 ms, the last answer)."""
    fn()  # warm
    took = []
    answer = None
    for _ in range(rounds):
        started = time.perf_counter()
        answer = fn()
        took.append((time.perf_counter() - started) * 1000)
    took.sort()
    return statistics.median(took), took[min(len(took) - 1, round(0.99 * (len(took) - 1)))], answer


def deep_cursor(backend: Any, query: JobQuery, pages: int) -> str | None:
    cursor = None
    for _ in range(pages):
        cursor = backend.find_jobs(JobQuery(**_with(query, cursor))).cursor
    return cursor


def _with(query: JobQuery, cursor: str | None) -> dict[str, Any]:
    return {"state": query.state, "queue": query.queue, "task": query.task, "text": query.text,
            "cursor": cursor, "limit": query.limit, "window": query.window}


def measure(backend: Any, count: int) -> list[tuple[str, float, float, str]]:
    """(what, p50, p99, a note) per query."""
    results = []
    pages = {
        "page, no filter": JobQuery(limit=PAGE),
        "page, state=dead": JobQuery(state=JobState.DEAD, limit=PAGE),
        "page, state=succeeded queue=q3": JobQuery(state=JobState.SUCCEEDED, queue="q3", limit=PAGE),
        "page, state=queued task=shop.task7": JobQuery(state=JobState.QUEUED, task="shop.task7", limit=PAGE),
        "page, queue=q5 (every state)": JobQuery(queue="q5", limit=PAGE),
        "page, task=shop.task7 (every state)": JobQuery(task="shop.task7", limit=PAGE),
    }
    for name, query in pages.items():
        p50, p99, page = timed(lambda q=query: backend.find_jobs(q))
        note = f"{len(page.jobs)} jobs" + (f", scanned {page.scanned}" if page.scanned else "")
        results.append((name, p50, p99, note))
    deep = JobQuery(state=JobState.SUCCEEDED, limit=PAGE)
    cursor = deep_cursor(backend, deep, 200)
    p50, p99, page = timed(lambda: backend.find_jobs(JobQuery(**_with(deep, cursor))))
    results.append(("page 201, state=succeeded (keyset)", p50, p99, f"{len(page.jobs)} jobs"))
    sample = backend.find_jobs(JobQuery(state=JobState.DEAD, limit=PAGE)).jobs
    ids = [job.id for job in sample]
    p50, p99, _ = timed(lambda: backend.get(random.choice(ids)))
    results.append(("get by id", p50, p99, ""))
    p50, p99, found = timed(lambda: backend.get_by_key(f"order:{random.randrange(0, count, 10)}"))
    results.append(("get by key", p50, p99, "found" if found else "not found"))
    texts = {"text in args (one job)": f"user{count // 2 + 1}@example", "text in error (one job)":
             f"(order {count - 7})", "text, no match": "giraffe"}
    for name, text in texts.items():
        p50, p99, page = timed(lambda t=text: backend.find_jobs(JobQuery(text=t, limit=PAGE)), rounds=10)
        note = f"{len(page.jobs)} found, {page.text_search}"
        if page.text_search == "scan":
            note += f", {page.scanned} scanned, {'complete' if page.complete else 'window only'}"
        results.append((name, p50, p99, note))
    return results


# -- enqueue cost -----------------------------------------------------------------------------


def enqueue_rounds(app: deferq.App, rounds: int = 400) -> tuple[float, float]:
    """(µs per single enqueue, µs per job in batches of 100), medians."""
    single, batch = [], []
    call = Call("bench.enqueue", ("someone@example.com", {"order": 1}), {}, JobOptions())
    for _ in range(rounds):
        started = time.perf_counter()
        app.enqueue("bench.enqueue", ["someone@example.com", {"order": 1}])
        single.append((time.perf_counter() - started) * 1e6)
    for _ in range(rounds // 20):
        started = time.perf_counter()
        app.enqueue_many([call] * 100)
        batch.append((time.perf_counter() - started) * 1e6 / 100)
    return statistics.median(single), statistics.median(batch)


def drop_0009(backend: Any, kind: str) -> None:
    schema = {"postgres": f'"{backend.options.get("schema")}"', "mysql": f"`{getattr(backend, 'database', '')}`"}
    for statement in DROP_0009[kind]:
        sql = statement.format(s=schema.get(kind, ""))
        if kind == "sqlite":
            backend.connection().execute(sql)
        elif kind == "postgres":
            with backend.pool().connection() as conn:
                conn.execute(sql)
        else:
            with backend.connection() as conn, conn.cursor() as cur:
                cur.execute(sql)


def enqueue_cost(kind: str, tmp: str) -> None:
    url = URLS[kind].format(tmp=tmp)
    with_url = url.replace("bench-list", "bench-with").replace("deferq_bench_list", "deferq_bench_with")
    without_url = url.replace("bench-list", "bench-without").replace("deferq_bench_list", "deferq_bench_without")
    apps = {"with 0009": deferq.App(prepare(with_url)), "without 0009": deferq.App(prepare(without_url))}
    drop_0009(apps["without 0009"].backend, kind)
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in apps}
    for _ in range(3):
        for name, app in apps.items():
            figures[name].append(enqueue_rounds(app))
    for name, app in apps.items():
        single = statistics.median(f[0] for f in figures[name])
        batch = statistics.median(f[1] for f in figures[name])
        print(f"{kind:9} {name:13} single enqueue {single:8.0f} µs   batch of 100: {batch:6.1f} µs/job")
        drop(app)


# -- stores -----------------------------------------------------------------------------------


def prepare(url: str) -> str:
    """A fresh, empty store at `url` (its MySQL database created)."""
    if url.startswith("mysql"):
        import pymysql

        database = url.rsplit("/", 1)[1]
        admin = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
            cur.execute(f"CREATE DATABASE `{database}`")
        admin.close()
    elif url.startswith("postgresql"):
        import psycopg

        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    elif url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url.split("?")[0])
        if client.dbsize():
            raise SystemExit(f"{url}: this Redis database is not empty; the bench needs it for itself")
    return url


def drop(app: deferq.App) -> None:
    app.history.close()  # what the bench enqueued, counted, written before its store goes
    backend = app.backend
    kind = type(backend).__name__
    if kind == "PostgresBackend":
        with backend.pool().connection() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{backend.options["schema"]}" CASCADE')
    elif kind == "MySQLBackend":
        with backend.connection() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{backend.database}`")
    elif kind == "RedisBackend":
        backend.client.flushdb()
    app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,postgres,redis")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--enqueue-cost", action="store_true", help="SQL stores: with and without migration 0009")
    parser.add_argument("--url", action="append", default=[], metavar="STORE=URL",
                        help="a store of your own, e.g. redis=redis://127.0.0.1:6379/11?prefix=benchlist")
    args = parser.parse_args()
    for given in args.url:
        kind, _, url = given.partition("=")
        if kind not in URLS or not url:
            raise SystemExit(f"--url takes STORE=URL with STORE one of {', '.join(URLS)}")
        URLS[kind] = url
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.stores.split(","):
            if args.enqueue_cost:
                enqueue_cost(kind, tmp)
                continue
            app = deferq.App(prepare(URLS[kind].format(tmp=tmp)))
            started = time.perf_counter()
            if kind == "redis":
                fill_redis(app.backend, args.jobs)
            else:
                fill_sql(app.backend, args.jobs)
            print(f"\n{kind}: {args.jobs:,} jobs stored in {time.perf_counter() - started:.0f} s")
            print(f"{'query':40} {'p50 ms':>8} {'p99 ms':>8}")
            for name, p50, p99, note in measure(app.backend, args.jobs):
                print(f"{name:40} {p50:8.1f} {p99:8.1f}  {note}")
            drop(app)


if __name__ == "__main__":
    main()
