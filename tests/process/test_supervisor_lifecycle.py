"""The master with real child processes: crashes, stops, hung jobs, hung children, autoscaling."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

import deferq
from deferq.job import JobState
from deferq.worker import orders
from tests.support.alert_receivers import webhook_inbox  # noqa: F401 - a fixture
from tests.support.supervisor_harness import (
    ROOT,
    Master,
    all_jobs,
    every_store,
    job_states,
    runs,
    store_url,
    wait_until,
)

pytestmark = pytest.mark.slow

POOL = """
check_every = "0.2s"
grace = "10s"
[pools.main]
queues = ["default"]
processes = 2
concurrency = 2
"""


@pytest.fixture
def url(request, tmp_path):
    yield from store_url(request, tmp_path)


@pytest.fixture
def store(url):
    app = deferq.App(url)
    yield app
    app.close()


@pytest.fixture
def master(tmp_path, url):
    started: list[Master] = []

    def make(body: str = POOL, name: str = "master") -> Master:
        m = Master(tmp_path, url, body, name)
        started.append(m)
        return m.start()

    yield make
    for m in started:
        m.kill()


def enqueue_naps(store: deferq.App, count: int, seconds: float) -> list[str]:
    calls = [deferq.Call("nap", (seconds,), {}) for _ in range(count)]
    return [job.id for job in store.enqueue_many(calls)]


@every_store
def test_titles_and_a_killed_child_is_replaced_nothing_lost(master, store):
    m = master()
    titles = ["deferq: worker main #1", "deferq: worker main #2"]
    children = wait_until(lambda: sorted(m.children().values()) == titles and m.children(), 20,
                          "two children with their process titles")
    assert m.title() == "deferq: master"
    ids = enqueue_naps(store, 12, 1.0)
    victim = next(iter(children))
    wait_until(lambda: job_states(store)["active"] >= 4, 20, "four jobs running")
    in_flight = {j.id for j in store.list_jobs(JobState.ACTIVE) if j.worker and "main#" in j.worker}
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: victim not in m.children() and len(m.children()) == 2, 2.0,
               "a replacement child within 2 s", every=0.02)
    assert time.monotonic() - killed_at < 2.0
    wait_until(lambda: job_states(store)["succeeded"] == 12, 60, "all 12 jobs to succeed")
    assert job_states(store) == Counter(succeeded=12)
    retried = [j for j in all_jobs(store) if j.attempts > 1]
    assert retried and {j.id for j in retried} <= in_flight  # the killed child's jobs ran again
    assert {job_id for _, job_id, _ in runs(m.record)} == set(ids)
    assert "died (killed by signal 9): restarting now" in m.log()
    assert m.stop() == 0


@every_store
def test_sigterm_lets_running_jobs_finish_and_loses_nothing(master, store, url):
    m = master()
    wait_until(lambda: len(m.children()) == 2, 20, "two children")
    # three turns of four 2-second naps: long enough for `deferq status` (a new process,
    # slow to start on a loaded machine) to find both children busy
    enqueue_naps(store, 12, 2.0)
    wait_until(lambda: job_states(store)["active"] == 4, 20, "four jobs running")

    def status() -> dict:
        out = subprocess.run([sys.executable, "-m", "deferq", "status", "--json", "--url", url],
                             capture_output=True, text=True, cwd=ROOT, check=True).stdout
        return json.loads(out)

    def running_children(report: dict) -> int:
        return sum(bool(c["jobs"]) for m in report["masters"] for c in m["pools"]["main"]["children"])

    report = wait_until(lambda: (r := status()) and running_children(r) == 2 and r, 20,
                        "deferq status showing both children's jobs", every=0.3)
    (shown,) = report["masters"]
    assert shown["pid"] == m.pid
    pool_children = shown["pools"]["main"]["children"]
    assert len(pool_children) == 2
    assert all(j["task"] == "nap" for c in pool_children for j in c["jobs"])

    def status_text() -> str:
        return subprocess.run([sys.executable, "-m", "deferq", "status", "--url", url],
                              capture_output=True, text=True, cwd=ROOT, check=True).stdout

    # the naps run in turns of 2 s: the text report shows one of them running
    text = wait_until(lambda: (t := status_text()) and "nap " in t and t, 20, "a nap in deferq status", every=0.3)
    assert f"(pid {m.pid})" in text and "pool main: queues default" in text and "#1 pid" in text
    running = {j.id for j in store.list_jobs(JobState.ACTIVE)}
    assert m.stop(timeout=30) == 0
    states = job_states(store)
    assert states["active"] == 0
    assert states["succeeded"] + states["queued"] == 12  # nothing lost, nothing left leased
    for job_id in running:  # the jobs in flight at the signal were allowed to finish
        assert store.get(job_id).state == JobState.SUCCEEDED
    assert "master stopped" in m.log()
    assert not m.children()


def test_hung_sync_job_is_killed_at_its_timeout_and_retried(master, store):
    m = master()
    wait_until(lambda: len(m.children()) == 2, 20, "two children")
    hung = store.enqueue("hang", max_attempts=2)  # by name: the task is not imported here
    enqueue_naps(store, 16, 0.2)
    final = wait_until(lambda: (j := store.get(hung.id)).state == JobState.DEAD and j, 60,
                       "the hung job to use up its two attempts")
    assert "timed out after 1s" in final.error
    assert [attempt for task, _, attempt in runs(m.record) if task == "hang-start"] == [1, 2]
    wait_until(lambda: job_states(store)["succeeded"] == 16, 60, "the other jobs to succeed")
    wait_until(lambda: m.log().count("a job overran its timeout: replacing it") == 2, 20,
               "both overrunning children replaced")
    wait_until(lambda: len(m.children()) == 2, 10, "the pool back at two children")
    assert m.stop() == 0


def test_a_child_without_heartbeat_is_killed_and_replaced(master):
    m = master(POOL + 'hung_after = "2s"\n')
    children = wait_until(lambda: len(m.children()) == 2 and m.children(), 20, "two children")
    frozen = next(iter(children))
    os.kill(frozen, signal.SIGSTOP)  # alive, but silent: no heartbeat, no work
    wait_until(lambda: frozen not in m.children() and len(m.children()) == 2, 15,
               "the frozen child replaced")
    assert "it is hung, killing it" in m.log()
    assert "hung, killed by the master" in m.log()
    assert m.stop() == 0


def test_pool_grows_under_a_burst_and_shrinks_when_drained(master, store):
    m = master("""
