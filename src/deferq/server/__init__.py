"""The HTTP service: REST API v1, topics with signed callback delivery, auth, metrics.

    deferq serve --port 8088                       # the API (docs/http.md)
    deferq worker --app deferq.server.tasks:app    # workers that deliver callbacks

Needs the `server` extra: pip install 'deferq[server]'. Importing the package costs
nothing: workers that only deliver callbacks never load Starlette.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "ServerConfig":
        from .http.config import ServerConfig

        return ServerConfig
    raise AttributeError(f"module 'deferq.server' has no attribute {name!r}")
