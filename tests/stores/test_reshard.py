"""redis+shards:// servers added, drained and removed at run time (backends/redis/reshard.py):
every process follows the topology record without a restart, new jobs go to live shards,
jobs already stored stay where they are, unique keys stay unique, and a shard holding
unfinished jobs cannot be removed."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import deferq
from deferq.backends.base import Enqueue, Outcome, OutcomeKind, TopologyRefused
from deferq.backends.redis import reshard
from deferq.backends.redis.shards import shard_of_id
from deferq.backends.redis.topology import LOG_KEPT, Added, Topology
from deferq.job import Job, JobState, new_job_id
from tests.support.stores.redis import RedisServer, _need_redis_server, shared_url, unique_prefix, wait_until

ROOT = Path(__file__).resolve().parents[2]
DEFERQ = str(Path(sys.executable).parent / "deferq")
ORDER = (1, 0, 2)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[RedisServer]]:
    """Two anchors and a third server to add (each a redis-server of this test alone)."""
    _need_redis_server()
    started = [RedisServer(tmp_path / f"s{i}").start() for i in range(3)]
    yield started
    for server in started:
        server.stop()


def url_of(anchors: list[RedisServer], prefix: str) -> str:
    return "redis+shards://" + ",".join(f"127.0.0.1:{s.port}/0" for s in anchors) + f"?prefix={prefix}"


def item(n: int, key: str | None = None) -> Enqueue:
    return Enqueue(Job(id=new_job_id(), task="t", args=(n,), key=key))


@given(st.lists(st.tuples(st.sampled_from(["add", "drain", "undrain", "remove"]), st.text(max_size=20)),
                max_size=130))
def test_the_record_keeps_its_numbers_states_and_the_latest_changes(changes) -> None:
    record = Topology()
    for n, (action, who) in enumerate(changes):
        if action == "add" or not record.added:
            added = (*record.added, Added(2 + len(record.added), f"h{n}:6379/0", "live", float(n)))
        else:
            state = {"drain": "draining", "undrain": "live", "remove": "removed"}.get(action, "live")
            added = record.with_state(record.added[-1].number, state, float(n))
        record = Topology.decode(record.changed(who, action, f"h{n}:6379/0", float(n), added).encode())
    assert record.version == len(changes)
    assert [a.number for a in record.added] == list(range(2, 2 + len(record.added))), "numbers never reused"
    assert len(record.log) == min(len(changes), LOG_KEPT)
    assert [c.who for c in record.log] == [who for _, who in changes][-LOG_KEPT:]


def test_an_added_shard_takes_new_jobs_in_every_process_and_keys_stay_on_the_anchors(servers, monkeypatch) -> None:
    monkeypatch.setattr(reshard, "SETTLE", 0.0)
    url = url_of(servers[:2], unique_prefix())
    admin, other = deferq.App(url), deferq.App(url)  # two processes' views of one store
    try:
        keyed_before = admin.enqueue("t", [0], key="k1")
        plain_before = [other.enqueue("t", [n]) for n in range(2)]
        other.backend.sync(force=True)  # `other` has read the record: it changes later
        third = f"127.0.0.1:{servers[2].port}/0"

        topology = admin.backend.resharding().add(third, "alice")
        assert [s["state"] for s in topology["shards"]] == ["live", "live", "live"]
        assert topology["log"][-1]["who"] == "alice" and topology["log"][-1]["action"] == "add"
        assert topology["shards"][2] == {**topology["shards"][2], "number": 2, "name": third, "role": "added"}

        # the other process follows within REFRESH, no restart: its new jobs reach shard 2
        landed: list[Job] = []
        wait_until(lambda: shard_of_id((landed.append(other.enqueue("t", [9])) or landed[-1]).id) == 2,
                   10, "the other process never sent a job to the added shard")
        assert other.get(landed[-1].id).state == JobState.QUEUED
        assert admin.get(landed[-1].id).state == JobState.QUEUED, "looked up on the shard its id names"
        assert all(admin.get(j.id) is not None for j in plain_before), "old jobs stay where they are"
        again = other.enqueue("t", [1], key="k1")
        assert again.id == keyed_before.id, "a key stays unique: it is routed over the anchors alone"
        keyed = [other.enqueue("t", [n], key=f"key{n}") for n in range(30)]
        assert {shard_of_id(j.id) for j in keyed} <= {0, 1}

        with pytest.raises(TopologyRefused, match="already a shard"):
            admin.backend.resharding().add(third, "alice")
        with pytest.raises(TopologyRefused, match="anchor"):
            admin.backend.resharding().drain(f"127.0.0.1:{servers[0].port}/0", "alice")
        with pytest.raises(TopologyRefused, match="drain it first"):
            admin.backend.resharding().remove(third, "alice")

        admin.backend.resharding().drain(third, "bob")
        other.backend.sync(force=True)
        assert {shard_of_id(other.enqueue("t", [n]).id) for n in range(10)} == {0, 1}, "draining takes no new jobs"
        with pytest.raises(TopologyRefused, match="unfinished"):
            admin.backend.resharding().remove(third, "bob")
        # its workers keep leasing from it: run everything
        worker = other.backend
        while taken := worker.reserve(["default"], 100, "w", 30, ORDER):
            assert worker.settle([Outcome(j, OutcomeKind.SUCCEEDED) for j in taken]) == [True] * len(taken)
        assert admin.get(landed[-1].id).state == JobState.SUCCEEDED

        topology = admin.backend.resharding().remove(third, "bob")
        assert topology["shards"][2]["state"] == "removed"
        assert [(c["who"], c["action"]) for c in topology["log"]] == [("alice", "add"), ("bob", "drain"),
                                                                       ("bob", "remove")]
        other.backend.sync(force=True)
        assert [name for name, _ in other.backend.parts()] == [f"127.0.0.1:{s.port}/0" for s in servers[:2]]
        assert other.get(landed[-1].id) is None, "a removed shard is no longer asked"
        assert other.stats().missing == []
        servers[2].stop()  # gone for good: nothing asks it
        assert other.stats()["default"]["succeeded"] >= 1 and other.enqueue("t", [1]).id
        servers[2].start()  # empty again (no persistence): it may come back, under a new number
        readded = admin.backend.resharding().add(third, "carol")
        assert readded["shards"][-1]["number"] == 3, "a number is never given twice"
    finally:
        admin.close()
        other.close()


def test_the_record_outlives_an_anchor_that_lost_its_data(servers) -> None:
    """Kept on every anchor: a first anchor restarted empty neither hides the added shard
    from a new process nor makes the next change older than the record it replaces."""
    url = url_of(servers[:2], unique_prefix())
    app = deferq.App(url)
    third = f"127.0.0.1:{servers[2].port}/0"
    try:
        app.backend.resharding().add(third, "alice")
        servers[0].stop()
        servers[0].start()  # no persistence: empty
        later = deferq.App(url)
        assert later.backend.present() == [0, 1, 2], "read from the other anchor"
        shown = later.backend.resharding().drain(third, "bob")
        assert shown["version"] == 2 and shown["shards"][2]["state"] == "draining"
        servers[1].kill()
        app.backend.sync(force=True)
        assert app.backend.state[2] == "draining", "and now from the first anchor again"
        later.close()
    finally:
        app.close()


def test_bad_shard_requests_are_refused_in_a_sentence(servers) -> None:
    url = url_of(servers[:1], unique_prefix())
    app = deferq.App(url)
    try:
        for bad in ("", "nohost", "redis://x:1", "a:1,b:2", "h:1/x"):
            with pytest.raises(deferq.errors.ConfigError, match="Redis server|number"):
                app.backend.resharding().add(bad, "x")
        with pytest.raises(TopologyRefused, match="no shard"):
            app.backend.resharding().drain("127.0.0.1:1/0", "x")
        with pytest.raises(TopologyRefused, match="only a redis"):
            deferq.App("memory://").backend.resharding()
    finally:
        app.close()


def test_a_server_holding_jobs_of_this_store_is_not_added(servers) -> None:
    prefix = unique_prefix()
    app = deferq.App(url_of(servers[:1], prefix))
    stray = deferq.App(f"redis://127.0.0.1:{servers[2].port}/0?prefix={prefix}")
    try:
        stray.enqueue("t", [1])
        with pytest.raises(TopologyRefused, match="already holds 1 jobs"):
            app.backend.resharding().add(f"127.0.0.1:{servers[2].port}/0", "x")
    finally:
        stray.close()
        app.close()


def test_a_shard_added_while_a_producer_and_a_worker_run_loses_nothing(servers, tmp_path: Path) -> None:
    """A worker process and a producer thread run on; a shard is added by a third party.
    Every job runs once, every key names one job, and the worker ran jobs of the new shard."""
    url = url_of(servers[:2], unique_prefix())
    admin, producer = deferq.App(url), deferq.App(url)
    env = {**os.environ, "DEFERQ_TEST_LEASE": "5", "DEFERQ_TEST_CONTROL": shared_url()}
    env.pop("DEFERQ_APP", None)
    worker = subprocess.Popen([DEFERQ, "worker", "--app", "tests.support.fixtures_redis:app", "--url", url,
                               "--queue", "default", "--concurrency", "4"],
                              cwd=ROOT, env=env, stdout=(tmp_path / "w.log").open("ab"), stderr=subprocess.STDOUT)
    made: list[Job] = []
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set() or n < 200:
            if n % 4:
                made.append(producer.enqueue("noop", [n]))
            else:  # held an hour: each enqueue of its key must find the one job
                made.append(producer.enqueue("noop", [n], key=f"k{n // 4 % 50}", delay=3600))
            n += 1

    thread = threading.Thread(target=produce)
    try:
        thread.start()
        wait_until(lambda: len(made) >= 100, 20, "the producer did not start")
        admin.backend.resharding().add(f"127.0.0.1:{servers[2].port}/0", "fault-test")
        wait_until(lambda: any(shard_of_id(j.id) == 2 for j in made[-50:]), 20, "no job reached the added shard")
        stop.set()
        thread.join(20)
        plain = [j.id for j in made if not j.key]
        wait_until(lambda: all(j is not None and j.state == JobState.SUCCEEDED
                               for j in admin.backend.get_many(plain)), 60, "not every job ran")
        by_key: dict[str, set[str]] = {}
        for job in made:
            if job.key:
                by_key.setdefault(job.key, set()).add(job.id)
        assert len(by_key) == 50 and all(len(found) == 1 for found in by_key.values()), "a key named two jobs"
        on_new = [j for j in admin.backend.get_many(plain) if j and shard_of_id(j.id) == 2]
        assert on_new and all(j.attempts == 1 for j in on_new), "the worker ran the new shard's jobs, once each"
        counts = admin.stats()["default"]
        assert (counts["succeeded"], counts["scheduled"], counts["dead"]) == (len(plain), 50, 0), "nothing lost"
    finally:
        stop.set()
        thread.join(20)
        worker.terminate()
        worker.wait(20)
        admin.close()
        producer.close()


def test_the_api_and_the_cli_add_drain_and_refuse_to_remove_a_busy_shard(servers, monkeypatch) -> None:
    from click.testing import CliRunner

    from deferq.cli.main import main
    from deferq.server import ServerConfig, create_app
    from deferq.server.http import auth
    from tests.support.server_helpers import TestClient

    monkeypatch.setattr(reshard, "SETTLE", 0.0)
    url = url_of(servers[:2], unique_prefix())
    app = deferq.App(url)
    admin, _ = auth.create(app.backend, "admin", "ops")
    reader, _ = auth.create(app.backend, "reader")
    third = f"127.0.0.1:{servers[2].port}/0"
    try:
        with TestClient(create_app(ServerConfig(error_log="off"), app)) as api:
            as_admin = {"authorization": f"Bearer {admin}"}
            shown = api.get("/v1/store/shards", headers={"authorization": f"Bearer {reader}"}).json()
            assert shown["sharded"] is True and [s["role"] for s in shown["shards"]] == ["anchor", "anchor"]
            assert api.post("/v1/store/shards", json={"server": third},
                            headers={"authorization": f"Bearer {reader}"}).status_code == 403
            added = api.post("/v1/store/shards", json={"server": third}, headers=as_admin)
            assert added.status_code == 201, added.text
            who = added.json()["log"][-1]["who"]
            assert who.startswith("token ") and "(ops)" in who
            bad = api.post("/v1/store/shards", json={"server": "nohost"}, headers=as_admin)
            assert bad.status_code == 422 and "host:port" in bad.json()["error"]["message"]
            job = next(j for j in (app.enqueue("t", [n]) for n in range(6)) if shard_of_id(j.id) == 2)
            drained = api.post("/v1/store/shards/2/drain", headers=as_admin)
            assert drained.json()["shards"][2]["state"] == "draining"
            busy = api.delete("/v1/store/shards/2", headers=as_admin)
            assert busy.status_code == 409 and "unfinished" in busy.json()["error"]["message"]
            anchor = api.post("/v1/store/shards/0/drain", headers=as_admin)
            assert anchor.status_code == 409 and "anchor" in anchor.json()["error"]["message"]
            assert api.post("/v1/store/shards/2/undrain", headers=as_admin).json()["shards"][2]["state"] == "live"

        cli = CliRunner()
        listed = cli.invoke(main, ["shard", "list", "--url", url], catch_exceptions=False)
        assert listed.exit_code == 0 and f"{third}" in listed.output and "live" in listed.output
        assert "add" in listed.output and "token" in listed.output, "the latest changes, with who made them"
        drained = cli.invoke(main, ["shard", "drain", third, "--url", url])
        assert drained.exit_code == 0 and "draining" in drained.output
        refused = cli.invoke(main, ["shard", "remove", third, "--url", url])
        assert refused.exit_code == 1 and "still holds 1 unfinished jobs" in refused.output
        assert app.cancel(job.id)
        removed = cli.invoke(main, ["shard", "remove", "2", "--url", url])
        assert removed.exit_code == 0 and "removed" in removed.output and "from the command line" in removed.output
        plain = cli.invoke(main, ["shard", "list", "--url", f"redis://127.0.0.1:{servers[0].port}/0"])
        assert plain.exit_code == 1 and "only a redis+shards:// store" in plain.output
    finally:
        app.close()


def test_a_store_that_is_not_sharded_lists_no_shards_and_refuses_a_change(tmp_path: Path) -> None:
    from deferq.server import ServerConfig, create_app
    from tests.support.server_helpers import TestClient

    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")
    with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
        assert api.get("/v1/store/shards").json() == {"sharded": False, "version": 0, "shards": [], "log": []}
        refused = api.post("/v1/store/shards", json={"server": "127.0.0.1:1/0"})
        assert refused.status_code == 409 and "only a redis+shards://" in refused.json()["error"]["message"]
    app.close()
