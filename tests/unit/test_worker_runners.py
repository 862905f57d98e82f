"""The worker's runner threads (worker/runners.py): short jobs back to back on one
thread, long ones side by side, a stalled queue nudged, and every job run once."""

from __future__ import annotations

import threading
import time

import pytest

from deferq.worker import runners as runners_module
from deferq.worker.runners import SHORT, Runners

pytestmark = pytest.mark.timeout(20)


class Recorder:
    def __init__(self, seconds: dict[str, float] | None = None) -> None:
        self.threads: dict[str, list[str]] = {}  # task -> names of the threads that ran it
        self.seconds = seconds or {}
        self.lock = threading.Lock()
        self.done = threading.Semaphore(0)
        self.release = threading.Event()
        self.batches: list[list[tuple[str, int]]] = []  # what each call of `done` was given
        self.returned = threading.Semaphore(0)

    def ended(self, results: list[tuple[str, int]]) -> None:
        with self.lock:
            self.batches.append(results)
        for _ in results:
            self.returned.release()

    def run(self, item: tuple[str, int]) -> tuple[str, int]:
        task, _ = item
        if task == "stuck":
            self.release.wait(10)
        elif task in self.seconds:
            time.sleep(self.seconds[task])
        with self.lock:
            self.threads.setdefault(task, []).append(threading.current_thread().name)
        self.done.release()
        return item

    def wait_all(self, count: int) -> None:
        for _ in range(count):
            assert self.done.acquire(timeout=10), "a submitted job was never run"

    def wait_returned(self, count: int) -> None:
        for _ in range(count):
            assert self.returned.acquire(timeout=10), "a job's result never reached done"


def runners_for(recorder: Recorder, count: int = 4, short: float = SHORT
                ) -> Runners[tuple[str, int], tuple[str, int]]:
    runners: Runners[tuple[str, int], tuple[str, int]] = Runners(count, recorder.run, recorder.ended,
                                                                 lambda item: item[0], short=short)
    runners.start()
    return runners


def test_short_jobs_run_back_to_back_on_one_thread() -> None:
    recorder = Recorder()
    runners = runners_for(recorder, short=1.0)  # "short" wide enough for a loaded machine
    try:
        runners.submit([("quick", 0)])  # a first run: the task's time becomes known
        recorder.wait_all(1)
        for _ in range(20):
            runners.submit([("quick", i) for i in range(4)])
            recorder.wait_all(4)
        # most batches ran on one thread: far fewer thread changes than jobs
        names = recorder.threads["quick"][1:]
        changes = sum(a != b for a, b in zip(names, names[1:], strict=False))
        assert changes < len(names) // 2
        # and their results reached `done` together: fewer calls than jobs, none lost
        recorder.wait_returned(81)
        assert sorted(r for batch in recorder.batches for r in batch) == sorted(
            [("quick", 0)] + [("quick", i) for _ in range(20) for i in range(4)])
        assert len(recorder.batches) < 81
    finally:
        runners.close()


def test_long_jobs_start_side_by_side() -> None:
    recorder = Recorder({"slow": 0.2})
    runners = runners_for(recorder)
    try:
        started = time.monotonic()
        runners.submit([("slow", i) for i in range(4)])
        recorder.wait_all(4)
        assert time.monotonic() - started < 0.6  # not 4 x 0.2 s one after another
        assert len(set(recorder.threads["slow"])) == 4
    finally:
        runners.close()


def test_a_short_task_that_gets_stuck_is_nudged_past() -> None:
    recorder = Recorder()
    runners = runners_for(recorder, 2)
    try:
        runners.submit([("stuck", 0)])
        recorder.release.set()
        recorder.wait_all(1)
        recorder.release.clear()
        runners._typical["stuck"] = SHORT / 10  # known as short, then stuck behind a queue
        runners.submit([("stuck", 1), ("quick", 0)])
        time.sleep(SHORT * 5)
        runners.nudge()  # the keeper's tick
        recorder.wait_all(1)
        assert "quick" in recorder.threads
        recorder.release.set()
        recorder.wait_all(1)
    finally:
        recorder.release.set()
        runners.close()


def test_every_job_runs_once_from_many_submitters() -> None:
    recorder = Recorder({"mixed": 0.0005})
    runners = runners_for(recorder, 8)

    def submit(n: int) -> None:
        for i in range(50):
            runners.submit([("quick" if i % 2 else "mixed", n * 1000 + i)])

    try:
        threads = [threading.Thread(target=submit, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        recorder.wait_all(200)
        recorder.wait_returned(200)
        assert sum(len(names) for names in recorder.threads.values()) == 200
        assert sorted(r[1] for batch in recorder.batches for r in batch) == sorted(
            n * 1000 + i for n in range(4) for i in range(50))
    finally:
        runners.close()


def test_close_ends_the_parked_runners() -> None:
    recorder = Recorder()
    runners = runners_for(recorder, 3)
    runners.close()
    for thread in runners._threads:
        thread.join(5)
        assert not thread.is_alive()


def test_a_hand_over_returns_once_a_runner_has_taken_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """submit(hand_over=True): a runner has taken the job by the time the submit returns
    (the woken runner, not the submitter's next wait, decides when it starts); its
    result still reaches `done`. The wait's bound is raised here so that a
    loaded machine cannot end it first."""
    monkeypatch.setattr(runners_module, "HAND_OVER", 10.0)
    taken = threading.Event()

    class Marking(Recorder):
        def run(self, item: tuple[str, int]) -> tuple[str, int]:
            taken.set()
            return super().run(item)

    recorder = Marking()
    runners = runners_for(recorder)
    try:
        for i in range(20):
            taken.clear()
            deadline = time.monotonic() + 10
            while not runners._parked:  # a hand-over is to a sleeping runner (no event tells when one parks)
                assert time.monotonic() < deadline, "no runner went back to sleep"
                time.sleep(0.001)
            runners.submit([("pick", i)], hand_over=True)
            assert not runners._pending  # a runner has taken it off the queue
            assert taken.wait(10)
            recorder.wait_all(1)
        recorder.wait_returned(20)
        assert sorted(r for batch in recorder.batches for r in batch) == [("pick", i) for i in range(20)]
    finally:
        runners.close()
