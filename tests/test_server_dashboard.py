"""The dashboard at / in a real headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright): it asks for a token, then shows each queue's counts and follows changes."""

from __future__ import annotations

import os

import httpx
import pytest

import deferq
from deferq.server import auth
from tests.conftest import need_service
from tests.server_helpers import running_server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]  # fmt: skip


@pytest.fixture
def browser():
    if not os.path.exists(CHROMIUM):
        need_service("Chromium", f"{CHROMIUM} is missing (scripts/install-browser.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def test_the_dashboard_shows_queue_counts_and_follows_them(browser, tmp_path):
    store = f"sqlite:///{tmp_path}/deferq.db"
    app = deferq.App(store)
    token, _ = auth.create(app.backend, "producer")
    app.enqueue("send", ["a"], queue="email")
    app.enqueue("send", ["b"], queue="email", delay=3600)
    app.close()
    with running_server(store) as base:
        page = browser.new_page()
        page.goto(base + "/")
        page.wait_for_selector("#login", state="visible", timeout=10_000)
        assert "API token" in page.inner_text("#status") or page.is_visible("#login")
        page.fill("#token", token)
        page.click("#login button")
        row = page.wait_for_selector('tr[data-queue="email"]', timeout=10_000)
        cells = [c.inner_text() for c in row.query_selector_all("td")]
        assert cells[:3] == ["email", "1", "1"], cells
        assert not page.is_visible("#login")
        headers = {"authorization": f"Bearer {token}"}
        answer = httpx.post(base + "/v1/jobs", json={"task": "send", "queue": "email"},
                            headers=headers, trust_env=False)  # fmt: skip
        assert answer.status_code == 201
        page.wait_for_function(
            """() => document.querySelector('tr[data-queue="email"] td:nth-child(3)')
                       .textContent === "2" """,
            timeout=10_000,
        )
        page.reload()  # the token is remembered
        page.wait_for_selector('tr[data-queue="email"]', timeout=10_000)
        assert not page.is_visible("#login")
