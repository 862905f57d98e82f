"""Two git revisions of deferq side by side, in interleaved rounds: a worker's CPU per
no-op job and one `task.enqueue`'s µs per call, on SQLite and Redis.

    .venv/bin/python -m bench.compare_revs main HEAD                 # 5 rounds, every measure
    .venv/bin/python -m bench.compare_revs main HEAD --rounds 9 --only enqueue-redis,worker-sqlite

Each revision is checked out once into a detached worktree under /tmp (reused by a later
run; --remove removes them at the end) and run from its `src` by PYTHONPATH with this
venv's Python and dependencies. Each round runs every measure for A and for B in turn, so
load on a shared machine falls on both alike. Measures:
- worker-sqlite, worker-redis: `bench.worker_cpu` (2 `deferq worker` processes, library
  defaults, --jobs no-op jobs enqueued while the queue is paused; the workers' user +
  system CPU from resume to the last job's success): µs of CPU per job, A's run, then
  B's. /proc counts CPU in clock ticks (10 ms): a run of 20,000 jobs reads it to about
  1 µs a job.
- enqueue-sqlite, enqueue-redis: one process per revision, each with a store of its own,
  enqueues no-op jobs one `task.enqueue` at a time (an int and a 32-character string, as
  PEERS.md's workload A), after 200 untimed ones. The two take turns in --chunks chunks
  of --calls calls (A, B, A, B, ...), so a burst of load lasts across both: wall-clock
  µs per call over the round, and the process's CPU µs per call beside it.
Printed: per measure the median of each revision's rounds (an enqueue round's figure is
the median of its chunks), their spread (least-most), B/A of the medians, and B/A paired:
the median of B/A over the pairs of runs or chunks taken together (the steadiest).
Redis: database 5 of 127.0.0.1:6379, flushed before each run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("BENCH_REVS_REDIS_URL", "redis://127.0.0.1:6379/5?prefix=revbench")
MEASURES = ("worker-sqlite", "worker-redis", "enqueue-sqlite", "enqueue-redis")
WARM = 200


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def checkout(rev: str) -> tuple[str, Path]:
    """(the commit id, its worktree): a detached worktree of `rev` under /tmp."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    tree = Path(tempfile.gettempdir()) / f"deferq-rev-{commit[:12]}"
    if not (tree / "src" / "deferq").is_dir():
        git("worktree", "add", "--detach", "--force", str(tree), commit)
    return commit, tree


def enqueue_child(url: str) -> None:
    """In the revision's process: for each line `N` read, time N single enqueues and
    print (JSON) the wall-clock and the CPU µs per call; the App stays open between."""
    from deferq import App

    app = App(url)

    @app.task(queue="revbench")
    def noop(i: int, text: str) -> None:
        return None

    for i in range(WARM):
        noop.enqueue(i, "x" * 32)
    print("{}", flush=True)
    for line in sys.stdin:
        calls = int(line)
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(calls):
            noop.enqueue(i, "x" * 32)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(json.dumps({"us": wall / calls * 1e6, "cpu_us": cpu / calls * 1e6}), flush=True)
    app.close()


