"""The console's Limits page, in Debian's Chromium against a real `deferq serve`, on SQLite
and Redis, at 1280 px and 390 px: the limits declared in code (from a worker's heartbeat)
and set at run time, per task, key and queue, with their pause and their use; an admin
sets a queue's limit, pauses it, resumes it and clears it through the API; a reader only looks."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.support.console_world import served_worlds, signed_in

# Its tests share a module fixture per store: one xdist worker runs them all and builds each once.
pytestmark = pytest.mark.xdist_group("console_limits")
TIMEOUT = 10_000  # ms for anything a page should show
WIDTHS = (1280, 390)


worlds, served = served_worlds("limits", TIMEOUT)  # the module's fixtures: served[sqlite|redis]


def row(page: Any, name: str) -> Any:
    return page.locator(f'#limits tbody tr[data-name="{name}"]')


@pytest.mark.parametrize("width", WIDTHS)
def test_the_limits_in_force_with_their_pause_and_use(served, width):
    world, base, browser, _ = served
    page = signed_in(browser, base, world.admin, width=width)
    page.goto(base + "/dashboard/limits")
    expect(page.locator("#nav a[aria-current=page]")).to_have_text("Limits")
    queue = row(page, "queue:email")
    expect(queue.locator("td").nth(1)).to_have_text("queue")
    expect(queue.locator("td").nth(2)).to_have_text("rate 20/s · 4 at once ")
    charge = row(page, "shop.tasks.charge_card")  # declared per customer, its rate set at run time
    expect(charge.locator("td").nth(2)).to_contain_text("rate 50/m per customer:{customer_id}")
    expect(charge.locator("td").nth(3)).to_have_text(re.compile(r"^[0-9.]+/s$"))  # runs a second, from history
    invoice = row(page, "shop.tasks.render_invoice")  # declared only, a slot held
    expect(invoice.locator("td").nth(3)).to_contain_text("1 of 2 running")
    expect(invoice.locator("[data-action=clear]")).to_have_count(0)  # nothing set to clear
    key = row(page, "customer:7")
    expect(key.locator("td").nth(1)).to_have_text("key")
    expect(key.locator(".badge.paused")).to_have_text(re.compile(r"^paused \d+m \d+s$"))
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # no sideways scroll
    assert page.errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_an_admin_sets_pauses_resumes_and_clears_a_queue_limit(served, width):
    world, base, browser, app = served
    name = f"queue:reports-{width}"
    page = signed_in(browser, base, world.admin, width=width)
    page.goto(base + "/dashboard/limits")
    expect(row(page, "queue:email")).to_be_visible()
    page.click("#add-limit")
    page.fill("#limit-form input[name=name]", name)
    page.fill("#limit-form input[name=rate]", "lots")
    page.click("#save-limit")
    expect(page.locator(".message.error")).to_contain_text('rate must be runs per period')  # the API's sentence
    page.fill("#limit-form input[name=rate]", "5/s")
    page.fill("#limit-form input[name=concurrency]", "2")
    page.click("#save-limit")
    expect(row(page, name).locator("td").nth(2)).to_have_text("rate 5/s · 2 at once ")
    assert app.limits.get(name) == {"rate": "5/s", "concurrency": 2, "paused_for": None}

    row(page, name).locator("[data-action=pause]").click()
    expect(page.locator("#limit-form input[name=pause]")).to_have_value("60")
    page.click("#save-limit")
    expect(row(page, name).locator(".badge.paused")).to_be_visible()
    limit = app.limits.get(name)
    assert limit["rate"] == "5/s" and 55 < limit["paused_for"] <= 60  # a pause keeps the limit
    expect(row(page, name).locator("[data-action=pause]")).to_have_count(0)  # paused: Resume in its place

    row(page, name).locator("[data-action=resume]").click()
    expect(row(page, name).locator(".badge.paused")).to_have_count(0)
    expect(row(page, name).locator("td").nth(2)).to_have_text("rate 5/s · 2 at once ")
    assert app.limits.get(name) == {"rate": "5/s", "concurrency": 2, "paused_for": None}  # the limit stays
    expect(row(page, name).locator("[data-action=pause]")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width

    row(page, name).locator("[data-action=clear]").click()
    page.locator("dialog.confirm button.danger").click()
    expect(row(page, name)).to_have_count(0)
    assert app.limits.get(name) is None
    assert [e for e in page.errors if "status of 422" not in e] == []  # the wrong rate's answer, said above


def test_a_reader_sees_the_limits_and_no_action(served):
    world, base, browser, _ = served
    page = signed_in(browser, base, world.reader)
    page.goto(base + "/dashboard/limits")
    expect(row(page, "queue:email")).to_be_visible()
    expect(page.locator("#add-limit")).to_be_hidden()
    expect(page.locator("#limits button")).to_have_count(0)
    assert page.errors == []
