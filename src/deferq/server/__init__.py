"""The HTTP service: REST API v1, topics with signed callback delivery, auth, metrics.

    deferq serve --port 8088                       # the API (docs/http.md)
    deferq worker --app deferq.server.tasks:app    # workers that deliver callbacks

Needs the `server` extra: pip install 'deferq[server]'.
"""

from __future__ import annotations

from .app import create_app
from .config import ServerConfig

__all__ = ["ServerConfig", "create_app"]
