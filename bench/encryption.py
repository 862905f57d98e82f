"""What encryption at rest costs: a producer's enqueue and a worker's CPU per job, with
and without `deferq.Encryption`, on SQLite and Redis, for a 1 KB payload (and a 1 KB
result: the task returns its argument, the case where a job encrypts most).

    .venv/bin/python -m bench.encryption [--jobs 2000] [--rounds 5] [--only ops|sqlite|redis]

First what encryption alone costs per job (no store: `operations`), then the stores.

Each round runs both modes in turn on a fresh store (a SQLite file in a temporary folder,
a Redis prefix of its own on BENCH_REDIS_URL, by default 127.0.0.1:6379 db 9): `--jobs`
single `task.enqueue` calls, timed (wall µs each), then one in-process worker
(`Worker(..., burst=True)`, 4 threads) drains them; its CPU is the process's
(time.process_time) from start to the last job.
Printed: per store and mode the median over rounds and the best round (wall time and the
producer's CPU per enqueue: on a loaded machine the CPU is the steadier figure, and the
best round the least disturbed one), and what encryption adds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import timeit
import uuid

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
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(jobs):
        echo.enqueue(PAYLOAD)
    enqueue = (time.perf_counter() - started) / jobs * 1e6
    producer = (time.process_time() - cpu) / jobs * 1e6
    cpu = time.process_time()
    Worker(app, WorkerConfig(burst=True, concurrency=4)).run()
    worker = (time.process_time() - cpu) / jobs * 1e6
    assert app.stats()["default"]["succeeded"] == jobs + 1
    if store == "redis":
        app.purge(["succeeded"])
    app.close()
    return enqueue, producer, worker


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=["ops", "sqlite", "redis"], default=None)
    asked = parser.parse_args()
    if asked.only in (None, "ops"):
        operations()
    stores = [asked.only] if asked.only not in (None, "ops") else [] if asked.only else ["sqlite", "redis"]
    with tempfile.TemporaryDirectory() as folder:
        for store in stores:
            figures: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
            for _ in range(asked.rounds):
                for encrypted in (False, True):
                    figures[encrypted].append(one_round(store, encrypted, asked.jobs, folder))
            print(f"{store} [{asked.rounds} rounds of {asked.jobs} jobs: median, then the best round]")
            rows = ("enqueue, wall µs/job", "enqueue, producer CPU µs/job", "worker CPU µs/job")
            for i, what in enumerate(rows):
                shown = []
                for pick in (statistics.median, min):  # the best round: the least disturbed on a loaded machine
                    plain, sealed = (pick(f[i] for f in figures[mode]) for mode in (False, True))
                    shown.append(f"{plain:7.1f} -> {sealed:7.1f} ({(sealed / plain - 1) * 100:+.0f}%)")
                print(f"  {what:<30} {'   best '.join(shown)}")

if __name__ == "__main__":
    main()
