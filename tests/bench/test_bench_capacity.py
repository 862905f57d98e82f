"""bench/capacity.py (make bench-capacity): its own Redis topologies start, spread the
queues over a Cluster's masters, stop; a small run prints a row per topology."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from bench.redis_servers import Topology, started
from redis.cluster import RedisCluster

from bench import spread
from tests.conftest import need_service

ROOT = Path(__file__).resolve().parents[2]


def need_redis_server() -> None:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        need_service("redis-server", "redis-server and redis-cli are not on PATH")


def test_topologies_are_parsed_or_refused_in_one_sentence():
    assert Topology.parse("cluster:3") == Topology("cluster", 3)
    assert Topology.parse("single").url([7000]) == "redis://127.0.0.1:7000/0"
    assert Topology.parse("shards:2").url([7000, 7001]) == "redis+shards://127.0.0.1:7000/0,127.0.0.1:7001/0"
    for bad in ("cluster", "ring:2", "shards:x"):
        with pytest.raises(ValueError, match="is not a topology"):
            Topology.parse(bad)


def test_medians_are_taken_per_measure():
    runs = [{"a": {"rate": 1.0, "cpu": 9.0}}, {"a": {"rate": 3.0, "cpu": 7.0}}, {"a": {"rate": 2.0, "cpu": 8.0}}]
    assert spread.medians(runs) == {"a": {"rate": 2.0, "cpu": 8.0}}


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_three_master_cluster_holds_two_queues_each_and_stops():
    need_redis_server()
    with started(Topology("cluster", 3)) as ports:
        cluster = RedisCluster(host="127.0.0.1", port=ports[0])
        try:
            owners = [cluster.get_node_from_key(f"{{deferq:q:{queue}}}:wait:1").port for queue in spread.QUEUES]
        finally:
            cluster.close()
    assert sorted(owners.count(port) for port in ports) == [2, 2, 2], owners
    assert owners[:3] == owners[3:] and len(set(owners[:3])) == 3  # neighbours on different masters
    for port in ports:
        with pytest.raises(redis.ConnectionError):
            redis.Redis(port=port, socket_connect_timeout=1).ping()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_small_run_prints_a_row_per_topology(tmp_path):
    need_redis_server()
    output = tmp_path / "capacity.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.capacity", "--only", "redis", "--topologies", "cluster:1,shards:2",
         "--jobs", "4000", "--runs", "1", "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=140,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in output.read_text().splitlines() if line.startswith(("| Redis Cluster", "| 2 shards"))]
    assert len(rows) == 2, output.read_text()
    assert all(float(row.split("|")[4].replace(",", "")) > 0 for row in rows)  # processed jobs/s


def test_bad_arguments_get_one_sentence():
    done = subprocess.run([sys.executable, "-m", "bench.capacity", "--topologies", "ring:2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "is not a topology" in done.stderr and "Traceback" not in done.stderr


def own_servers_left() -> list[int]:
    """Processes still running from a temporary folder of bench/capacity (its servers)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"deferq-capacity-" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_postgres_and_serve_figures_on_servers_of_its_own(tmp_path):
    need_redis_server()
    if shutil.which("initdb") is None or shutil.which("postgres") is None:
        need_service("PostgreSQL server programs", "initdb and postgres are not on PATH")
    output = tmp_path / "capacity.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.capacity", "--only", "postgres,serve", "--jobs", "4000", "--runs", "1",
         "--serve-processes", "1", "--seconds", "1", "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=140,
    )
    assert done.returncode == 0, done.stderr
    text = output.read_text()
    assert "| 2 workers, no-op jobs |" in text and "durable=False" in text, text
    serve = [line for line in text.splitlines() if line.startswith("| 1 |")]
    assert len(serve) == 1 and float(serve[0].split("|")[2].replace(",", "")) > 0, text  # requests/s
    assert own_servers_left() == []
