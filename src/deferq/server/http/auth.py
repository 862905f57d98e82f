"""API tokens: Bearer tokens stored only as SHA-256 hashes, each with one scope.

- reader: view jobs, queue counts, workers, schedules and the store (the console's
  read-only scope); it can change nothing.
- producer: everything a reader may, plus write jobs and cancel waiting ones.
- admin: everything a producer may, plus topics, dead letters, tokens and settings.

A token is shown once, when it is made (`deferq token create` or POST /v1/tokens);
the store keeps its hash (kv namespace "tokens", key = hex SHA-256), so a leaked
store does not leak usable tokens. Lookups are cached in each server process for a
few seconds (a revoked token stops working within `CACHE_SECONDS`).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

import orjson

from ...backends import Backend

NAMESPACE = "tokens"
SCOPES = ("reader", "producer", "admin")  # each grants what the ones before it do
PREFIX = "dq_"
CACHE_SECONDS = 5.0
ID_LENGTH = 12  # hex characters of the hash that name a token in listings


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create(backend: Backend, scope: str, note: str = "") -> tuple[str, dict[str, Any]]:
    """Make and store a token; return it (the only time it is seen) and its record."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}: use {' or '.join(SCOPES)}")
    token = PREFIX + secrets.token_urlsafe(32)
    digest = token_hash(token)
    record = {"id": digest[:ID_LENGTH], "scope": scope, "note": note, "created_at": time.time()}
    backend.kv_put(NAMESPACE, digest, orjson.dumps(record))
    return token, record


def list_tokens(backend: Backend) -> list[dict[str, Any]]:
    records = [orjson.loads(raw) for raw in backend.kv_list(NAMESPACE).values()]
    return sorted(records, key=lambda r: r["created_at"])


def revoke(backend: Backend, token_id: str) -> bool:
    """Delete the token whose id (a prefix of its hash) is `token_id`."""
    if len(token_id) != ID_LENGTH:
        return False
    for digest in backend.kv_list(NAMESPACE):
        if digest.startswith(token_id):
            return backend.kv_delete(NAMESPACE, digest)
    return False


def record_of(backend: Backend, token: str) -> dict[str, Any] | None:
    """A token's record (id, scope, note, created_at), None for an unknown one."""
    raw = backend.kv_get(NAMESPACE, token_hash(token))
    return None if raw is None else dict(orjson.loads(raw))


def scope_of(backend: Backend, token: str) -> str | None:
    record = record_of(backend, token)
    return None if record is None else record.get("scope")


def allows(granted: str, needed: str) -> bool:
    """Whether a token of scope `granted` may call a route that needs `needed`."""
    if granted not in SCOPES or needed not in SCOPES:
        return False
    return SCOPES.index(granted) >= SCOPES.index(needed)
