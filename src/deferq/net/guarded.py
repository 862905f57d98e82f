"""httpx clients that connect only where the network policy (policy.py) allows: the
async one delivers topic callbacks, the blocking one posts alert webhooks.

httpcore's network backend, but a connection goes only to an address the policy
allows: the host is resolved once, each address checked, and the socket connected to
that very address (TLS still names the host: httpcore passes it for SNI and certificate
checks, and the Host header is the URL's). httpx is the `server` and `alerts` extras'.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpcore
import httpx

from .policy import Policy, Refused, addresses, literal_address

Resolver = Callable[[str, int, float | None], Awaitable[list[str]]]


async def resolve(host: str, port: int, timeout: float | None) -> list[str]:
    """The addresses of `host`, in the resolver's order, each once."""
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
    except TimeoutError:
        raise httpcore.ConnectTimeout(f"resolving {host} took more than {timeout:g}s") from None
    except socket.gaierror as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc.strerror}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """The async backend: resolves with `resolver`, connects through `inner`."""

    def __init__(self, policy: Policy, resolver: Resolver = resolve,
                 inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.policy = policy
        self.resolver = resolver
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        refused = self.policy.port_refusal(port)
        if refused is not None:  # before any lookup
            raise Refused(refused)
        literal = literal_address(host)
        candidates = [str(literal)] if literal is not None else await self.resolver(host, port, timeout)
        failure: Exception | None = None
        for candidate in self.policy.screen(host, port, candidates):  # no second lookup
            try:
                return await self.inner.connect_tcp(candidate, port, timeout=timeout,
                                                    local_address=local_address,
                                                    socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> Any:
        raise Refused("deferq never connects to a unix socket on others' behalf")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class SyncGuardedBackend(httpcore.NetworkBackend):
    """The blocking backend (alert webhooks, sent from the alerter's thread)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        refused = self.policy.port_refusal(port)
        if refused is not None:
            raise Refused(refused)
        try:
            candidates = addresses(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from None
        failure: Exception | None = None
        for candidate in self.policy.screen(host, port, candidates):
            try:
                return self.inner.connect_tcp(candidate, port, timeout=timeout, local_address=local_address,
                                              socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> Any:
        raise Refused("deferq never connects to a unix socket on others' behalf")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def _pool_parts(limits: httpx.Limits | None) -> tuple[ssl.SSLContext, httpx.Limits, dict[str, Any]]:
    context: ssl.SSLContext = httpx.create_ssl_context(trust_env=False)
    limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
    pool = {"ssl_context": context, "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry}
    return context, limits, pool


def _check_pool(transport: object, kind: type) -> None:
    # httpx builds its connection pool without a way to pass a network backend: the
    # transports below replace it with the same pool over the guarded backend.
    if not isinstance(getattr(transport, "_pool", None), kind):
        raise RuntimeError("this httpx version keeps no _pool: connections cannot be guarded")


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's async transport over GuardedBackend (no environment proxies, no unix sockets)."""

    def __init__(self, policy: Policy, resolver: Resolver = resolve,
                 limits: httpx.Limits | None = None) -> None:
        context, limits, pool = _pool_parts(limits)
        super().__init__(verify=context, trust_env=False, limits=limits)
        _check_pool(self, httpcore.AsyncConnectionPool)
        self._pool = httpcore.AsyncConnectionPool(**pool, network_backend=GuardedBackend(policy, resolver))


class SyncGuardedTransport(httpx.HTTPTransport):
    """httpx's blocking transport over SyncGuardedBackend."""

    def __init__(self, policy: Policy, limits: httpx.Limits | None = None) -> None:
        context, limits, pool = _pool_parts(limits)
        super().__init__(verify=context, trust_env=False, limits=limits)
        _check_pool(self, httpcore.ConnectionPool)
        self._pool = httpcore.ConnectionPool(**pool, network_backend=SyncGuardedBackend(policy))
