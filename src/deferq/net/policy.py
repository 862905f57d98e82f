"""Where deferq may connect on others' behalf: one policy of networks and ports for
topic callbacks, alert webhooks and alert e-mail (SMTP), so that whoever may register a
topic or save alert settings cannot make deferq call what sits behind it (SSRF): the
cloud's metadata service, the store, an admin page on loopback.

The policy comes from the environment of every server and worker process:

    DEFERQ_CALLBACK_POLICY='{"allow_networks": ["10.20.0.0/16", "loopback"],
                             "deny_networks": ["10.20.9.0/24"], "deny_ports": [22, 25]}'

It is not a store record on purpose: a store record is changed with an admin token,
and an admin token is exactly what registers topics.

An address is judged in this order; the first rule that matches decides:

1. never a target, whatever the policy says: unspecified (0.0.0.0/8, ::), multicast,
   broadcast and the cloud metadata addresses (169.254.169.254, fd00:ec2::254, ...);
2. never a target: deferq's own store on its port, at any address its URL's host
   resolves to, and when the store is on this host, at any loopback address too;
3. the port: refused when in `deny_ports`, or when `allow_ports` is given and lacks it;
4. refused when in `deny_networks`;
5. allowed when in `allow_networks`;
6. allowed when public (`allow_public`, true by default); loopback, private, link-local
   and the other special-purpose ranges are refused.

A server checks a topic's URL when it is PUT, when the URL holds a literal address (or
`localhost`). Whatever connects (a worker's callback, an alert) checks every address the
host name resolves to, then connects to an address it checked (never resolving twice),
so a name that changes its answer between the check and the connection (DNS rebinding)
still cannot reach a refused address. `connect` does that for plain sockets (SMTP);
net/guarded.py does it for httpx.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from ..errors import ConfigError

POLICY_ENV = "DEFERQ_CALLBACK_POLICY"
POLICY_FIELDS = ("allow_networks", "deny_networks", "allow_ports", "deny_ports", "allow_public")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _networks(*texts: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(text) for text in texts)


# Rule 1: what no policy can allow.
NEVER: dict[str, tuple[Network, ...]] = {
    "an unspecified address": _networks("0.0.0.0/8", "::/128"),
    "a multicast address": _networks("224.0.0.0/4", "ff00::/8"),
    "the broadcast address": _networks("255.255.255.255/32"),
    "a cloud metadata address": _networks(
        "169.254.169.254/32",  # AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean, ...
        "169.254.170.2/32",  # AWS ECS task credentials
        "fd00:ec2::254/128",  # AWS over IPv6
        "100.100.100.200/32",  # Alibaba Cloud
        "192.0.0.192/32",  # Oracle Cloud (classic)
    ),
}
# Rule 6: what is not public. The first three names may also be written in
# allow_networks and deny_networks.
GROUPS: dict[str, tuple[Network, ...]] = {
    "loopback": _networks("127.0.0.0/8", "::1/128"),
    "private": _networks("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                         "fc00::/7"),
    "link-local": _networks("169.254.0.0/16", "fe80::/10"),
}
SPECIAL = _networks(  # documentation, benchmarking, reserved, deprecated site-local, ...
    "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "240.0.0.0/4", "100::/64", "2001::/23", "2001:db8::/32", "fec0::/10", "::ffff:0:0/96",
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # reaches the IPv4 address in its low 32 bits
STORE_PORTS = {"redis": 6379, "rediss": 6379, "redis+cluster": 6379, "redis+shards": 6379,
               "postgresql": 5432, "postgres": 5432, "mysql": 3306, "mariadb": 3306}
HINT = f"allow it with allow_networks in {POLICY_ENV}"


class Refused(Exception):
    """The target's address or port is refused by the policy: nothing was sent."""


def literal_address(host: str | None) -> Address | None:
    """The address a URL's host names literally (also the old forms 127.1 and 0x7f.0.0.1,
    which resolvers still accept), or None for a name."""
    if not host:
        return None
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if re.fullmatch(r"[0-9a-fA-FxX.]+", host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def fixed_addresses(host: str) -> list[str] | None:
    """What `host` reaches without asking DNS: its literal address, or loopback for
    localhost names (RFC 6761: resolvers answer those themselves); None for other names."""
    literal = literal_address(host)
    if literal is not None:
        return [str(literal)]
    if host.lower().rstrip(".") == "localhost" or host.lower().rstrip(".").endswith(".localhost"):
        return ["127.0.0.1", "::1"]
    return None


@functools.lru_cache(maxsize=256)
def this_host(address: Address) -> bool:
    """Whether `address` is this machine's: loopback, unspecified, or one it may bind."""
    if address.is_loopback or address.is_unspecified:
        return True
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return this_host(address.ipv4_mapped)
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))  # only an address of this host can be bound
    except OSError:
        return False
    return True