check_every = "0.2s"
[pools.main]
queues = ["default"]
processes = { min = 1, max = 4 }
concurrency = 4
scale_up_backlog = 200
scale_up_every = "1s"
scale_down_after = "1s"
""")
    wait_until(lambda: len(m.children()) == 1, 20, "one child")
    enqueue_naps(store, 5000, 0.03)
    seen = wait_until(lambda: len(m.children()) >= 3 and len(m.children()), 30, "the pool to grow")
    wait_until(lambda: job_states(store)["succeeded"] == 5000, 120, "the burst to drain")
    wait_until(lambda: len(m.children()) == 1, 30, "the pool back at its minimum")
    assert seen >= 3
    assert "pool main: 1 -> " in m.log()
    assert "-> 1 process(es) (calm" in m.log()
    assert m.stop() == 0


def test_children_are_recycled_by_job_count_lifetime_and_memory(master, store):
    m = master("""
check_every = "0.2s"
[pools.jobs]
queues = ["jobs"]
concurrency = 1
max_jobs_per_child = 3
[pools.life]
queues = ["life"]
max_child_lifetime = "2s"
[pools.mem]
queues = ["mem"]
max_child_memory = "150MB"
""")
    wait_until(lambda: len(m.children()) == 3, 20, "three children")
    store.enqueue_many([deferq.Call("nap", (0,), {}, deferq.task.JobOptions(queue="jobs"))] * 7)
    store.enqueue("hog", [200], queue="mem")
    wait_until(lambda: m.log().count("exited after max_jobs_per_child jobs") >= 2, 30,
               "two children retired after three jobs each")
    wait_until(lambda: "reached max_child_lifetime: retiring it" in m.log(), 30, "a lifetime retirement")
    wait_until(lambda: "above max_child_memory: retiring it" in m.log(), 30, "a memory retirement")
    wait_until(lambda: job_states(store, "jobs")["succeeded"] == 7, 30, "the seven jobs")
    wait_until(lambda: len(m.children()) == 3, 20, "every pool refilled")
    assert "died" not in m.log()  # retirements are not crashes
    assert m.stop() == 0


def test_sighup_reloads_with_a_rolling_restart_and_a_changed_file_is_reported(master, tmp_path):
    m = master()
    before = set(wait_until(lambda: len(m.children()) == 2 and m.children(), 20, "two children"))
    text = m.config.read_text()
    m.config.write_text(text.replace("processes = 2", "processes = 3"))
    m.wait_log("changed: send SIGHUP to apply it")
    m.signal(signal.SIGHUP)
    m.wait_log("rolling restart of 2 child(ren)")
    wait_until(lambda: len(m.children()) == 3 and not before & set(m.children()), 30,
               "three new children replacing the old ones")
    m.config.write_text(text.replace("processes = 2", "processes = -1"))
    m.wait_log("it is not valid and would be refused: pools.main.processes")
    m.signal(signal.SIGHUP)
    m.wait_log("reload refused, keeping the running config: pools.main.processes")
    assert len(m.children()) == 3 and m.process.poll() is None
    assert m.stop() == 0


def test_a_crash_loop_is_braked_and_alerted(master, store, webhook_inbox):  # noqa: F811
    hooks, receiver = webhook_inbox
    m = master(POOL.replace("processes = 2", "processes = 1").replace("concurrency = 2", "concurrency = 1")
               + f'[alerts]\nwebhook = "{receiver}"\n')
    wait_until(lambda: len(m.children()) == 1, 20, "one child")
    store.enqueue_many([deferq.Call("crash", (), {}, deferq.task.JobOptions(max_attempts=1))] * 3)
    hook = hooks.wait_for(lambda h: h["kind"] == "crash_loop:main", timeout=60)
    assert hook["details"]["crashes"] >= 3
    assert "restarting in" in m.log()  # the brake: later restarts wait
    wait_until(lambda: job_states(store)["dead"] == 3, 60, "the three crashing jobs dead")
    assert m.stop() == 0


def test_children_of_a_killed_master_stop_on_their_own(master, store):
    m = master()
    children = wait_until(lambda: len(m.children()) == 2 and m.children(), 20, "two children")
    enqueue_naps(store, 2, 1.0)
    wait_until(lambda: job_states(store)["active"] == 2, 20, "two jobs running")
    m.process.kill()  # SIGKILL: the master cannot stop its children
    m.process.wait(10)

    def gone(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # exited
        except FileNotFoundError:
            return True

    wait_until(lambda: all(gone(pid) for pid in children), 15, "the orphans to stop")
    assert job_states(store) == Counter(succeeded=2)  # they finished their jobs first


def test_a_master_ordered_quiet_then_to_stop_through_the_store(master, store):
    m = master()
    wait_until(lambda: len(m.children()) == 2, 20, "two children")
    master_id = wait_until(lambda: next(iter(store.backend.kv_list("masters")), None), 10, "the master's record")
    enqueue_naps(store, 2, 2.0)
    wait_until(lambda: job_states(store)["active"] == 2, 20, "two jobs running")
    orders.give(store.backend, orders.master_key(master_id), "quiet", "a test")

    def quiet(namespace: str) -> bool:
        records = [json.loads(raw) for raw in store.backend.kv_list(namespace).values()]
        return bool(records) and all(record.get("quiet") for record in records)

    wait_until(lambda: quiet("workers") and quiet("masters"), 10, "the master and its children quiet")
    (later,) = enqueue_naps(store, 1, 0.1)
    wait_until(lambda: job_states(store)["succeeded"] == 2, 20, "the running jobs finished")
    assert store.get(later).state == "queued" and len(m.children()) == 2  # none took it; none was replaced
    orders.give(store.backend, orders.master_key(master_id), "stop", "a test")
    assert m.process is not None and m.process.wait(30) == 0
    assert f"master {master_id}: ordered quiet by a test" in m.log()
    assert orders.read(store.backend, orders.master_key(master_id)) is None  # dropped as it stopped


@every_store
def test_a_chunk_tasks_jobs_run_once_each_under_children_recycled_by_job_count(master, store):
    """Two children of a pool on a chunk task's queue, each retired after 150 jobs: every
    item reaches the function once, in calls of at most the chunk's size (a child that
    retires gives back the jobs it gathered, unrun)."""
    m = master("""
check_every = "0.2s"
[pools.chunks]
queues = ["chunks"]
processes = 2
concurrency = 2
max_jobs_per_child = 150
""")
    wait_until(lambda: len(m.children()) == 2, 20, "two children")
    on_chunks = deferq.task.JobOptions(queue="chunks")
    store.enqueue_many([deferq.Call("chunked", (i,), {}, on_chunks) for i in range(400)])
    wait_until(lambda: job_states(store, "chunks")["succeeded"] == 400, 60, "the 400 jobs")
    ran = runs(m.record)
    assert sorted(int(item) for _, item, _ in ran) == list(range(400))  # each once
    assert max(size for _, _, size in ran) <= 50
    assert "exited after max_jobs_per_child jobs" in m.log()
    assert m.stop() == 0
