"""Huey with its SQLite storage (`SqliteHuey`, library defaults: WAL), driven exactly as
huey on Redis (bench/peers/huey.py): the same calls, one `huey_consumer -k process -w 2`.
Its file sits beside deferq's in the benchmark's own folder (stores.SQLITE_DIR)."""

from __future__ import annotations

from huey import SqliteHuey

from . import huey as on_redis
from . import probe
from .stores import sqlite_url

URL = sqlite_url("huey")
huey = SqliteHuey("bench", filename=URL.removeprefix("sqlite:///"))
TASKS = {name: huey.task(name=name)(getattr(probe, name)) for name in ("noop", "incr", "stamp")}


class Peer(on_redis.Peer):
    label = "huey (SQLite)"
    store = URL
    tasks = TASKS

    def open(self) -> None:
        huey.storage.close()  # the file was made anew: reconnect and create the tables
        huey.storage.initialize_schema()

    def close(self) -> None:
        huey.storage.close()

    def worker_commands(self) -> list[list[str]]:
        return [[*command[:1], "bench.peers.huey_sqlite.huey", *command[2:]]
                for command in super().worker_commands()]