def reached(address: Address) -> list[Address]:
    """The addresses a connection to `address` really reaches, all to be judged: an
    IPv4-mapped or NAT64 address reaches its IPv4 address; 6to4 both."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return [address.ipv4_mapped]
        if address in NAT64:
            return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
        if address.sixtofour is not None:
            return [address, address.sixtofour]
    return [address]


def _network_list(data: dict[str, Any], name: str) -> tuple[Network, ...]:
    networks: list[Network] = []
    for item in _list(data, name):
        if isinstance(item, str) and item in GROUPS:
            networks += GROUPS[item]
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except (TypeError, ValueError):
            raise ConfigError(f"{POLICY_ENV}: {name} holds {item!r:.60}, which is neither a network "
                              f"(like 10.0.0.0/8 or ::1) nor one of {', '.join(GROUPS)}") from None
    return tuple(networks)


def _port_set(data: dict[str, Any], name: str) -> frozenset[int]:
    ports: set[int] = set()
    for item in _list(data, name):
        low, high = item, item
        if isinstance(item, str) and re.fullmatch(r"\d+-\d+", item):
            low, high = (int(part) for part in item.split("-"))
        if not all(isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 65535
                   for p in (low, high)) or low > high:
            raise ConfigError(f"{POLICY_ENV}: {name} holds {item!r:.60}: use ports 1-65535 "
                              'or ranges like "8000-8999"')
        ports.update(range(low, high + 1))
    return frozenset(ports)


def _list(data: dict[str, Any], name: str) -> list[Any]:
    value = data.get(name, [])
    if not isinstance(value, list):
        raise ConfigError(f"{POLICY_ENV}: {name} must be a list")
    return value


@dataclass(frozen=True)
class Policy:
    allow_networks: tuple[Network, ...] = ()
    deny_networks: tuple[Network, ...] = ()
    allow_ports: frozenset[int] | None = None  # None: every port (but deny_ports)
    deny_ports: frozenset[int] = frozenset()
    allow_public: bool = True
    stores: frozenset[tuple[Address, int]] = frozenset()  # deferq's own store endpoints

    @classmethod
    def from_dict(cls, data: Any, stores: Iterable[tuple[Address, int]] = ()) -> Policy:
        if not isinstance(data, dict):
            raise ConfigError(f"{POLICY_ENV} must be a JSON object with {', '.join(POLICY_FIELDS)}")
        unknown = sorted(set(data) - set(POLICY_FIELDS))
        if unknown:
            raise ConfigError(f"{POLICY_ENV}: unknown field {unknown[0]!r}: fields are "
                              f"{', '.join(POLICY_FIELDS)}")
        allow_public = data.get("allow_public", True)
        if not isinstance(allow_public, bool):
            raise ConfigError(f"{POLICY_ENV}: allow_public must be true or false")
        return cls(
            allow_networks=_network_list(data, "allow_networks"),
            deny_networks=_network_list(data, "deny_networks"),
            allow_ports=_port_set(data, "allow_ports") if "allow_ports" in data else None,
            deny_ports=_port_set(data, "deny_ports"),
            allow_public=allow_public,
            stores=frozenset(stores),
        )

    @classmethod
    def from_env(cls, stores: Iterable[tuple[Address, int]] = ()) -> Policy:
        return _parsed(os.environ.get(POLICY_ENV, ""), frozenset(stores))

    def port_refusal(self, port: int) -> str | None:
        """Why no address may be called on `port` (rule 3), or None."""
        if port in self.deny_ports:
            return f"port {port} is in deny_ports"
        if self.allow_ports is not None and port not in self.allow_ports:
            return f"port {port} is not in allow_ports"
        return None

    def refusal(self, address: Address, port: int) -> str | None:
        """Why `address`:`port` is refused, as the rest of a sentence that starts with
        the address ("is a loopback address (...)"), or None when it is allowed."""
        for target in reached(address):
            why = self._judge(target, port)
            if why is not None:
                return why if target == address else f"reaches {target}, which {why}"
        return None

    def _judge(self, address: Address, port: int) -> str | None:
        for what, networks in NEVER.items():
            if any(address in network for network in networks):
                return f"is {what} (never a target)"
        if self._is_store(address, port):
            return f"is deferq's own store (port {port})"
        denied = next((n for n in self.deny_networks if address in n), None)
        if denied is not None:
            return f"is in deny_networks ({denied})"
        if any(address in network for network in self.allow_networks):
            return None
        group = next((name for name, networks in GROUPS.items()
                      if any(address in network for network in networks)), None)
        if group is not None:
            return f"is a {group} address ({HINT})"
        if any(address in network for network in SPECIAL):
            return f"is not a public address ({HINT})"
        if not self.allow_public:
            return "is a public address and allow_public is false"
        return None

    def _is_store(self, address: Address, port: int) -> bool:
        """Whether `address`:`port` reaches one of deferq's stores: the same address, or
        both on this host (a store on 127.0.0.1 also answers on ::1, 127.0.0.2 and, when it
        listens on every interface, on this host's own addresses)."""
        on_port = [store for store, store_port in self.stores if store_port == port]
        if address in on_port:
            return True
        return bool(on_port) and this_host(address) and any(this_host(store) for store in on_port)

    def screen(self, host: str, port: int, candidates: Iterable[str]) -> list[str]:
        """The candidates (the addresses `host` resolved to, or the literal address it
        is) the policy allows, in order; Refused, naming the first reason, when none is."""
        refused = self.port_refusal(port)
        if refused is not None:
            raise Refused(refused)
        literal = literal_address(host) is not None
        allowed, reasons = [], []
        for candidate in candidates:
            address = ipaddress.ip_address(candidate)
            why = self.refusal(address, port)
            if why is None:
                allowed.append(candidate)
            else:
                reasons.append(f"{address} {why}" if literal or host == candidate
                               else f"{host} resolves to {address}, which {why}")
        if not allowed:
            raise Refused(reasons[0] if reasons else f"{host} resolves to no address")
        return allowed

    def url_refusal(self, url: str) -> str | None:
        """Why a topic's URL is refused before any lookup (its port, or its host when that
        is a literal address or localhost), or None: other names are checked when they
        are resolved, at each connection."""
        parts = urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return "its port is not a number from 1 to 65535"
        refused = self.port_refusal(port)
        if refused is not None:
            return refused
        host = parts.hostname or ""
        candidates = fixed_addresses(host)
        if candidates is None:
            return None
        try:
            self.screen(host, port, candidates)
        except Refused as exc:
            return str(exc)
        return None


@functools.lru_cache(maxsize=16)
def _parsed(raw: str, stores: frozenset[tuple[Address, int]]) -> Policy:
    try:
        data = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{POLICY_ENV} is not JSON: {exc}") from None
    return Policy.from_dict(data, stores)


# -- deferq's own stores --------------------------------------------------------------------


def store_endpoints(url: str) -> frozenset[tuple[Address, int]]:
    """The (address, port) pairs a store URL connects to; nothing for SQLite, memory and
    sockets. Host names are resolved now; one that does not resolve is left out."""
    scheme = urlsplit(url).scheme.lower()
    default_port = STORE_PORTS.get(scheme)
    if default_port is None:
        return frozenset()
    rest = url.split("://", 1)[1].split("?", 1)[0]
    if scheme == "redis+shards":  # host:port/db,host:port/db
        servers = [server.split("/", 1)[0] for server in rest.split(",")]
    else:  # host:port or host1:port1,host2:port2 before the path
        servers = rest.split("/", 1)[0].rsplit("@", 1)[-1].split(",")
    endpoints: set[tuple[Address, int]] = set()
    for server in servers:
        parts = urlsplit("//" + server.rsplit("@", 1)[-1])
        try:
            port = parts.port or default_port
            infos = socket.getaddrinfo(parts.hostname or "localhost", port, type=socket.SOCK_STREAM)
        except (ValueError, OSError):
            continue
        endpoints.update((ipaddress.ip_address(info[4][0]), port) for info in infos)
    return frozenset(endpoints)


class ForStore:
    """The policy for calls made on behalf of the store at `url` (a URL, or what returns it
    once the store's URL is final): the environment's, read at each call, that refuses the
    store's own endpoints too, resolved at the first call. Whatever calls out for a store
    (its server's topic checks, its deliveries, its alerts) holds one."""

    def __init__(self, url: str | Callable[[], str]) -> None:
        self._url = url
        self._stores: frozenset[tuple[Address, int]] | None = None

    def __call__(self) -> Policy:
        if self._stores is None:  # two threads may both resolve it: the same answer
            self._stores = store_endpoints(self._url if isinstance(self._url, str) else self._url())
        return Policy.from_env(self._stores)


# -- connecting -----------------------------------------------------------------------------


def addresses(host: str, port: int) -> list[str]:
    """The addresses `host` reaches, in the resolver's order, each once (blocking)."""
    fixed = literal_address(host)
    if fixed is not None:
        return [str(fixed)]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host}: {exc.strerror}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def connect(policy: Policy, host: str, port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to `host`:`port` at an address the policy allows: resolved once,
    every address checked, and the socket connected to a checked one (no second lookup,
    so DNS rebinding gains nothing). Refused when none is allowed; OSError when none answers."""
    refused = policy.port_refusal(port)
    if refused is not None:
        raise Refused(refused)
    failure: OSError | None = None
    for address in policy.screen(host, port, addresses(host, port)):
        try:
            return socket.create_connection((address, port), timeout)
        except OSError as exc:
            failure = exc
    assert failure is not None
    raise failure
