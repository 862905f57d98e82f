"""redis-servers of the benchmark's own on free loopback ports (no persistence): plain
servers for `redis://` and `redis+shards://`, or the masters of a Redis Cluster.

A Cluster of 3 or more masters is made by `redis-cli --cluster create` (as the test
suite's cluster is); `redis-cli` refuses fewer than 3, so a 1-master Cluster gets every
slot with `CLUSTER ADDSLOTSRANGE`. Every server is stopped and reaped on exit.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from redis.crc import key_slot

SLOTS = 16384
START_TIMEOUT = 15.0  # seconds for a server to answer, and for a Cluster to be ok


@dataclass(frozen=True)
class Topology:
    """How many servers, and whether they form one Cluster or independent shards."""

    kind: str  # "single", "cluster" or "shards"
    servers: int

    @property
    def label(self) -> str:
        if self.kind == "single":
            return "1 redis-server (redis://)"
        if self.kind == "cluster":
            return f"Redis Cluster, {self.servers} master{'s' if self.servers > 1 else ''}"
        return f"{self.servers} shard{'s' if self.servers > 1 else ''} (redis+shards://)"

    def url(self, ports: list[int]) -> str:
        if self.kind == "single":
            return f"redis://127.0.0.1:{ports[0]}/0"
        if self.kind == "cluster":
            return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in ports)
        return "redis+shards://" + ",".join(f"127.0.0.1:{port}/0" for port in ports)

    @classmethod
    def parse(cls, text: str) -> Topology:
        """`single`, `cluster:3`, `shards:2`."""
        kind, _, count = text.strip().partition(":")
        if kind not in ("single", "cluster", "shards") or (kind != "single" and not count.isdigit()):
            raise ValueError(f"{text!r} is not a topology: use single, cluster:N or shards:N")
        return cls(kind, 1 if kind == "single" else int(count))


def free_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port + 10000 <= 65535 and _is_free(port + 10000):
            return port


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait(check: object, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {START_TIMEOUT:.0f} s")
        time.sleep(0.05)


@contextmanager
def started(topology: Topology) -> Iterator[list[int]]:
    """The servers of `topology`, ready; their ports. Stopped on exit, whatever happens."""
    cluster = topology.kind == "cluster"
    options = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"] if cluster else []
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="deferq-capacity-") as folder:
        try:
            ports = []
            for number in range(topology.servers):
                port = free_port()
                directory = f"{folder}/{number}"
                subprocess.run(["mkdir", "-p", directory], check=True)
                procs.append(subprocess.Popen(
                    ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", directory, "--logfile", "", *options],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))
                ports.append(port)
            for port in ports:
                _wait(redis.Redis(port=port).ping, f"redis-server on port {port} did not answer")
            if cluster:
                _make_cluster(ports)
            yield ports
        finally:
            stop(procs)


def stop(procs: list[subprocess.Popen[bytes]], grace: float = 30.0) -> None:
    """SIGTERM each process, then SIGKILL whichever has not exited after `grace` s; reap all."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _make_cluster(ports: list[int]) -> None:
    if len(ports) >= 3:
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
        )
    elif len(ports) == 1:
        redis.Redis(port=ports[0]).execute_command("CLUSTER", "ADDSLOTSRANGE", 0, SLOTS - 1)
    else:
        raise ValueError("a Redis Cluster here has 1 or at least 3 masters")

    def ok(port: int) -> bool:
        info = redis.Redis(port=port, decode_responses=True).cluster("info")
        return bool(info.get("cluster_state") == "ok")

    for port in ports:
        _wait(lambda port=port: ok(port), f"the Redis Cluster is not ok on port {port}")


def server_cpu(ports: list[int]) -> float:
    """CPU seconds the servers have used so far (INFO cpu), summed."""
    total = 0.0
    for port in ports:
        info = redis.Redis(port=port).info("cpu")
        total += info["used_cpu_user"] + info["used_cpu_sys"]
    return total


def flush(ports: list[int]) -> None:
    """Empty every server (on a Cluster, each master holds its own slots' keys)."""
    for port in ports:
        redis.Redis(port=port).flushall()


def spread_queues(per_range: int, ranges: int = 3, prefix: str = "deferq") -> list[str]:
    """Queue names whose hash slots fall `per_range` in each of `ranges` equal slot ranges
    (the ranges `redis-cli --cluster create` gives 3 masters), so a Cluster's masters
    each hold the same number of queues; ordered so that consecutive names sit on
    different masters."""
    found: list[list[str]] = [[] for _ in range(ranges)]
    number = 0
    while any(len(names) < per_range for names in found):
        name = f"q{number}"
        slot = key_slot(f"{prefix}:q:{name}".encode())
        names = found[min(ranges - 1, slot * ranges // SLOTS)]
        if len(names) < per_range:
            names.append(name)
        number += 1
    return [found[r][i] for i in range(per_range) for r in range(ranges)]
