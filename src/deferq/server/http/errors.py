"""Errors the API answers with: a status code and one sentence, always as JSON."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """Answer `status` with {"error": {"code": code, "message": message}}."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


class Invalid(ApiError, ValueError):
    """A request that is well-formed JSON but says something wrong: 422."""

    def __init__(self, message: str) -> None:
        super().__init__(422, "invalid", message)


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} does not exist")
