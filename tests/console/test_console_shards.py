"""The stores page of a redis+shards:// store, in Debian's Chromium against a real `deferq
serve`, at 1280 px and 390 px: an admin adds a shard and a job lands on it, drains it, and
is told why it cannot be removed while the job waits; each change is listed with who made it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

import deferq
from deferq.backends.redis.shards import shard_of_id
from deferq.server.http import auth
from tests.support.console_world import chromium, signed_in
from tests.support.server_helpers import running_server
from tests.support.stores.redis import RedisServer, _need_redis_server, unique_prefix

# Its tests share a module fixture: one xdist worker runs them all and builds it once.
pytestmark = pytest.mark.xdist_group("console_shards")

TIMEOUT = 10_000  # ms for anything a page should show


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[tuple[list[RedisServer], Any]]:
    _need_redis_server()
    root = Path(tmp_path_factory.mktemp("console-shards"))
    servers = [RedisServer(root / f"s{i}").start() for i in range(3)]
    try:
        with chromium() as browser:
            expect.set_options(timeout=TIMEOUT)
            yield servers, browser
    finally:
        for server in servers:
            server.stop()


@pytest.mark.parametrize("width", (1280, 390))
def test_an_admin_adds_a_shard_a_job_lands_on_it_and_its_removal_is_refused(world, width) -> None:
    servers, browser = world
    url = "redis+shards://" + ",".join(f"127.0.0.1:{s.port}/0" for s in servers[:2]) + f"?prefix={unique_prefix()}"
    third = f"127.0.0.1:{servers[2].port}/0"
    app = deferq.App(url)
    admin, _ = auth.create(app.backend, "admin", "ops laptop")
    try:
        with running_server(url) as base:
            page = signed_in(browser, base, admin, width=width)
            page.goto(f"{base}/dashboard/stores")
            expect(page.locator("#shards tbody tr")).to_have_count(2)
            expect(page.locator("#shards tbody tr button")).to_have_count(0)  # anchors stay
            page.fill("#shard-server", third)
            page.locator("#add-shard button[type=submit]").click()
            added = page.locator(f'#shards tr[data-key="{third}"]')
            expect(added).to_have_attribute("data-state", "live")
            expect(page.locator("#shard-log tbody tr").first).to_contain_text("token")
            expect(page.locator("#shard-log tbody tr").first).to_contain_text("ops laptop")

            headers = {"authorization": f"Bearer {admin}"}
            made = []
            for n in range(3):  # round robin over the three: one of these is on the new shard
                answer = page.request.post(f"{base}/v1/jobs", data={"task": "t", "args": [n]}, headers=headers)
                assert answer.status == 201
                made.append(answer.json()["id"])
            (landed,) = [job_id for job_id in made if shard_of_id(job_id) == 2]
            assert app.get(landed).state == "queued"  # this process follows too
            page.goto(f"{base}/dashboard/jobs/{landed}")
            expect(page.locator(".badge.state-queued").first).to_have_text("queued")

            page.goto(f"{base}/dashboard/stores")
            added.locator('button[data-action="drain"]').click()
            page.locator("dialog button", has_text="Drain").click()
            expect(added).to_have_attribute("data-state", "draining")
            added.locator('button[data-action="remove"]').click()
            page.locator("dialog button", has_text="Remove").click()
            expect(page.locator(".message")).to_contain_text(f"{third} still holds 1 unfinished jobs")
            expect(added).to_have_attribute("data-state", "draining")
            expect(page.locator("#shard-log tbody tr")).to_have_count(2)
            expect(page.locator("#shard-log tbody tr").first).to_contain_text("drain")
            assert app.get(landed).state == "queued"
            assert [e for e in page.errors if "409" not in e] == []
    finally:
        app.close()
