"""What PostgreSQL's server spends per job on a claim and a settle, the store calls alone.

    .venv/bin/python -m bench.pg_writes [--jobs 20000] [--batch 100] [--rounds 3]

Each round: a fresh database (bench_peers_pg_writes on 127.0.0.1:5432), --jobs no-op jobs
stored beforehand (enqueue_many, not timed, then VACUUM ANALYZE), then one client claims
--batch at a time (`reserve`) and settles each batch as succeeded (`settle`) until none is
left. Printed per round: the CPU of the database's server processes per job (read from
/proc, as bench.chunks does: the server must run on this machine), the client's wall time
per job in the claims and in the settles, the table's updates and how many of them were
HOT (pg_stat_user_tables), and the load. To compare two revisions, run each in turn from
its own checkout (PYTHONPATH=<checkout>/src:<checkout>), so that load falls on both alike.
"""

from __future__ import annotations

import argparse
import time

import psycopg

from deferq.backends import open_backend
from deferq.backends.base import Enqueue, Outcome
from deferq.job import Job, new_job_id

from . import machine
from .chunks import server_cpu
from .peers.stores import recreate_database

URL = "postgresql://postgres@127.0.0.1:5432/bench_peers_pg_writes"
UPDATES = "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'deferq_jobs'"


def one_round(jobs: int, batch: int) -> dict[str, float]:
    recreate_database(URL)
    backend = open_backend(URL)
    try:
        for start in range(0, jobs, 1000):
            backend.enqueue_many([Enqueue(Job(id=new_job_id(), task="bench.noop", args=(i,), queue="q"))
                                  for i in range(start, min(jobs, start + 1000))])
        with psycopg.connect(URL, autocommit=True) as admin:
            admin.execute("VACUUM ANALYZE deferq_jobs")
            before = admin.execute(UPDATES).fetchone() or (0, 0)
        claiming = settling = 0.0
        done = 0
        server = server_cpu("postgres", URL) or 0.0
        with machine.Load() as load:
            while True:
                started = time.perf_counter()
                leased = backend.reserve(["q"], batch, "bench", 60, (0, 1, 2))
                claimed = time.perf_counter()
                claiming += claimed - started
                if not leased:
                    break
                backend.settle([Outcome(job, "succeeded") for job in leased])
                settling += time.perf_counter() - claimed
                done += len(leased)
        server = (server_cpu("postgres", URL) or 0.0) - server
    finally:
        backend.close()  # its statistics reach pg_stat_user_tables as it disconnects
    time.sleep(0.5)
    with psycopg.connect(URL, autocommit=True) as admin:
        after = admin.execute(UPDATES).fetchone() or (0, 0)
    return {"server_us": server / done * 1e6, "claim_us": claiming / done * 1e6,
            "settle_us": settling / done * 1e6, "updates": after[0] - before[0],
            "hot": after[1] - before[1], "load": load.value}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    print(f"PostgreSQL: {options.jobs:,} jobs claimed and settled {options.batch} at a time")
    print(machine.describe())
    print()
    print("| round | server CPU per job | claim per job | settle per job | updates | HOT | load |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for number in range(1, options.rounds + 1):
        m = one_round(options.jobs, options.batch)
        print(f"| {number} | {m['server_us']:.1f} us | {m['claim_us']:.1f} us | {m['settle_us']:.1f} us "
              f"| {m['updates']:,.0f} | {m['hot']:,.0f} | {m['load']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
