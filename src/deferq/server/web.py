"""Request and response helpers: bounded JSON bodies, JSON answers, Bearer auth."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from .auth import allows
from .errors import ApiError

if TYPE_CHECKING:
    from .service import Service


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)


def service_of(request: Request) -> Service:
    return request.app.state.service


def too_large(limit: int) -> ApiError:
    return ApiError(413, "too_large", f"the request body is over the limit of {limit} bytes")


async def read_json(request: Request) -> Any:
    """The body as JSON: 413 past the size limit, 400 naming what is malformed."""
    limit = service_of(request).config.max_body
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body.strip():
        raise ApiError(400, "malformed_json", "the request body is empty: send a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "malformed_json", f"the request body is not valid JSON: {exc}") from None


async def authorize(request: Request, scope: str) -> None:
    """Let the request through if its Bearer token grants `scope`: else 401 or 403."""
    service = service_of(request)
    if not service.config.auth:
        return
    header = request.headers.get("authorization", "")
    kind, _, token = header.partition(" ")
    token = token.strip()
    if kind.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "send an API token: Authorization: Bearer <token>",
                       {"WWW-Authenticate": "Bearer"})  # fmt: skip
    granted = await service.scope_of(token)
    if granted is None:
        raise ApiError(401, "unauthorized", "the API token is not valid (revoked or mistyped?)",
                       {"WWW-Authenticate": 'Bearer error="invalid_token"'})  # fmt: skip
    if not allows(granted, scope):
        raise ApiError(403, "forbidden", f"this route needs a token with the {scope} scope; "
                       f"this token has the {granted} scope")  # fmt: skip


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