class Enqueuer:
    """A process of one revision that enqueues on demand (enqueue_child)."""

    def __init__(self, src: Path, url: str, folder: str) -> None:
        env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}"}
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.compare_revs", "--enqueue-child", url],
                                     env=env, cwd=folder, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.ask(None)  # warmed up

    def ask(self, calls: int | None) -> dict[str, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if calls is not None:
            self.proc.stdin.write(f"{calls}\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the enqueuing process ended (exit {self.proc.wait()})")
        said: dict[str, float] = json.loads(line)
        return said

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def enqueue_round(trees: dict[str, Path], store: str, args: argparse.Namespace,
                  folder: str) -> dict[str, list[dict[str, float]]]:
    """Per revision, (wall, CPU) µs per `task.enqueue` of each of --chunks chunks of
    --calls calls, the revisions' chunks alternating; a process and store per revision."""
    from bench.worker_cpu import empty

    urls = {rev: f"{REDIS_URL}:{i}" if store == "redis" else f"sqlite:///{folder}/enqueue-{i}.db"
            for i, rev in enumerate(trees)}
    for url in urls.values():
        empty(url)
    enqueuers = {rev: Enqueuer(src, urls[rev], folder) for rev, src in trees.items()}
    chunks: dict[str, list[dict[str, float]]] = {rev: [] for rev in trees}
    try:
        for _ in range(args.chunks):
            for rev, enqueuer in enqueuers.items():
                chunks[rev].append(enqueuer.ask(args.calls))
    finally:
        for enqueuer in enqueuers.values():
            enqueuer.close()
        for url in urls.values():
            empty(url)
    return chunks


def worker_run(src: Path, store: str, jobs: int, folder: str) -> float:
    """µs of the workers' CPU per no-op job, the revision at `src` running them."""
    from bench import worker_cpu

    url = REDIS_URL if store == "redis" else f"sqlite:///{folder}/worker.db"
    cpu_ms_per_1000, _rate = worker_cpu.one_run(str(src), "noop", jobs, 2, [], url)
    return cpu_ms_per_1000


Samples = dict[str, list[dict[str, float]]]  # per revision, its samples: the nth of A and of B ran together


def report(results: dict[str, list[Samples]], names: tuple[str, str]) -> list[str]:
    """Per measure and figure: each revision's median over rounds (a round's figure is its
    samples' median) with the least and most, B/A of those medians, and the median of
    B/A over all pairs of samples taken together."""
    a, b = names
    lines = [f"| measure | {a} | {b} | B/A | B/A paired |", "|---|---:|---:|---:|---:|"]
    for name, rounds in results.items():
        for key, label in (("us", "µs CPU per job" if name.startswith("worker") else "µs per call"),
                           ("cpu_us", "its CPU µs per call")):
            if key not in rounds[0][a][0]:
                continue
            cells = []
            for rev in names:
                values = [statistics.median(sample[key] for sample in round_[rev]) for round_ in rounds]
                cells.append((statistics.median(values), min(values), max(values)))
            ratio = cells[1][0] / cells[0][0]
            paired = statistics.median(y[key] / x[key] for round_ in rounds
                                       for x, y in zip(round_[a], round_[b], strict=True))
            shown = [f"{m:.1f} ({lo:.1f}-{hi:.1f})" for m, lo, hi in cells]
            lines.append(f"| {name}: {label} | {shown[0]} | {shown[1]} | {ratio:.3f} | {paired:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--enqueue-child"]:
        enqueue_child(argv[1])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.compare_revs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="revision A (the one before)")
    parser.add_argument("b", help="revision B (the one after)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000, help="no-op jobs per worker run")
    parser.add_argument("--calls", type=int, default=500, help="enqueue calls per chunk")
    parser.add_argument("--chunks", type=int, default=10, help="chunks per revision in a round")
    parser.add_argument("--only", default=",".join(MEASURES), help="measures, comma-separated")
    parser.add_argument("--remove", action="store_true", help="remove the worktrees at the end")
    args = parser.parse_args(argv)
    chosen = [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = set(chosen) - set(MEASURES)
    if unknown:
        parser.error(f"unknown measures: {', '.join(sorted(unknown))} (known: {', '.join(MEASURES)})")
    (commit_a, tree_a), (commit_b, tree_b) = checkout(args.a), checkout(args.b)
    names = (f"A {args.a} {commit_a[:7]}", f"B {args.b} {commit_b[:7]}")
    trees = {names[0]: tree_a / "src", names[1]: tree_b / "src"}
    results: dict[str, list[Samples]] = {m: [] for m in chosen}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory(prefix="deferq-revs-") as folder:
            for round_ in range(args.rounds):
                for name in chosen:
                    kind, store = name.split("-")
                    if kind == "worker":
                        got = {rev: [{"us": worker_run(trees[rev], store, args.jobs, folder)}] for rev in names}
                    else:
                        got = enqueue_round(trees, store, args, folder)
                    results[name].append(got)
                    for rev, samples in got.items():
                        said = ", ".join(f"{k} {statistics.median(c[k] for c in samples):.1f}" for k in samples[0])
                        print(f"round {round_ + 1} {name} {rev}: {said}", file=sys.stderr, flush=True)
    finally:
        if args.remove:
            for tree in {tree.parent for tree in trees.values()}:
                git("worktree", "remove", "--force", str(tree))
    print(f"bench.compare_revs, {started}, medians of {args.rounds} interleaved rounds (least-most), "
          f"load {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; worker runs of {args.jobs:,} "
          f"no-op jobs, enqueue rounds of {args.chunks} x {args.calls:,} calls")
    print("\n".join(report(results, names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
