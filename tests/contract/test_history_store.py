"""The store's part of the per-minute history (backends/history.py), on every store:
counters only add up, from any number of writers; a window reads one range; old
minutes are pruned (or expire)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from deferq.backends.base import Outcome, OutcomeKind
from deferq.job import JobState
from deferq.observe.history import retention_minutes

KEEP = retention_minutes()


def fresh_minute(backend) -> int:
    """A minute of the past no other test of the session wrote to (stores are shared):
    1 to 6 days back, inside the retention (7 days), so a worker's pruning elsewhere in
    the suite does not take it away mid-test."""
    return int(backend.now() // 60) - random.randrange(1440 // 5, 6 * 1440 // 5) * 5


def test_counters_add_up_and_filter_by_queue_and_task(backend):
    base = fresh_minute(backend)
    backend.history_add([(base, "q1", "a", "enqueued", 2), (base, "q1", "a", "w3", 1),
                         (base, "q2", "b", "enqueued", 5), (base + 1, "q1", "b", "dead", 1)], KEEP)
    backend.history_add([(base, "q1", "a", "enqueued", 3)], KEEP)
    assert sorted(backend.history_read(base, base + 2)) == [
        (base, "enqueued", 10), (base, "w3", 1), (base + 1, "dead", 1)]
    assert sorted(backend.history_read(base, base + 2, "q1")) == [
        (base, "enqueued", 5), (base, "w3", 1), (base + 1, "dead", 1)]
    assert sorted(backend.history_read(base, base + 2, None, "b")) == [
        (base, "enqueued", 5),
        (base + 1, "dead", 1),
    ]
    assert backend.history_read(base, base + 2, "q1", "b") == [(base + 1, "dead", 1)]
    assert backend.history_read(base + 1, base + 1) == []  # the end is not included
    assert backend.history_read(base, base + 2, "nowhere") == []
    backend.history_add([], KEEP)


def test_many_writers_never_lose_a_count(backend):
    base = fresh_minute(backend)
    errors = []

    def write():
        try:
            for _ in range(20):
                backend.history_add([(base, "q", "t", "r5", 2), (base, "q", "t", "succeeded", 1)], KEEP)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert sorted(backend.history_read(base, base + 1)) == [(base, "r5", 160), (base, "succeeded", 80)]


def test_prune_drops_old_minutes_only(backend):
    # Older than every other test's minutes (fresh_minute): pruning before it takes none of theirs.
    base = int(backend.now() // 60) - int(6.5 * 1440) - random.randrange(100)
    backend.history_add([(base - 5, "q", "t", "enqueued", 1), (base, "q", "t", "enqueued", 1)], KEEP)
    pruned = backend.history_prune(base)
    assert backend.history_read(base, base + 1) == [(base, "enqueued", 1)]
    if pruned:  # Redis lets the keys expire instead
        assert backend.history_read(base - 5, base - 4) == []


def test_forget_drops_one_queue_in_a_span_of_minutes(backend):
    base = fresh_minute(backend)
    backend.history_add([(base - 1, "gone", "t", "enqueued", 1), (base, "gone", "t", "enqueued", 2),
                         (base, "gone", "u", "dead", 1), (base, "gone2", "t", "enqueued", 4),
                         (base + 2, "gone", "t", "enqueued", 8)], KEEP)
    backend.history_forget("gone", base, base + 2)
    assert sorted(backend.history_read(base - 1, base + 3)) == [
        (base - 1, "enqueued", 1), (base, "enqueued", 4), (base + 2, "enqueued", 8)]
    assert backend.history_read(base, base + 1, "gone2") == [(base, "enqueued", 4)]


def test_a_queue_is_forgotten_only_when_it_holds_nothing(app, backend):
    queue = f"forget-{uuid.uuid4().hex[:8]}"
    job = app.enqueue("forget.me", [1], queue=queue)
    assert not backend.forget_queue(queue)
    [leased] = backend.reserve([queue], 1, "w", 30, (0, 1, 2))
    backend.settle([Outcome(leased, OutcomeKind.SUCCEEDED)])
    assert not backend.forget_queue(queue)  # its finished job is still kept
    assert backend.delete(job.id)
    backend.pause(queue)
    assert not backend.forget_queue(queue)
    backend.resume(queue)
    assert backend.forget_queue(queue)
    assert queue not in backend.stats() and queue not in backend.paused()


def test_the_store_counts_the_jobs_it_ends_by_itself(app, backend):
    """No worker settles a job that expired before it ran, nor one whose lease expired:
    the store counts them (backends/history.py), per queue and task, at once."""
    queue = f"hist-{uuid.uuid4().hex[:8]}"
    app.enqueue("hist.late", [0], queue=queue, expires=datetime.now(UTC) - timedelta(seconds=1))
    assert backend.reserve([queue], 5, "w", 30, (0, 1, 2)) == []  # expired: cancelled, not leased
    last_try = app.enqueue("hist.crash", [1], queue=queue, max_attempts=1)
    again = app.enqueue("hist.crash", [2], queue=queue, max_attempts=2)
    assert len(backend.reserve([queue], 5, "crashed", 0.1, (0, 1, 2))) == 2
    deadline = time.monotonic() + 10
    while (app.get(last_try.id).state, app.get(again.id).state) != (JobState.DEAD, JobState.QUEUED):
        assert time.monotonic() < deadline, "the expired leases were not recovered"
        backend.recover_expired()
        time.sleep(0.02)
    minute = int(time.time() // 60)
    counts = Counter()
    for _, field, amount in backend.history_read(minute - 2, minute + 2, queue):
        counts[field] += amount
    assert counts == {"expired": 1, "dead": 1, "retried": 1, "failed": 2}
    by_task = Counter(field for _, field, _ in backend.history_read(minute - 2, minute + 2, queue, "hist.late"))
    assert by_task == {"expired": 1}
