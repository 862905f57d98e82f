"""The steady load of an endurance run: threads of the harness process, each one kind of
producer, all stopping when `stop` is set.

- `enqueue_every`: one task's jobs at a steady pace (the App's history recorder writes
  the counts every few seconds, as in any producer);
- `waiters`: enqueue a job and `job.wait` for its result, again and again;
- `pause_toggle`: pause a queue, resume it, again and again;
- `http_client`: POST /v1/jobs then GET /v1/jobs/{id} through `deferq serve`.

Every enqueued id goes into `Load.enqueued`; every failure the client saw (an exception,
an HTTP status other than expected, a wrong result) into `Load.errors`.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import deferq


@dataclass
class Load:
    app: deferq.App
    stop: threading.Event = field(default_factory=threading.Event)
    enqueued: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def add(self, job_id: str) -> None:
        with self.lock:
            self.enqueued.add(job_id)

    def error(self, what: str) -> None:
        with self.lock:
            if len(self.errors) < 1000:
                self.errors.append(what)

    def start(self, name: str, target: Callable[..., None], *args: Any) -> None:
        def guarded() -> None:
            try:
                target(self, *args)
            except Exception as exc:  # a producer that dies is an error of the run, not a crash
                self.error(f"{name}: {type(exc).__name__}: {exc}")

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self, timeout: float = 60.0) -> None:
        self.stop.set()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def enqueue_every(load: Load, task: str, period: float, args: Callable[[int], list[Any]]) -> None:
    n = 0
    while not load.stop.wait(period):
        try:
            load.add(load.app.enqueue(task, args(n)).id)
        except deferq.errors.DeferqError as exc:
            load.error(f"enqueue {task}: {type(exc).__name__}: {exc}")
        n += 1


def waiters(load: Load, pause: float) -> None:
    n = 0
    while not load.stop.wait(pause):
        try:
            job = load.app.enqueue("short", [n])
            load.add(job.id)
            if (result := job.wait(timeout=60)) != n * 2:
                load.error(f"wait {job.id}: {result!r} instead of {n * 2}")
        except Exception as exc:  # a wait that fails or times out: an error of the run
            load.error(f"wait: {type(exc).__name__}: {exc}")
        n += 1


def pause_toggle(load: Load, queue: str, period: float) -> None:
    while not load.stop.wait(period):
        try:
            load.app.pause(queue)
            load.stop.wait(period / 2)
        finally:
            load.app.resume(queue)


def http_client(load: Load, port: int, period: float) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    n = 0
    try:
        while not load.stop.wait(period * random.uniform(0.5, 1.5)):
            try:
                created = _call(conn, "POST", "/v1/jobs", {"task": "short", "args": [n]}, 201)
                load.add(created["id"])
                _call(conn, "GET", f"/v1/jobs/{created['id']}", None, 200)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                load.error(f"http: {type(exc).__name__}: {exc}")
                conn.close()  # the next request opens a new connection
            n += 1
    finally:
        conn.close()


def _call(conn: http.client.HTTPConnection, method: str, path: str, body: Any, expect: int) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    conn.request(method, path, body=data, headers=headers)
    answer = conn.getresponse()
    text = answer.read()
    if answer.status != expect:
        raise ValueError(f"{method} {path} answered {answer.status}: {text[:200]!r}")
    return json.loads(text)
