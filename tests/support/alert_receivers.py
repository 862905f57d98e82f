"""Real alert receivers for tests: an SMTP server (aiosmtpd) and a webhook HTTP server,
both on a free loopback port, collecting what arrives.

The default network policy refuses loopback targets: a test that uses these receivers
opts into a policy that allows loopback (in this process and the processes it starts)."""

from __future__ import annotations

import email
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from deferq.net.policy import POLICY_ENV

LOOPBACK_ALLOWED = '{"allow_networks": ["loopback"]}'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Inbox:
    """Messages received so far, and a bounded wait for one that matches."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.arrived = threading.Condition()

    def add(self, item: Any) -> None:
        with self.arrived:
            self.items.append(item)
            self.arrived.notify_all()

    def wait_for(self, match: Callable[[Any], bool], timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        with self.arrived:
            while True:
                for item in self.items:
                    if match(item):
                        return item
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"nothing matching arrived in {timeout}s: {self.items!r}")
                self.arrived.wait(left)


@pytest.fixture
def smtp_inbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Inbox, str]]:
    """An aiosmtpd server; yields (inbox of email.message.Message, "127.0.0.1:port")."""
    from aiosmtpd.controller import Controller

    monkeypatch.setenv(POLICY_ENV, LOOPBACK_ALLOWED)
    inbox = Inbox()

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            message = email.message_from_bytes(envelope.original_content or envelope.content)
            inbox.add(message)
            return "250 OK"

    port = free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield inbox, f"127.0.0.1:{port}"
    finally:
        controller.stop()


@pytest.fixture
def webhook_inbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Inbox, str]]:
    """A tiny HTTP server; yields (inbox of decoded JSON bodies, its URL)."""
    monkeypatch.setenv(POLICY_ENV, LOOPBACK_ALLOWED)
    inbox = Inbox()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            inbox.add(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield inbox, f"http://127.0.0.1:{server.server_address[1]}/alerts"
    finally:
        server.shutdown()
        server.server_close()


BANNER = b"SSH-2.0-OpenSSH_9.6 secret-banner-7f3a\r\n"


@pytest.fixture
def banner_listener() -> Iterator[tuple[int, list[str]]]:
    """A loopback service that speaks first, like SSH or Redis's error line: it writes
    BANNER to every connection and closes it. Yields (its port, the peers it accepted)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[str] = []

    def serve() -> None:
        while True:
            try:
                conn, peer = server.accept()
            except OSError:
                return  # closed
            with conn:
                accepted.append(peer[0])
                conn.sendall(BANNER)
                conn.settimeout(1.0)
                try:  # read all the client wrote before closing: unread bytes make the close a reset
                    while conn.recv(65536):
                        pass
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        try:
            server.shutdown(socket.SHUT_RDWR)  # wakes the accept() above
        except OSError:
            pass
        server.close()
        thread.join(5)
