"""/v1/store/shards: a redis+shards:// store's servers, added, drained and removed at run
time (backends/redis/reshard.py); a refused change is a 409 with the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...backends.base import Backend
from ...backends.redis import reshard
from ...errors import ConfigError
from ..http.errors import ApiError, Invalid

if TYPE_CHECKING:
    from ..process.service import Service


def described(backend: Backend) -> dict[str, Any]:
    """The shards and their log; for a store that is not sharded, none."""
    try:
        sharded = reshard.sharded(backend)
    except reshard.TopologyRefused:
        return {"sharded": False, "version": 0, "shards": [], "log": []}
    return {"sharded": True, **reshard.describe(sharded)}


def undrain(backend: Any, name: str, who: str) -> dict[str, Any]:
    return reshard.drain_shard(backend, name, who, drain=False)


async def changed(service: Service, change: Callable[..., dict[str, Any]], what: str, who: str) -> dict[str, Any]:
    """`change(backend, what, who)` made, answered as GET does; refused: 409 or 422."""
    def run() -> dict[str, Any] | ApiError:
        try:
            change(reshard.sharded(service.backend), what, who)
        except reshard.TopologyRefused as exc:
            return ApiError(409, "shards_refused", str(exc))
        except ConfigError as exc:
            return Invalid(str(exc))
        return described(service.backend)

    answer = await service.store(run)
    if isinstance(answer, ApiError):
        raise answer
    return answer
