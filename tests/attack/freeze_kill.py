"""The freeze-and-kill harness: a real worker process is held at a named point of a job's
attempt or of firing a schedule (`deferq.attempt.pauses`, DEFERQ_TEST_PAUSE_AT), then
frozen there past its lease (SIGSTOP; another worker takes the job over and finishes it;
SIGCONT) or killed there (SIGKILL), and what the docs promise at that point is checked:

- no job is lost: it succeeds, with the result of its steps;
- a step's function runs twice only when the kill landed inside it, or the freeze
  between its lease check and its first side effect (docs/steps.md), else once;
- a finished job never runs again: the frozen worker's outcome is refused;
- a schedule's tick is enqueued at most once, and none is missed (docs/schedules.md).

Its worker processes load this module's `app` (`--app tests.attack.freeze_kill:app`):
it imports nothing of the tests but deferq, so they start as fast as a user's worker.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deferq
from deferq.attempt.pauses import POINTS, pause_at
from deferq.job import JobState
from deferq.options import JobOptions
from deferq.schedules.definition import PeriodicJob

LEASE = 2.0  # seconds: a frozen worker loses its jobs soon
app = deferq.App(os.environ.get("DEFERQ_URL", "memory://"), lease=LEASE)

CHUNK_POINTS = ("chunk.call",)
INSIDE = "step.inside"  # not deferq's: the step function below holds itself there
STEP_POINTS = ("step.before", "step.run", INSIDE, "step.after", "settle.before")
UNDO_POINT = "undo.after"  # the first undo handler's outcome kept, the next not called yet
SCHEDULE_POINTS = ("schedule.claim", "schedule.enqueue")
CHILD_POINTS = ("children.before", "children.store", "children.stored")
KIDS = 3
MODES = ("freeze", "kill")
EVERY = 2.0  # seconds between the ticks of the schedule the harness fires
ROOT = Path(__file__).resolve().parents[2]


def note(what: str) -> None:
    """Append "<what> <pid>" to DEFERQ_TEST_RECORD (atomic with O_APPEND, across processes)."""
    fd = os.open(os.environ["DEFERQ_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{what} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def first(n: int) -> int:
    note("one")  # the step's side effect, then a point the test may hold this process at
    pause_at(INSIDE)
    return n + 1


def second(n: int) -> int:
    note("two")
    return n * 10


@app.task(timeout=60, max_attempts=5)
def stepped(n: int) -> int:
    """Two durable steps; their functions note each run."""
    job = deferq.current_job()
    assert job is not None
    return job.step("two", second, job.step("one", first, n))


def book(what: str) -> str:
    note(f"book-{what}")
    return what


def unbook(what: str) -> None:
    note(f"unbook-{what}")


@app.task(timeout=60, max_attempts=1)
def saga() -> None:
    """Three steps with undo handlers, then a failure: the handlers run, the last first."""
    job = deferq.current_job()
    assert job is not None
    for what in ("a", "b", "c"):
        job.step(what, book, what, undo=unbook)
    raise RuntimeError("the saga fails after its steps")


@app.task(max_attempts=5)
def kid(n: int) -> int:
    """A child of `gathered`: notes each run."""
    note("kid")
    return n * n


@app.task(timeout=60, max_attempts=5)
def gathered(n: int) -> list[int]:
    """A gather of `n` children (`kid`)."""
    job = deferq.current_job()
    assert job is not None
    return job.gather("fan-out", [kid.call(i) for i in range(n)])


@app.task(chunk=deferq.Chunk(size=5, wait=0.1), queue="chunks")
def noted_chunk(items: list[int]) -> list[int]:
    """A chunk task: notes each item it was called with."""
    for item in items:
        note(f"item-{item}")
    return [item * 2 for item in items]


@app.task()
def beat() -> None:
    """The schedule's task."""
    note("beat")


# -- the harness (the test process) ------------------------------------------------------


