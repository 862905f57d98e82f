"""/v1/store/shards: a redis+shards:// store's servers, added, drained and removed at run
time (the store's `resharding()`, backends/base.py Resharding); a refused change is a 409
with the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...backends.base import Backend, Resharding, TopologyRefused
from ...errors import ConfigError
from ..http.errors import ApiError, Invalid

if TYPE_CHECKING:
    from ..process.service import Service

Change = Callable[[Resharding, str, str], dict[str, Any]]  # (the shards, what, who)


def described(backend: Backend) -> dict[str, Any]:
    """The shards and their log; for a store that is not sharded, none."""
    try:
        shards = backend.resharding()
    except TopologyRefused:
        return {"sharded": False, "version": 0, "shards": [], "log": []}
    return {"sharded": True, **shards.describe()}


def add_shard(shards: Resharding, server: str, who: str) -> dict[str, Any]:
    return shards.add(server, who)


def drain_shard(shards: Resharding, name: str, who: str) -> dict[str, Any]:
    return shards.drain(name, who)


def undrain(shards: Resharding, name: str, who: str) -> dict[str, Any]:
    return shards.drain(name, who, drain=False)


def remove_shard(shards: Resharding, name: str, who: str) -> dict[str, Any]:
    return shards.remove(name, who)


async def changed(service: Service, change: Change, what: str, who: str) -> dict[str, Any]:
    """`change(shards, what, who)` made, answered as GET does; refused: 409 or 422."""
    def run() -> dict[str, Any] | ApiError:
        try:
            change(service.backend.resharding(), what, who)
        except TopologyRefused as exc:
            return ApiError(409, "shards_refused", str(exc))
        except ConfigError as exc:
            return Invalid(str(exc))
        return described(service.backend)

    answer = await service.store(run)
    if isinstance(answer, ApiError):
        raise answer
    return answer
