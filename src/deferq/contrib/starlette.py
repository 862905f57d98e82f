"""FastAPI and Starlette: open the store at start-up, close it at shutdown.

    from fastapi import FastAPI
    from deferq.contrib.starlette import deferq_lifespan

    jobs = deferq.App()

    @jobs.task()
    def send_welcome(email: str) -> None: ...

    api = FastAPI(lifespan=deferq_lifespan(jobs))

    @api.post("/signup")
    async def signup(email: str):
        job = await send_welcome.enqueue_async(email)
        return {"job": job.id}

Opening at start-up means a wrong URL, an unreachable store or a schema to migrate
shows when the server starts, not in the first request. With a lifespan of your own,
use `async with deferq_store(jobs): ...` inside it, or pass it as `deferq_lifespan(jobs,
your_lifespan)`. The App is also in the lifespan state: `request.state.deferq`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from ..app import App

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


@asynccontextmanager
async def deferq_store(app: App) -> AsyncIterator[App]:
    """Open `app`'s store on entry (connecting, and migrating a SQL schema), close it
    on exit. Blocking work runs in a thread, off the event loop."""
    await asyncio.to_thread(lambda: app.backend)
    try:
        yield app
    finally:
        await asyncio.to_thread(app.close)


def deferq_lifespan(app: App, lifespan: Lifespan | None = None) -> Lifespan:
    """A lifespan for `Starlette(lifespan=...)` / `FastAPI(lifespan=...)` that opens and
    closes the store around `lifespan` (yours, if any), and adds `deferq` to the state."""

    @asynccontextmanager
    async def run(asgi_app: Any) -> AsyncIterator[dict[str, Any]]:
        async with deferq_store(app):
            if lifespan is None:
                yield {"deferq": app}
                return
            async with lifespan(asgi_app) as state:
                yield {**(state if isinstance(state, Mapping) else {}), "deferq": app}

    return run