class Worker:
    """One `deferq worker` process of this module's app, one slot, held at `point` if given."""

    def __init__(self, url: str, folder: Path, name: str, point: str | None = None,
                 queues: tuple[str, ...] = ()) -> None:
        self.url, self.log, self.pause = url, folder / f"{name}.log", folder / f"{name}.pause"
        env = {**os.environ, "DEFERQ_URL": url, "DEFERQ_TEST_RECORD": str(folder / "record.log"),
               "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), **self.more_env}
        env.pop("DEFERQ_TEST_PAUSE_AT", None)
        if point is not None:
            env.update(DEFERQ_TEST_PAUSE_AT=point, DEFERQ_TEST_PAUSE_FILE=str(self.pause))
        with self.log.open("ab") as out:
            said = out if self.says_on_stdout else subprocess.DEVNULL
            self.process = subprocess.Popen([sys.executable, "-m", "deferq", *self.command(url, queues)], env=env,
                                            cwd=ROOT, stdout=said, stderr=out)

    more_env: dict[str, str] = {}
    says_on_stdout = False

    def command(self, url: str, queues: tuple[str, ...]) -> list[str]:
        return ["worker", "--app", "tests.attack.freeze_kill:app", "--url", url, "-c", "1", "--log-level", "info",
                *(f"--queue={queue}" for queue in queues)]

    def held(self) -> bool:
        return self.pause.exists() and bool(self.pause.read_text().strip())

    def said(self, text: str) -> bool:
        return text in self.log.read_text()

    def freeze(self) -> None:
        """SIGSTOP it. On SQLite, not while it holds the write lock: a stopped writer would
        stop every process on the file, which is SQLite, not what is tested here."""
        if not self.url.startswith("sqlite"):
            os.kill(self.process.pid, signal.SIGSTOP)
            return
        for _ in range(100):
            os.kill(self.process.pid, signal.SIGSTOP)
            probe = sqlite3.connect(self.url.split("///", 1)[1], timeout=0, isolation_level=None)
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("ROLLBACK")
                return
            except sqlite3.OperationalError:
                os.kill(self.process.pid, signal.SIGCONT)
                time.sleep(0.01)
            finally:
                probe.close()
        raise AssertionError("the worker always held the SQLite write lock")

    def thaw(self) -> None:
        """Let it go on from the point it is held at."""
        Path(f"{self.pause}.go").touch()
        os.kill(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """A clean stop (SIGTERM), resumed first if frozen; killed if it hangs."""
        if self.process.poll() is None:
            Path(f"{self.pause}.go").touch()
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def notes(folder: Path) -> Counter[str]:
    record = folder / "record.log"
    return Counter(line.split()[0] for line in record.read_text().splitlines()) if record.exists() else Counter()


def step_runs(point: str, mode: str) -> dict[str, int]:
    """How often each step's function runs when the first worker is held at `point`,
    then frozen past its lease or killed there (docs/steps.md): twice only for a kill
    inside the step, or a freeze between its lease check and its first side effect."""
    twice = point == INSIDE or (point == "step.run" and mode == "freeze")
    return {"one": 2 if twice else 1, "two": 1}


def take_over(url: str, folder: Path, point: str, mode: str, finished: Callable[[], Any],
              woke: str, queues: tuple[str, ...] = ()) -> tuple[Any, Worker]:
    """Hold a worker at `point`, freeze it there or kill it, and start another, until
    `finished()` says the other one did the work; a frozen worker is then thawed, past its
    lease, and goes on until its log says `woke`. Both are stopped at the end. Returns what
    `finished` returned, and the held worker (its log stays)."""
    held, other = Worker(url, folder, "held", point, queues), None
    try:
        wait_for(held.held, 60, f"a worker held at {point}")
        if mode == "freeze":
            held.freeze()
        else:
            held.kill()
        other = Worker(url, folder, "other", queues=queues)
        done = wait_for(finished, 60, "the other worker to do the work")
        if mode == "freeze":
            held.thaw()
            wait_for(lambda: held.said(woke), 30, f"the thawed worker to say {woke!r}")
        return done, held
    finally:
        for worker in (held, other):
            if worker is not None:
                worker.stop()


def run_step_case(url: str, folder: Path, point: str, mode: str) -> None:
    """A job of two steps; its first worker held at `point`, then frozen or killed there;
    a second worker takes it over. Checked: the job succeeded with its steps' result,
    once; each step's function ran as often as the docs allow; a frozen worker, thawed
    after the job finished, changed nothing (its outcome refused) and said why."""
    assert point in STEP_POINTS and mode in MODES and (point == INSIDE or point in POINTS)
    store = deferq.App(url)
    try:
        job = store.enqueue("stepped", [4])
        done, held = take_over(url, folder, point, mode,
                               lambda: (j := store.get(job.id)) is not None and j.state.finished and j,
                               "after losing its lease")
        after = store.get(job.id)
    finally:
        store.close()
    assert after is not None
    assert (done.state, done.result) == ("succeeded", 50), (done.state, done.error)
    assert (after.state, after.result, after.attempts) == ("succeeded", 50, done.attempts), "it ran again"
    runs = notes(folder)
    assert {step: runs[step] for step in ("one", "two")} == step_runs(point, mode), runs
    if mode == "freeze" and point in ("step.before", "step.after"):  # stopped by its lease check
        assert held.said(f"lost its lease before step {'one' if point == 'step.before' else 'two'!r}")


def run_undo_case(url: str, folder: Path, mode: str) -> None:
    """A job whose three steps have undo handlers fails; its worker is held after the
    first handler's outcome was kept, then frozen past its lease or killed there; the job
    ends dead (its lease lapsed, its attempts used up), and another worker's sweep queues
    it again to finish. Checked: each handler ran once, the last step's first; the job
    ends dead with its own error; a frozen worker, thawed, ran no handler more."""
    store = deferq.App(url)
    try:
        job = store.enqueue("saga")

        def compensated() -> Any:
            found = store.get(job.id)
            done = found is not None and found.state == JobState.DEAD and all(
                (row.get("undone") or {}).get("state") == "done" for row in store.steps(job.id))
            return done and found

        done, held = take_over(url, folder, UNDO_POINT, mode, compensated, "lost its lease")
    finally:
        store.close()
    assert "the saga fails after its steps" in (done.error or ""), done.error
    record = (folder / "record.log").read_text().split()[::2]
    assert [n for n in record if n.startswith("unbook")] == ["unbook-c", "unbook-b", "unbook-a"], record
    assert [n for n in record if n.startswith("book")] == ["book-a", "book-b", "book-c"], record


def run_children_case(url: str, folder: Path, point: str, mode: str) -> None:
    """A parent gathering KIDS children; its first worker held at `point` of the gather,
    then frozen or killed there; a second worker takes the parent over. Checked: the parent
    succeeded with every result in order; each child was stored once and ran once; a frozen
    worker, thawed, stored no child again and changed nothing."""
    assert point in CHILD_POINTS and point in POINTS and mode in MODES
    store = deferq.App(url)
    try:
        job = store.enqueue("gathered", [KIDS])
        done, _ = take_over(url, folder, point, mode,
                            lambda: (j := store.get(job.id)) is not None and j.state.finished and j,
                            "after losing its lease")
        after = store.get(job.id)
        kids = [j for state in JobState for j in store.list_jobs(state, limit=1000) if j.task == "kid"]
        tree = store.children(job.id)
    finally:
        store.close()
    assert after is not None
    assert (done.state, done.result) == ("succeeded", [i * i for i in range(KIDS)]), (done.state, done.error)
    assert (after.state, after.result) == ("succeeded", done.result), "it ran again"
    assert sorted(j.id for j in kids) == sorted(row["id"] for row in tree) and len(kids) == KIDS, (kids, tree)
    assert notes(folder)["kid"] == KIDS, notes(folder)


def ticks(store: deferq.App, states: tuple[JobState, ...] = tuple(JobState)) -> Counter[float]:
    """How many jobs each tick of the schedule "beat" enqueued (of those in `states`)."""
    jobs = {job.id: job for state in states for job in store.list_jobs(state, limit=10_000)}  # one a job:
    # a job that moved on between two lists is in both
    keys = [job.key for job in jobs.values() if (job.key or "").startswith("schedule:beat:")]
    return Counter(float(key.rsplit(":", 1)[1]) for key in keys)


def run_schedule_case(url: str, folder: Path, point: str, mode: str) -> None:
    """A schedule every EVERY seconds; the leader held at `point` of its first tick, then
    frozen past the leader's lease (10 s) or killed; a second worker leads then. Checked,
    after the frozen leader woke and went on: each tick enqueued at most once, none
    missed (the late ones fire within GRACE)."""
    assert point in SCHEDULE_POINTS and mode in MODES
    store = deferq.App(url)
    try:
        store.schedules.put(PeriodicJob("beat", None, "beat", every=EVERY), "api")
        # three ticks' jobs finished: a unique key holds only while its job is unfinished
        take_over(url, folder, point, mode, lambda: len(ticks(store, (JobState.SUCCEEDED,))) >= 3,
                  "stopped leading upkeep")
        fired = ticks(store)
    finally:
        store.close()
    assert max(fired.values()) == 1, f"a tick was enqueued twice: {fired}"
    times = sorted(fired)
    assert times == [times[0] + EVERY * n for n in range(len(times))], f"a tick was missed: {times}"


def run_chunk_case(url: str, folder: Path, point: str, mode: str) -> None:
    """Ten items of a chunk task (calls of five); the first worker held as it is about to
    call the function with its first chunk, then frozen past its lease or killed; a
    second worker runs every item. Checked: each job succeeded once, with its own
    result, which no later outcome changed; an item reached the function once, or (a
    freeze) at most twice: the thawed worker's calls, whose outcomes the store refused,
    as its log says."""
    assert point in CHUNK_POINTS and mode in MODES
    store = deferq.App(url)
    try:
        jobs = store.enqueue_many([deferq.Call("noted_chunk", (i,), {}, JobOptions(queue="chunks"))
                                   for i in range(10)])

        def all_done() -> list[deferq.Job] | None:
            found = [store.get(job.id) for job in jobs]
            return found if all(j is not None and j.state.finished for j in found) else None  # type: ignore[return-value]

        done, held = take_over(url, folder, point, mode, all_done, "after losing its lease", ("chunks",))
        after = [store.get(job.id) for job in jobs]
    finally:
        store.close()
    assert [(j.state, j.result) for j in done] == [("succeeded", i * 2) for i in range(10)]
    assert [(j.state, j.result, j.attempts) for j in after if j] == [(j.state, j.result, j.attempts) for j in done]
    runs = notes(folder)
    counts = sorted(runs[f"item-{i}"] for i in range(10))
    if mode == "kill":  # the held call never reached the function: every item once
        assert counts == [1] * 10, runs
    else:  # the thawed worker makes its held call (and may make the next it had gathered, leased
        # ahead), its outcomes refused: those items twice, none more
        assert counts.count(2) >= 5 and max(counts) == 2, runs


# -- deferq encryption rotate held between opening a value and swapping it in ---------------

OLD_KEY, NEW_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY2ODk6Ozw9Pj8="
BOTH_KEYS = f"new:{NEW_KEY},old:{OLD_KEY}"


class Rotate(Worker):
    """`deferq encryption rotate` in a process of its own, held at rotate.reseal if asked."""

    more_env = {"DEFERQ_ENCRYPTION_KEYS": BOTH_KEYS}
    says_on_stdout = True  # its --json report

    def command(self, url: str, queues: tuple[str, ...]) -> list[str]:
        return ["encryption", "rotate", "--url", url, "--json"]


def old_values(store: deferq.App) -> list[str]:
    """The ids of jobs holding a value written under the old key."""
    return [job.id for state in JobState for job in store.backend.list_jobs(state, limit=10_000)
            if "$enc:old:" in repr((job.kwargs, job.result, job.error))]


def run_rotate_case(url: str, folder: Path, mode: str) -> None:
    """Jobs written under the old key; a rotate held at its first swap, then killed there,
    or frozen while a second rotate does the whole work and thawed after. Checked: every
    value still opens with the keys (none lost or half written), the frozen one's late swap
    changes nothing, and after a rotate that ran to its end none is under the old key."""
    assert mode in MODES
    old = deferq.App(url, encryption=deferq.Encryption(keys={"old": OLD_KEY}))
    keyed = deferq.App(url, encryption=deferq.Encryption.from_env(environ={"DEFERQ_ENCRYPTION_KEYS": BOTH_KEYS}))
    try:
        jobs = [old.enqueue("stepped", [n], delay=3600) for n in range(5)]
        held = Rotate(url, folder, "held", "rotate.reseal")
        try:
            wait_for(held.held, 60, "the rotate held at rotate.reseal")
            if mode == "kill":
                held.kill()
            else:
                held.freeze()
                other = Rotate(url, folder, "other")
                assert other.process.wait(timeout=60) == 0, other.log.read_text()
                held.thaw()
                assert held.process.wait(timeout=60) == 0, held.log.read_text()
                said = held.log.read_text()  # its page of jobs was read before: each swap finds the value gone
                assert '"resealed": 0' in said and '"changed_meanwhile": 5' in said, said
        finally:
            held.stop()
        assert [keyed.get(job.id).args for job in jobs] == [(n,) for n in range(5)]  # all open
        if mode == "kill":
            assert old_values(keyed), "the killed rotate finished its work"
            again = Rotate(url, folder, "again")
            assert again.process.wait(timeout=60) == 0, again.log.read_text()
        assert not old_values(keyed)
        assert [keyed.get(job.id).args for job in jobs] == [(n,) for n in range(5)]
    finally:
        keyed.close()
        old.close()
