"""A rate limit held by several worker processes: runs per minute, and idle workers.

    python -m bench.rate_limit --url redis://127.0.0.1:6379/0          # 4 workers, 100/m, 3 min
    python -m bench.rate_limit --rate 10/s --seconds 10                 # a short look, on SQLite

Enqueues more jobs than the limit lets run in the time (a backlog), starts `--workers`
worker processes (`deferq worker`, the command users run) on a task declared with
`rate=...`, and lets them work for `--seconds`. Each run appends its start time to a
record file. Printed: runs in each clock period (a minute for "100/m") and in the
busiest sliding window of one period, the limit, and the CPU time each worker used
(user + system, from the kernel when it exits): workers that wait for turns should be
close to idle. Exit 1 when a period held more runs than the limit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import deferq
from bench.soak import ROOT, prepare
from deferq.limits import Rate

RATE = os.environ.get("DEFERQ_BENCH_RATE", "100/m")
app = deferq.App(os.environ.get("DEFERQ_URL", "memory://"))


@app.task(name="limited", rate=RATE)
def limited(i: int) -> None:
    fd = os.open(os.environ["DEFERQ_BENCH_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"%.6f\n" % time.time())
    finally:
        os.close(fd)


def start_worker(url: str, record: Path, rate: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DEFERQ_URL": url, "DEFERQ_BENCH_RECORD": str(record), "DEFERQ_BENCH_RATE": rate,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "deferq", "worker", "--app", "bench.rate_limit:app",
                                 "--url", url, "--concurrency", "8", "--log-level", "warning"],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=out)


def cpu_seconds(process: subprocess.Popen[bytes]) -> float:
    """User + system CPU of a worker, read as it exits (SIGTERM: a graceful stop)."""
    process.send_signal(signal.SIGTERM)
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    return usage.ru_utime + usage.ru_stime


def busiest(times: list[float], period: float) -> int:
    times = sorted(times)
    most, start = 0, 0
    for end, t in enumerate(times):
        while times[start] <= t - period:
            start += 1
        most = max(most, end - start + 1)
    return most


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="the store (default: a new SQLite file)")
    parser.add_argument("--rate", default="100/m")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=180.0)
    args = parser.parse_args(argv)
    rate = Rate.parse(args.rate)
    workdir = Path(tempfile.mkdtemp(prefix="deferq-rate-"))
    url, cleanup = prepare(args.url, workdir)
    record, log = workdir / "runs.log", workdir / "workers.log"
    try:
        os.environ["DEFERQ_BENCH_RATE"] = args.rate
        producer = deferq.App(url)
        producer.task(name="limited", rate=args.rate)(limited.fn)
        backlog = int(rate.count * args.seconds / rate.period * 1.5) + rate.count
        producer.enqueue_many(producer.registry.tasks["limited"].call(i) for i in range(backlog))
        workers = [start_worker(url, record, args.rate, log) for _ in range(args.workers)]
        began = time.time()
        time.sleep(args.seconds)
        cpu = [cpu_seconds(worker) for worker in workers]
        producer.close()
    finally:
        cleanup()
    runs = [float(line) for line in record.read_text().split()] if record.exists() else []
    shutil.rmtree(workdir, ignore_errors=True)
    per_period = Counter(int(t // rate.period) for t in runs)
    print(f"rate {args.rate} on {args.url or 'sqlite (a new file)'}: {args.workers} workers x 8 slots, "
          f"{args.seconds:g} s, a backlog of {backlog} jobs")
    for index in sorted(per_period):
        start = index * rate.period
        whole = start >= began and start + rate.period <= began + args.seconds
        print(f"  {time.strftime('%H:%M:%S', time.localtime(start))}  {per_period[index]:5d} runs"
              f"{'' if whole else '  (part of the period)'}")
    most = busiest(runs, rate.period)
    print(f"  busiest sliding window of {rate.period:g} s: {most} runs (limit {rate.count})")
    print(f"  worker CPU over {args.seconds:g} s: " + ", ".join(f"{c:.2f} s" for c in cpu)
          + f" ({sum(cpu) / len(cpu) / args.seconds * 100:.1f}% of a core each)")
    over = [n for n in per_period.values() if n > rate.count]
    if over:
        print(f"rate_limit: FAILED: a period held {max(over)} runs, over the limit of {rate.count}",
              file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
