"""Real things the server tests talk to: a scripted callback receiver, a `deferq serve`
process and a delivery worker process, all on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from deferq.net.policy import POLICY_ENV
from tests.support.alert_receivers import free_port

with warnings.catch_warnings():  # starlette asks for "httpx2", a package we do not need
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient as StarletteClient


class TestClient(StarletteClient):
    """Starlette's test client, addressing the server as http://localhost: a server
    without auth answers only loopback host names (server/sameorigin.py)."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, app: Any, base_url: str = "http://localhost", **options: Any) -> None:
        super().__init__(app, base_url=base_url, **options)

__all__ = ["TestClient", "Receiver", "Stream", "delivery_worker", "running_server", "wait_until",
           "LOOPBACK_POLICY", "reset_peak_rss", "rss_bytes"]

# The receivers below listen on 127.0.0.1, which the default network policy refuses:
# the server tests allow loopback, in this process (servers made with create_app) and in
# the processes started below. A test that wants another policy passes its own.
LOOPBACK_POLICY = '{"allow_networks": ["127.0.0.0/8"]}'
os.environ.setdefault(POLICY_ENV, LOOPBACK_POLICY)


def wait_until(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `check` until it returns something true, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.02)


@dataclass
class Hit:
    at: float  # time.time() when the request arrived
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Stream:
    """An answer body of `size` bytes, made while it is sent and never held: `chunk` over
    and over, with a Content-Length or (chunked) without. `sent` counts the bytes the
    receiver managed to write before the client hung up."""

    size: int
    chunked: bool = False
    chunk: bytes = b"x" * 65536
    sent: int = 0

    def write(self, handler: BaseHTTPRequestHandler) -> None:
        if not self.chunked:
            handler.send_header("content-length", str(self.size))
        else:
            handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        left = self.size
        try:
            while left > 0:
                piece = self.chunk[:left]
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if self.chunked else piece)
                left -= len(piece)
                self.sent += len(piece)
            if self.chunked:
                handler.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True  # the client stopped reading: expected


class Receiver:
    """An HTTP server that answers callbacks from a script of (status, body) pairs; the
    last answer repeats. Every request is kept, with its arrival time. A body may be a
    Stream: generated while it is sent."""

    def __init__(self, answers: list[tuple[int, bytes | Stream]]) -> None:
        self.answers = answers
        self.hits: list[Hit] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver.lock:
                    receiver.hits.append(Hit(time.time(), self.command, self.path,
                                             {k.lower(): v for k, v in self.headers.items()},
                                             body))
                    status, answer = receiver.answers[min(len(receiver.hits), len(receiver.answers)) - 1]
                self.send_response(status)
                self.send_header("content-type", "application/json")
                if isinstance(answer, Stream):
                    answer.write(self)
                    return
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_PUT = do_POST  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for_hits(self, count: int, timeout: float = 15.0) -> list[Hit]:
        wait_until(lambda: len(self.hits) >= count, timeout, f"{count} callback(s)")
        return list(self.hits)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEFERQ_", "PROMETHEUS_"))}
    env["PYTHONPATH"] = os.getcwd() + os.pathsep + env.get("PYTHONPATH", "")
    env[POLICY_ENV] = LOOPBACK_POLICY
    env.update(extra or {})
    return env


def _stop(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@contextmanager
def delivery_worker(url: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """`deferq worker --app deferq.server.tasks:app` on the store `url`."""
    command = [sys.executable, "-m", "deferq", "worker", "--app", "deferq.server.tasks:app",
               "--url", url, "--concurrency", "4", "--grace", "2"]
    process = subprocess.Popen(command, env=_env(env), stdout=subprocess.DEVNULL)
    try:
        yield process
    finally:
        _stop(process)


def rss_bytes(pid: int, peak: bool = False) -> int:
    """A process's resident memory now (or its peak, VmHWM), from /proc."""
    field = "VmHWM:" if peak else "VmRSS:"
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith(field))
    return int(line.split()[1]) * 1024


def reset_peak_rss(pid: int) -> None:
    """Start counting a process's peak resident memory (VmHWM) again from now."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")


@contextmanager
def running_server(url: str, *options: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`deferq serve` on a free loopback port; yields its base URL once it answers."""
    port = free_port()
    command = [sys.executable, "-m", "deferq", "serve", "--url", url, "--port", str(port),
               *options]
    process = subprocess.Popen(command, env=_env(env))
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"deferq serve exited with {process.returncode}")
        try:
            return httpx.get(base + "/healthz", timeout=1.0, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, 20.0, "deferq serve answering")
        yield base
    finally:
        _stop(process)
