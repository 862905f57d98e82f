"""The per-minute history (deferq/history.py): the histogram merge and its percentiles
(property tests), the buffer and recorder, and GET /v1/stats/history end to end."""

from __future__ import annotations

import logging
import math
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

import deferq
from deferq.observe import history
from deferq.observe.history import BUCKETS, Histogram, HistoryBuffer, bucket_bounds, bucket_of
from deferq.server import ServerConfig, create_app
from deferq.worker import Worker, WorkerConfig
from tests.support.server_helpers import TestClient

seconds = st.floats(min_value=0, max_value=1e7, allow_nan=False)
samples = st.lists(seconds, max_size=200)


def histogram(values: list[float]) -> Histogram:
    h = Histogram()
    for value in values:
        h.add(value)
    return h


@given(seconds)
def test_a_value_lies_in_its_bucket(value):
    low, high = bucket_bounds(bucket_of(value))
    assert low <= value < high or (bucket_of(value) == BUCKETS - 1 and value >= low)


@given(samples, samples, samples)
def test_merge_is_the_histogram_of_all_samples_in_any_order(a, b, c):
    whole = histogram(a + b + c)
    assert histogram(a).merge(histogram(b)).merge(histogram(c)) == whole
    assert histogram(c).merge(histogram(a).merge(histogram(b))) == whole


@given(st.lists(samples, min_size=1, max_size=8), st.sampled_from([1, 50, 90, 99, 100]))
def test_a_merged_percentile_lies_in_the_bucket_of_the_true_one(parts, p):
    everything = sorted(v for part in parts for v in part)
    merged = Histogram()
    for part in parts:  # as the store merges the workers' histograms
        merged.merge(histogram(part))
    estimate = merged.percentile(p)
    if not everything:
        assert estimate is None
        return
    true = everything[max(1, math.ceil(p / 100 * len(everything))) - 1]  # nearest rank
    low, high = bucket_bounds(bucket_of(true))
    assert low <= estimate <= high
    if 0 < bucket_of(true) < BUCKETS - 1:
        assert estimate / true < math.sqrt(2) and true / estimate <= math.sqrt(2)  # within a bucket's ratio


def test_buffer_sums_from_many_threads():
    buffer = HistoryBuffer()

    def count():
        for _ in range(1000):
            buffer.add(1, "q", "t", "enqueued")

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert buffer.drain() == [(1, "q", "t", "enqueued", 4000)]
    assert not buffer


def test_a_failed_write_keeps_the_counts():
    class Down:
        def history_add(self, rows, keep):
            raise deferq.errors.StoreUnavailable("down")

    recorder = history.HistoryRecorder(Down(), every=3600)  # type: ignore[arg-type]
    recorder.buffer.add(5, "q", "t", "dead")
    with pytest.raises(deferq.errors.StoreUnavailable):
        recorder.flush()
    assert recorder.buffer.drain() == [(5, "q", "t", "dead", 1)]


def test_a_store_down_for_many_flushes_is_logged_once_and_once_back(caplog):
    class Flaky:
        """Refuses the first writes (a shard down), then takes them."""

        def __init__(self) -> None:
            self.refused, self.rows = 0, []
            self.written = threading.Event()

        def history_add(self, rows, keep):
            if self.refused < 5:
                self.refused += 1
                raise deferq.errors.StoreUnavailable("Redis shard 127.0.0.1:1/0 cannot be reached")
            self.rows += rows
            self.written.set()

    store = Flaky()
    recorder = history.HistoryRecorder(store, every=0.01)  # type: ignore[arg-type]
    recorder._pruned = float("inf")  # (no prune in this test)
    with caplog.at_level(logging.INFO, logger="deferq.history"):
        recorder.count("q", "t", "enqueued")
        assert store.written.wait(10)
        deadline = time.monotonic() + 10  # the flush thread says "again" right after the write
        while not any("again" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.01)
        recorder.close()
    said = [r.getMessage() for r in caplog.records if r.name == "deferq.history"]
    assert store.refused == 5 and store.rows == [(store.rows[0][0], "q", "t", "enqueued", 1)]
    assert len(said) == 2, said  # not one line per failed flush
    assert said[0].startswith("history not written (kept for the next try): Redis shard 127.0.0.1:1/0")
    assert said[1].startswith("history written again after")


def test_worker_and_producer_counts_reach_the_api(tmp_path):
    app = deferq.App(f"sqlite:///{tmp_path}/h.db", lease=5)

    @app.task(max_attempts=2, backoff=lambda attempt: 0)
    def flaky(n: int) -> None:
        if n % 2:
            raise ValueError("odd")

    for n in range(6):
        flaky.enqueue(n)
    app.enqueue("other", queue="elsewhere")
    Worker(app, WorkerConfig(burst=True, concurrency=2)).run()  # flushes at its end
    app.history.flush()  # the producer's part
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as client:
        answer = client.get("/v1/stats/history", params={"minutes": 5, "queue": "default"}).json()
        every = client.get("/v1/stats/history", params={"minutes": 5, "step": 5}).json()
        refused = client.get("/v1/stats/history", params={"minutes": 99999})
    app.close()
    assert "totals" in answer, answer
    totals = answer["totals"]
    assert (totals["enqueued"], totals["succeeded"], totals["retried"], totals["dead"]) == (6, 3, 3, 3)
    assert totals["failed"] == 6 and totals["run_p50"] is not None and totals["wait_p99"] is not None
    assert len(answer["series"]["t"]) == 5 and sum(answer["series"]["succeeded"]) == 3
    assert every["step"] == 5 and len(every["series"]["t"]) == 1 and every["totals"]["enqueued"] == 7
    assert refused.status_code == 422
