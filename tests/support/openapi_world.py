"""The task the worker of tests/server/test_openapi_clients.py runs: a checkout that waits for
its payment event (the store comes from the worker's --url)."""

from __future__ import annotations

import deferq

app = deferq.App()


@app.task(name="openapi.checkout")
def checkout(order: int) -> object:
    job = deferq.current_job()
    assert job is not None
    return {"order": order, "paid": job.wait_for("paid", event="payment", key=f"order:{order}", timeout=60)}
