"""What encryption at rest costs: a producer's enqueue and a worker's CPU per job, with
and without `deferq.Encryption`, on SQLite and Redis, for a 1 KB payload (and a 1 KB
result: the task returns its argument, the case where a job encrypts most).

    .venv/bin/python -m bench.encryption [--jobs 2000] [--rounds 7] [--only ops|sqlite|redis]

First what encryption alone costs per job (no store: `operations`), then the stores.

Each round runs both modes on a fresh store (a SQLite file in a temporary folder, a Redis
prefix of its own on BENCH_REDIS_URL, by default 127.0.0.1:6379 db 9), the plain one
first in even rounds and the encrypted one first in odd rounds (a machine that slows
down or speeds up during a round then favours neither): `--jobs` single `task.enqueue`
calls, timed (wall µs each, and the producer's CPU: its thread's, time.thread_time),
then one in-process worker (`Worker(..., burst=True)`, 4 threads) drains them; its CPU
is the process's (time.process_time) from start to the last job.

Printed per store: each figure's median over the rounds for both modes, and what
encryption adds as the median of the rounds' own differences (each round's pair ran in
the same seconds: on a machine shared with other work, far steadier than the difference
of two medians, and the figure to read; the best rounds' figures beside it). A producer
pays one network round trip or one SQLite commit per call: one enqueue is 50-100 µs of
CPU, and a few rounds' disturbance moves it by more than what encryption adds, hence the
paired differences and `--rounds` 7.

SQLite also shows the worker with the text index's upkeep left out in both modes: the
index (FTS5 trigrams) leaves encrypted arguments out, so with it the encrypted worker does
less work than the plain one, and only without it do the two compare the same work.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import timeit
import uuid
from collections.abc import Iterator
from typing import Any

import deferq
from deferq.encryption import new_key
from deferq.worker import Worker, WorkerConfig

PAYLOAD = {"customer": {"name": "A. Person", "email": "a.person@example.com", "ssn": "123-45-6789"},
           "notes": "x" * 880}  # 1,000 bytes of JSON with the rest
KEYS = deferq.Encryption(keys={"bench": new_key()})
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")


def url_of(store: str, folder: str) -> str:
    if store == "sqlite":
        return f"sqlite:///{folder}/{uuid.uuid4().hex[:8]}.db"
    return f"{REDIS_URL}?prefix=encbench{uuid.uuid4().hex[:8]}"


def one_round(store: str, encrypted: bool, jobs: int, folder: str) -> tuple[float, float, float]:
    """(enqueue µs per job, the producer's CPU µs per enqueue, worker CPU µs per job)."""
    app = deferq.App(url_of(store, folder), encryption=KEYS if encrypted else None)

    @app.task()
    def echo(data: dict) -> dict:
        return data

    echo.enqueue(PAYLOAD)  # the store opened, the first statements prepared: not timed
    Worker(app, WorkerConfig(burst=True, concurrency=4)).run()
    started, cpu = time.perf_counter(), time.thread_time()
    for _ in range(jobs):
        echo.enqueue(PAYLOAD)
    enqueue = (time.perf_counter() - started) / jobs * 1e6
    producer = (time.thread_time() - cpu) / jobs * 1e6
    cpu = time.process_time()
    Worker(app, WorkerConfig(burst=True, concurrency=4)).run()
    worker = (time.process_time() - cpu) / jobs * 1e6
    assert app.stats()["default"]["succeeded"] == jobs + 1
    if store == "redis":
        app.purge(["succeeded"])
    app.close()
    return enqueue, producer, worker


@contextlib.contextmanager
def no_text_index() -> Iterator[None]:
    """SQLite's text index not kept up (its upkeep indexes nothing), for both modes alike."""
    from deferq.backends.sql.sqlite import SQLiteBackend

    def nothing_indexed(self: SQLiteBackend, batches: int) -> Iterator[Any]:
        return True
        yield  # a plan

    real = SQLiteBackend.index_text_plan
    SQLiteBackend.index_text_plan = nothing_indexed  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        SQLiteBackend.index_text_plan = real  # type: ignore[method-assign]


def operations() -> None:
    """What encryption itself adds per job, without a store: sealing the arguments at
    enqueue, opening them at claim, sealing the result at settle (the best of 5 runs of
    5,000 each, in the thread's CPU time: steady on a loaded machine, where the store
    rounds below are not)."""
    from deferq.backends.base import Outcome
    from deferq.job import decode_payload
    from deferq.task import build_enqueue

    app = deferq.App("memory://", encryption=KEYS)

    @app.task()
    def echo(data: dict) -> dict:
        return data

    sealer = app.registry.chain.sealer
    assert sealer is not None
    item = build_enqueue(echo.call(PAYLOAD), echo, 0.0)
    args, kwargs, _ = decode_payload(sealer.seal_items([item])[0].payload)
    claimed = item.job.evolve(args=args, kwargs=kwargs)
    outcome = Outcome(item.job, "succeeded", result=PAYLOAD)
    print("encryption alone, µs per job (1 KB arguments, 1 KB result):")
    for what, call in (("seal the arguments (enqueue)", lambda: sealer.seal_items([item])),
                       ("open the arguments (claim)", lambda: sealer.open_claimed([claimed])),
                       ("seal the result (settle)", lambda: sealer.seal_outcomes([outcome]))):
        best = min(timeit.repeat(call, number=5000, repeat=5, timer=time.thread_time)) / 5000 * 1e6
        print(f"  {what:<30} {best:6.2f}")
    app.close()


Figures = dict[bool, list[tuple[float, ...]]]


def store_rounds(store: str, rounds: int, jobs: int, folder: str) -> tuple[Figures, Figures]:
    """Each mode's figures per round: (enqueue wall, producer CPU, worker CPU), and for
    SQLite the worker CPU without the text index (else nothing)."""
    figures: Figures = {False: [], True: []}
    unindexed: Figures = {False: [], True: []}
    for n in range(rounds):
        modes = (False, True) if n % 2 == 0 else (True, False)
        for encrypted in modes:
            figures[encrypted].append(one_round(store, encrypted, jobs, folder))
        if store == "sqlite":
            with no_text_index():
                for encrypted in modes:
                    unindexed[encrypted].append(one_round(store, encrypted, jobs, folder)[2:])
    return figures, unindexed


def show(what: str, figures: Figures, i: int) -> None:
    plain, sealed = ([f[i] for f in figures[mode]] for mode in (False, True))
    added = statistics.median(s - p for p, s in zip(plain, sealed, strict=True))
    base = statistics.median(plain)
    print(f"  {what:<36} {base:7.1f} -> {statistics.median(sealed):7.1f}   adds {added:+6.1f} "
          f"({added / base * 100:+4.0f}%)   best {min(plain):7.1f} -> {min(sealed):7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", choices=["ops", "sqlite", "redis"], default=None)
    asked = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if asked.only in (None, "ops"):
        operations()
    stores = [asked.only] if asked.only not in (None, "ops") else [] if asked.only else ["sqlite", "redis"]
    with tempfile.TemporaryDirectory() as folder:
        for store in stores:
            figures, unindexed = store_rounds(store, asked.rounds, asked.jobs, folder)
            print(f"{store} [{asked.rounds} rounds of {asked.jobs} jobs: medians, plain -> encrypted; what "
                  f"encryption adds, the median of the rounds' differences; the best rounds] load "
                  f"{os.getloadavg()[0]:.1f}")
            rows = ("enqueue, wall µs/job", "enqueue, producer CPU µs/job", "worker CPU µs/job")
            for i, what in enumerate(rows):
                show(what, figures, i)
            if unindexed[False]:
                show("worker CPU µs/job, no text index", unindexed, 0)


if __name__ == "__main__":
    main()
