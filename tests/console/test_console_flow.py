"""The console's view of a whole workflow, each attempt's error, and what a job waits for:
GET /v1/jobs/{id}/flow and attempt_log, and the pages in headless Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

import deferq
from deferq.worker import Worker, WorkerConfig
from tests.support.console_world import chromium, signed_in
from tests.support.server_helpers import running_server

pytestmark = pytest.mark.xdist_group("console_flow")  # one server and one browser for the module


def drain(app: deferq.App, queues: tuple[str, ...] = ("default",)) -> None:
    """Run every job that is due, until none is (a burst worker in this process)."""
    Worker(app, WorkerConfig(queues=queues, concurrency=4, burst=True, name="test:flow")).run()


class World:
    def __init__(self, url: str) -> None:
        self.url = url
        self.app = deferq.App(url)
        app = self.app
        self.tries: dict[str, int] = {}

        @app.task(name="flow.price")
        def price(item: str) -> int:
            return len(item)

        @app.task(name="flow.total")
        def total(prices: list[int]) -> int:
            return sum(prices)

        @app.task(name="flow.flaky", max_attempts=3, backoff=deferq.backoff.fixed(0))
        def flaky(n: int) -> int:
            self.tries[str(n)] = self.tries.get(str(n), 0) + 1
            if self.tries[str(n)] <= 2:
                raise ValueError(f"try {self.tries[str(n)]} failed")
            return n

        @app.task(name="flow.await_payment")
        def await_payment(order: str) -> Any:
            return deferq.current_job().wait_for("paid", event="payment", key=order, timeout=3600)

        @app.task(name="flow.member")
        def member(n: int) -> int:
            return n

        @app.task(name="flow.broken", max_attempts=1)
        def broken() -> None:
            raise RuntimeError("always")

        self.dead = broken.enqueue()

        @app.task(name="flow.done")
        def done() -> None:
            return None

        self.chord = deferq.chord([price.call(f"item-{i}") for i in range(5)], total.partial()).enqueue()
        self.flaky = flaky.enqueue(7)
        self.waiting = await_payment.enqueue("order-7 ")  # a key with a trailing space, shown as it is
        with app.batch(on_complete=done.call()) as batch:
            for n in range(40):
                member.enqueue(n)
        self.batch = batch
        app.schedules.add("hourly-member", member.call(1), every=3600)
        drain(app)
        with app.batch(on_complete=done.call()) as big:  # a fan-out of 1,000 left queued (nothing drains "bulk")
            app.enqueue_many([member.options(queue="bulk").call(n) for n in range(1000)])
        self.big = big
        app.limits.set("queue:bulk", rate="5/s", concurrency=2)  # a row on the Limits page


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str, Any]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('flow')}/deferq.db"
    world = World(url)
    try:
        with running_server(url, "--no-auth", "--no-schedules") as base, chromium() as browser:
            yield world, base, browser
    finally:
        world.app.close()


def api(base: str, path: str) -> Any:
    answer = httpx.get(base + path, trust_env=False, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_flow_of_a_chord_from_any_member(served: tuple[World, str, Any]) -> None:
    world, base, _ = served
    callback = world.chord.id
    header = world.app.get(callback).meta["deferq.after"][0]
    for start in (callback, header):
        graph = api(base, f"/v1/jobs/{start}/flow")
        assert len(graph["nodes"]) == 6 and not graph["truncated"]
        assert {node["state"] for node in graph["nodes"]} == {"succeeded"}
        assert sorted(b for _, b in graph["edges"]) == [callback] * 5
    assert httpx.get(base + "/v1/jobs/nope/flow", trust_env=False).status_code == 404


def test_a_chords_pages_link_every_header_and_the_callback(served: tuple[World, str, Any]) -> None:
    world, base, browser = served
    callback = world.chord.id
    headers = world.app.get(callback).meta["deferq.after"]
    page = signed_in(browser, base, "")
    page.goto(f"{base}/dashboard/jobs/{callback}")
    for header in headers:  # the callback's page links each of the five
        expect(page.locator(f'#job-parents a[href="/dashboard/jobs/{header}"]')).to_have_count(1)
    for header in headers:  # and each header's page links the callback
        page.goto(f"{base}/dashboard/jobs/{header}")
        expect(page.locator(f'#job-children a[href="/dashboard/jobs/{callback}"]')).to_have_count(1)
    page.click("#whole-flow")
    expect(page.locator("#flow .flow-col")).to_have_count(2)
    expect(page.locator('#flow .flow-col[data-column="0"] li.node')).to_have_count(5)
    expect(page.locator('#flow .flow-col[data-column="1"] li.node')).to_contain_text("flow.total")
    expect(page.locator("#flow-summary")).to_contain_text("6 job(s) in 2 step(s): 6 succeeded")
    assert page.errors == []
    page.context.close()


def test_a_large_batch_is_grouped_by_state_and_opens(served: tuple[World, str, Any]) -> None:
    world, base, browser = served
    found = world.app.get_batch(world.batch.id)
    assert found is not None
    callback = found.callbacks["on_complete"]
    page = signed_in(browser, base, "")
    page.goto(f"{base}/dashboard/jobs/{callback}/flow")
    group = page.locator('#flow .flow-col[data-column="0"] details.group[data-state="succeeded"]')
    expect(group).to_contain_text("40")
    expect(group.locator("li.node").first).to_be_hidden()
    group.locator("summary").click()
    expect(group.locator("li.node")).to_have_count(40)
    expect(group.locator("li.node").first).to_be_visible()
    assert page.errors == []
    page.context.close()


def test_a_job_that_failed_twice_then_succeeded_shows_both_errors(served: tuple[World, str, Any]) -> None:
    world, base, browser = served
    job = api(base, f"/v1/jobs/{world.flaky.id}")
    assert job["state"] == "succeeded"
    log = job["attempt_log"]
    assert [(a["attempt"], a["outcome"]) for a in log] == [(1, "retry"), (2, "retry"), (3, "succeeded")]
    assert "try 1 failed" in log[0]["error"] and "try 2 failed" in log[1]["error"] and log[2]["error"] is None
    assert all(a["worker"] == "test:flow" and a["seconds"] is not None for a in log)
    page = signed_in(browser, base, "")
    page.goto(f"{base}/dashboard/jobs/{world.flaky.id}")
    rows = page.locator("#job-attempts tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("ValueError: try 1 failed")
    expect(rows.nth(1)).to_contain_text("ValueError: try 2 failed")
    expect(rows.nth(2)).to_contain_text("succeeded")
    assert page.errors == []
    page.context.close()


def test_a_plain_job_keeps_no_attempts(served: tuple[World, str, Any]) -> None:
    world, base, _ = served
    assert world.app.backend.kv_get("attempts", world.chord.id) is None  # nothing written on the common path
    assert api(base, f"/v1/jobs/{world.chord.id}")["attempt_log"] == []


def test_the_jobs_list_shows_waiting_jobs_and_what_they_wait_for(served: tuple[World, str, Any]) -> None:
    world, base, browser = served
    page = signed_in(browser, base, "")
    page.goto(f"{base}/dashboard/jobs?state=waiting")
    row = page.locator(f'.jobs tbody tr[data-key="{world.waiting.id}"]')
    expect(row.locator(".badge").first).to_have_text("waiting")
    expect(row).to_contain_text("waits for payment · order-7")
    page.goto(f"{base}/dashboard/jobs/{world.waiting.id}")
    expect(page.locator("#job-waiting")).to_contain_text("It waits for the event payment with the key order-7")
    page.fill("#job-waiting textarea", '{"amount": 12}')
    page.click("#send-event")
    expect(page.locator(".toast")).to_contain_text("1 waiting job(s) woken")
    drain(world.app)
    assert world.app.get(world.waiting.id).result == {"amount": 12}
    page.goto(f"{base}/dashboard/jobs/{world.waiting.id}")
    expect(page.locator("#job-waiting")).to_be_hidden()
    assert page.errors == []
    page.context.close()


def test_the_queue_page_lights_no_other_entry(served: tuple[World, str, Any]) -> None:
    _, base, browser = served
    page = signed_in(browser, base, "")
    page.goto(f"{base}/dashboard/queues/default")
    expect(page.locator("h1")).to_contain_text("default")
    expect(page.locator('#nav a[aria-current="page"]')).to_have_count(0)
    page.context.close()


def test_flow_walk_reads_each_round_once(tmp_path: Path) -> None:
    """A chain of 30 from its middle: every job and edge found, none twice."""
    app = deferq.App(f"sqlite:///{tmp_path}/deferq.db")

    @app.task(name="flow.step")
    def step(n: int = 0) -> int:
        return n + 1

    from deferq.server.api.flow import flow

    first = deferq.chain(step.call(0), *[step.partial() for _ in range(29)]).enqueue()
    graph = flow(app.backend, first.id)
    assert graph is not None and len(graph["nodes"]) == 30 and len(graph["edges"]) == 29
    middle = graph["edges"][10][1]
    again = flow(app.backend, middle)
    assert again is not None and {n["id"] for n in again["nodes"]} == {n["id"] for n in graph["nodes"]}
    app.close()


PHONE_VIEWS = ["/dashboard/jobs", "/dashboard/dead", "/dashboard/periodic", "/dashboard/limits"]


@pytest.mark.parametrize("view", PHONE_VIEWS)
def test_at_phone_width_every_rows_buttons_are_on_screen(served: tuple[World, str, Any], view: str) -> None:
    world, base, browser = served
    page = signed_in(browser, base, "", width=390, height=844)
    page.goto(base + view)
    buttons = page.locator("table tbody tr button")
    expect(buttons.first).to_be_visible()
    for box in [buttons.nth(i).bounding_box() for i in range(min(buttons.count(), 12))]:
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.errors == []
    page.context.close()


def test_a_fan_out_of_a_thousand_stays_readable(served: tuple[World, str, Any]) -> None:
    world, base, browser = served
    found = world.app.get_batch(world.big.id)
    assert found is not None
    callback = found.callbacks["on_complete"]
    graph = api(base, f"/v1/jobs/{callback}/flow")
    assert len(graph["nodes"]) == 1001 and len(graph["edges"]) == 1000 and not graph["truncated"]
    page = signed_in(browser, base, "")
    page.goto(f"{base}/dashboard/jobs/{callback}/flow")
    column = page.locator('#flow .flow-col[data-column="0"]')
    expect(column.locator("details.group")).to_have_count(1)  # 1,000 queued jobs: one line
    expect(column.locator("summary")).to_contain_text("1,000")
    expect(page.locator("#flow-summary")).to_contain_text("1,001 job(s) in 2 step(s)")
    assert page.evaluate("document.documentElement.scrollHeight") < 2000
    assert page.errors == []
    page.context.close()
