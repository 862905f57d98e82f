"""Request and response helpers: bounded JSON bodies, JSON answers, Bearer auth."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..http import bodies
from ..http.auth import allows, token_hash
from ..http.errors import ApiError

if TYPE_CHECKING:
    from .service import Service


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def too_large(limit: int) -> ApiError:
    return ApiError(413, "too_large", f"the request body is over the limit of {limit} bytes")


async def read_body(chunks: AsyncIterator[bytes], declared: str | None, limit: int) -> bytes:
    """The whole body, refused with a 413 as soon as it is known to pass `limit` bytes."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        parts.append(chunk)
    return b"".join(parts)


def decode_json(body: bytes) -> Any:
    """JSON, or a 400 that names what is malformed (a 422 for what bodies.py refuses)."""
    if not body.strip():
        raise ApiError(400, "malformed_json", "the request body is empty: send a JSON object")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit"):  # well-formed, past orjson's 1,024 levels
            raise bodies.too_deep() from None
        raise ApiError(400, "malformed_json", f"the request body is not valid JSON: {exc}") from None
    bodies.check(body, data)
    return data


async def read_json(request: Request) -> Any:
    limit = service_of(request).config.max_body
    return decode_json(await read_body(request.stream(), request.headers.get("content-length"), limit))


async def check_token(service: Service, header: str, scope: str) -> None:
    """Pass if the Authorization header's Bearer token grants `scope`: else 401 or 403."""
    if not service.config.auth:
        return
    kind, _, token = header.partition(" ")
    token = token.strip()
    if kind.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "send an API token: Authorization: Bearer <token>",
                       {"WWW-Authenticate": "Bearer"})
    granted = await service.scope_of(token)
    if granted is None:
        raise ApiError(401, "unauthorized", "the API token is not valid (revoked or mistyped?)",
                       {"WWW-Authenticate": 'Bearer error="invalid_token"'})
    if not allows(granted, scope):
        raise ApiError(403, "forbidden", f"this route needs a token with the {scope} scope; "
                       f"this token has the {granted} scope")


async def authorize(request: Request, scope: str) -> None:
    await check_token(service_of(request), request.headers.get("authorization", ""), scope)


def wait_holder(request: Request) -> tuple[str, str]:
    """Whom a request's open waits count against, and how a 429 names it: its token,
    or without auth its client address."""
    if service_of(request).config.auth:
        token = request.headers.get("authorization", "").partition(" ")[2].strip()
        return "token:" + token_hash(token), "this token"
    host = request.client.host if request.client else "unknown"
    return "client:" + host, f"client {host}"


def query_int(request: Request, name: str, default: int, minimum: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(422, "invalid", f"query parameter {name} must be a whole number") from None
    if not minimum <= value <= maximum:
        raise ApiError(422, "invalid", f"query parameter {name} must be {minimum}-{maximum}")
    return value
