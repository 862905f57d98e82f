"""The console in a real headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright) against a real `deferq serve`: every view with jobs in every state, at
1280 px and 390 px; links, the back button and reloads; live updates that leave a
half-typed filter alone; a job retried from its page and run by a worker; a topic made
on the page that delivers to a receiver; what a read-only token sees; the store-down
banner; text that stays text; the dark theme."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest
from playwright.sync_api import expect

import deferq
from deferq import testing
from deferq.backends.base import Outcome
from deferq.server.topics import delivery
from deferq.server.topics.signing import SIGNATURE_HEADER
from deferq.worker import Worker, WorkerConfig
from tests.support.alert_receivers import free_port
from tests.support.console_world import World, chromium, seed, signed_in
from tests.support.server_helpers import Receiver, running_server, wait_until

# Its tests share a module fixture: one xdist worker runs them all and builds it once.
pytestmark = pytest.mark.xdist_group("console_views")

CONDITION = "{res.code}!=200 && {res.data.status}!=2"
TIMEOUT = 10_000  # ms for anything a page should show


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[World, str, Any]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('console')}/deferq.db"
    world = seed(url)
    # --no-schedules (and schedules=False below): no tick of the world's schedules adds a job mid-test
    with (running_server(url, "--app", "tests.support.console_world:app", "--no-schedules") as base,
          chromium() as browser):
        expect.set_options(timeout=TIMEOUT)
        yield world, base, browser


@pytest.fixture(scope="module")
def worker(served) -> Iterator[deferq.App]:
    """A worker in this process on the same store: it delivers callbacks and runs the
    task `console.recovers`, which fails until the test lets it succeed."""
    world, _, _ = served
    app = deferq.App(world.url, lease=5)
    app.recovering = threading.Event()

    @app.task(name="console.recovers", queue="retries", max_attempts=1)
    def recovers(order: int) -> dict[str, int]:
        if not app.recovering.is_set():
            raise RuntimeError(f"order {order}: the payment service is down")
        return {"order": order}

    delivery.install(app)
    running = Worker(app, WorkerConfig(queues=("retries", "callbacks"), concurrency=2, idle_wait=0.2,
                                       schedules=False))
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    yield app
    running.stop()
    thread.join(timeout=10)
    app.close()


def no_errors(page: Any, *statuses: int) -> None:
    """No script error, and no failed request but those answered with `statuses` on purpose."""
    unexpected = [e for e in page.errors if not any(f"status of {s} " in e for s in statuses)]
    assert unexpected == [], unexpected


def fits(page: Any) -> None:
    """Nothing sticks out sideways: a phone scrolls down, not across."""
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"{page.url} is {width[0]} px wide in a {width[1]} px window"


# -- every view -------------------------------------------------------------------------------


def views(world: World) -> list[tuple[str, str, str]]:
    """(path, a selector that appears once the data is there, text it must hold)."""
    ids = world.ids
    return [
        ("/dashboard/", '#queues tr[data-key="email"]', "email"),
        ("/dashboard/queues/email", ".jobs tbody tr", "send_welcome"),
        ("/dashboard/queues/payments?state=dead", ".jobs tbody tr", "charge_card"),
        ("/dashboard/jobs", ".jobs tbody tr:nth-child(8)", ""),
        ("/dashboard/jobs?state=scheduled", f'.jobs tr[data-key="{ids["scheduled"]}"]', "due in 3 days"),
        (f"/dashboard/jobs/{ids['dead']}", "#job-error", "GatewayError: card declined"),
        (f"/dashboard/jobs/{ids['active']}", ".job-side", ":4242:console-test"),
        (f"/dashboard/jobs/{ids['queued']}", ".badge.state-queued", "queued"),
        (f"/dashboard/jobs/{ids['scheduled']}", ".badge.state-scheduled", "scheduled"),
        (f"/dashboard/jobs/{ids['succeeded']}", "#job-result", "r-1041@shop"),
        (f"/dashboard/jobs/{ids['cancelled']}", ".badge.state-cancelled", "cancelled"),
        (f"/dashboard/jobs/{ids['chain_middle']}", "#job-children li", "shop.tasks.mail_pdf"),
        (f"/dashboard/jobs/{ids['batch_member']}", "#job-batch", "This job is a member."),
        (f"/dashboard/jobs/{ids['chunk_member']}", "#job-chunk-title", "Chunk call: 6 jobs"),
        ("/dashboard/dead", f'.jobs tr[data-key="{ids["dead"]}"]', "insufficient_funds"),
        ("/dashboard/workers", "#workers tbody tr", "render_invoice"),
        ("/dashboard/periodic", '#periodic tr[data-key="refresh-rates"]', "*/15 * * * *"),
        ("/dashboard/limits", '#limits tr[data-key="queue:email"]', "rate 20/s"),
        ("/dashboard/topics", '#topics tr[data-key="order-paid"]', "https://shop.example/hooks/paid"),
        ("/dashboard/topics/order-paid", "#backoff-preview li", "attempt 2"),
        ("/dashboard/topics/new", "#try-verdict", "Delivered"),
        ("/dashboard/alerts", "#alerts-form", "Send e-mail"),
        ("/dashboard/stores", ".card", "up"),
        ("/dashboard/stores", '#store-parts tr[data-key="store"]', "SQLite"),
        ("/dashboard/tokens", "#tokens tbody tr:nth-child(3)", ""),
    ]


@pytest.mark.parametrize("width", [1280, 390])
def test_every_view_shows_its_data(served, width):
    world, base, browser = served
    page = signed_in(browser, base, world.admin, width=width)
    for path, selector, expected in views(world):
        page.goto(base + path)
        expect(page.locator(selector).first).to_contain_text(expected)
        no_errors(page)
        fits(page)
    page.goto(f"{base}/dashboard/topics/order-paid")
    expect(page.locator('input[name="url"]')).to_have_value("https://shop.example/hooks/paid")
    expect(page.locator("#headers input").first).to_have_value("X-Team")
    page.context.close()


@contextmanager
def periodic_page(served: tuple[World, str, Any], token: str) -> Iterator[tuple[deferq.App, Any]]:
    """The Periodic page signed in with `token`, and the store; the test's changes undone after."""
    world, base, browser = served
    store = deferq.App(world.url)
    page = signed_in(browser, base, token)
    try:
        page.goto(base + "/dashboard/periodic")
        yield store, page
    finally:
        store.backend.kv_delete("leases", "upkeep")
        store.schedules.remove("digest")
        page.context.close()
        store.close()


def test_the_periodic_page_says_who_fires_the_schedules(served):
    with periodic_page(served, served[0].reader) as (store, page):
        expect(page.locator('#periodic tr[data-key="refresh-rates"]')).to_contain_text("refresh-rates (code)")
        # its next ticks written as every page writes a time (here en-US: 12/07/2026, 10:45:00)
        expect(page.locator('#periodic tr[data-key="refresh-rates"] td').nth(5)).to_have_text(
            re.compile(r"^(\d\d/\d\d/\d{4}, \d\d:\d\d:00){3}$"))
        expect(page.locator("#schedule-leader")).to_contain_text("No process fires schedules now")
        expect(page.locator("#add-schedule")).to_be_hidden()  # a reader changes nothing
        store.backend.kv_put("leases", "upkeep", b'{"holder": "box:77:abc"}', 60)  # as a leader does
        page.reload()
        expect(page.locator("#schedule-leader")).to_have_text("Fired by box:77:abc.")
        no_errors(page)


def test_an_admin_adds_edits_and_pauses_a_schedule_on_the_periodic_page(served):
    with periodic_page(served, served[0].admin) as (store, page):
        page.click("#add-schedule")
        page.fill('input[name="name"]', "digest")
        page.fill('input[name="task"]', "refresh_rates")
        page.fill('input[name="cron"]', "30 2 * * *")
        page.fill('input[name="tz"]', "Mars/Base")
        page.click("#save-schedule")
        expect(page.locator(".message.error")).to_contain_text("unknown time zone 'Mars/Base'")
        assert store.schedules.get("digest") is None  # nothing stored
        page.fill('input[name="tz"]', "Europe/Berlin")
        page.click("#save-schedule")
        row = page.locator('#periodic tr[data-key="digest"]')
        expect(row).to_contain_text("30 2 * * * (Europe/Berlin)")
        expect(row).to_contain_text("digest (api)")
        row.locator('button[data-action="edit"]').click()
        expect(page.locator('input[name="cron"]')).to_have_value("30 2 * * *")
        page.select_option('select[name="kind"]', "every")
        page.fill('input[name="every"]', "3600")
        page.click("#save-schedule")
        expect(row).to_contain_text("every 3600s")
        row.locator('button[data-action="pause"]').click()
        expect(row.locator('button[data-action="resume"]')).to_be_visible()
        expect(row).to_contain_text("paused")
        info = store.schedules["digest"]
        assert info.paused and info.schedule.every == 3600 and info.schedule.task == "refresh_rates"
        no_errors(page, 422)


def test_counts_and_states_on_the_overview_and_the_job_pages(served):
    world, base, browser = served
    page = signed_in(browser, base, world.admin)
    page.goto(base + "/dashboard/")
    cells = page.locator('#queues tr[data-key="email"] td')
    expect(cells.nth(3)).to_have_text("3")  # queued
    assert [cells.nth(i).inner_text() for i in range(1, 8)] == ["0", "1", "3", "0", "1", "0", "1"]
    expect(page.locator('#queues tr[data-key="orders"] td').nth(1)).to_have_text("1")  # a chain's blocked step
    expect(page.locator('#queues tr[data-key="payments"] td.alarm')).to_have_text("1")  # a dead letter
    expect(page.locator(".card[data-health]")).to_contain_text("up")
    expect(page.locator(".card", has_text="workers online")).to_contain_text("1/8 busy")
    page.goto(f"{base}/dashboard/jobs/{world.ids['dead']}")
    expect(page.locator(".job-side")).to_contain_text("charge:1042")
    expect(page.locator(".job-side")).to_contain_text("1 of 3")
    expect(page.locator("#job-kwargs")).to_have_text('{"amount":59.9,"currency":"EUR"}')
    assert page.locator("text=Retry").first.is_visible()
    page.goto(f"{base}/dashboard/jobs/{world.ids['queued']}")
    expect(page.locator("button", has_text="Cancel")).to_be_visible()
    no_errors(page)
    page.goto(f"{base}/dashboard/jobs/06H000000000000000000000XX")
    expect(page.locator(".empty")).to_contain_text("No job 06H000000000000000000000XX")
    no_errors(page, 404)  # the browser logs the answer of GET /v1/jobs/{id}
    page.context.close()


def test_the_job_page_shows_its_workflow(served):
    """A chain's middle step: the step it runs after and the one after it, with states
    and links; a batch member: its batch's counts and callback; a job alone: no panel."""
    world, base, browser = served
    ids = world.ids
    page = signed_in(browser, base, world.reader, width=390)
    page.goto(f"{base}/dashboard/jobs/{ids['chain_middle']}")
    parents, children = page.locator("#job-parents li"), page.locator("#job-children li")
    expect(parents).to_have_count(1)
    expect(parents.first).to_contain_text("succeeded")
    expect(parents.first).to_contain_text("shop.tasks.fetch_order")
    expect(children).to_have_count(1)
    expect(children.first).to_contain_text("blocked")
    expect(children.first).to_contain_text("shop.tasks.mail_pdf")
    fits(page)
    children.first.locator("a").click()
    expect(page).to_have_url(f"{base}/dashboard/jobs/{ids['chain_last']}")
    expect(page.locator(".badge.state-blocked").first).to_have_text("blocked")
    expect(parents.first).to_contain_text("queued")  # the middle step, waiting for a worker
    expect(page.locator("#job-children")).to_be_hidden()
    page.go_back()
    expect(page.locator("#job-parents li").first).to_contain_text("shop.tasks.fetch_order")
    page.goto(f"{base}/dashboard/jobs/{ids['batch_member']}")
    batch = page.locator("#job-batch")
    expect(batch).to_contain_text(ids["batch"][-8:])
    expect(batch.locator(".badge")).to_have_text("running")
    expect(batch.locator(".batch-counts strong").first).to_have_text("3")  # total
    expect(batch).to_contain_text("This job is a member.")
    expect(children.first).to_contain_text("shop.tasks.import_report")
    batch.locator("li a").click()
    expect(page).to_have_url(f"{base}/dashboard/jobs/{ids['batch_callback']}")
    expect(page.locator("#job-batch")).to_contain_text("This job is its on_complete callback.")
    expect(page.locator("#job-parents li")).to_have_count(3)
    expect(page.locator("#job-parents li", has_text="dead")).to_have_count(1)
    page.goto(f"{base}/dashboard/jobs/{ids['queued']}")
    expect(page.locator(".badge.state-queued").first).to_be_visible()
    expect(page.locator("section", has_text="Workflow")).to_be_hidden()
    no_errors(page)
    fits(page)
    page.context.close()


def test_the_job_page_links_the_jobs_of_its_chunk_call(served):
    """A chunk task's job: "Chunk call: N jobs", each a node with its state and item, this
    one marked, a link to another's page and one to the call's jobs in the list (filtered
    by the call, its box showing it); a plain job: no panel. At 390 px too."""
    world, base, browser = served
    ids = world.ids
    for width in (1280, 390):
        page = signed_in(browser, base, world.reader, width=width)
        page.goto(f"{base}/dashboard/jobs/{ids['chunk_member']}")
        expect(page.locator("#job-chunk-title")).to_have_text("Chunk call: 6 jobs")
        nodes = page.locator("#job-chunk li")
        expect(nodes).to_have_count(6)
        expect(page.locator("#job-chunk li.self")).to_contain_text("(this job)")
        expect(page.locator("#job-chunk li.self")).to_contain_text('"SKU-1001"')
        expect(page.locator("#job-chunk li", has_text="succeeded")).to_have_count(5)
        expect(page.locator("#job-chunk li", has_text="retrying")).to_have_count(1)
        fits(page)
        page.locator("#job-chunk li", has_text="retrying").locator("a").click()
        expect(page).to_have_url(f"{base}/dashboard/jobs/{ids['chunk_retrying']}")
        expect(page.locator("#job-error")).to_contain_text("price missing")
        expect(page.locator("#job-chunk li.self")).to_contain_text("SKU-1003")  # it still names that call
        expect(page.locator("#job-attempts .chunk-call")).to_have_text(re.compile(r"^in call …"))
        page.locator("#job-chunk-all").click()
        expect(page).to_have_url(re.compile(r"/dashboard/jobs\?chunk="))
        expect(page.locator(".jobs tbody tr")).to_have_count(6)
        expect(page.locator('input[name="chunk"]')).to_have_value(re.compile(r"^[0-9A-Z]{26}$"))
        expect(page.locator(".jobs tbody tr", has_text="shop.tasks.index_products")).to_have_count(6)
        fits(page)
        page.goto(f"{base}/dashboard/jobs/{ids['queued']}")
        expect(page.locator(".badge.state-queued").first).to_be_visible()
        expect(page.locator("#job-chunk-panel")).to_be_hidden()
        no_errors(page)
        page.context.close()


def test_charts_draw_the_history_kept_in_the_store(served):
    """The overview and a queue's page chart GET /v1/stats/history (the seeded day, and
    what the world's producer counted): every server shows the same, after any restart."""
    world, base, browser = served
    headers = {"authorization": f"Bearer {world.reader}"}

    def enqueued(**params: Any) -> str:
        answer = httpx.get(f"{base}/v1/stats/history", params=params, headers=headers).json()
        return f"{answer['totals']['enqueued']:,} enqueued"

    def shows_the_api_totals(change: Callable[[], None], **params: Any) -> None:
        """The totals the page draws after `change` are the API's, asked before and after
        it: a minute that ends in between moves the window, so either answer is right."""
        before = enqueued(**params)
        change()
        totals = page.locator("[data-testid=history-totals]")

        def drawn() -> bool:
            shown = totals.inner_text() if totals.count() else ""
            return shown.startswith(before) or shown.startswith(enqueued(**params))

        wait_until(drawn, 10, f"the totals of GET /v1/stats/history {params} on the page")

    page = signed_in(browser, base, world.reader)
    shows_the_api_totals(lambda: page.goto(base + "/dashboard/"), minutes=60, step=1)
    expect(page.locator(".history h2")).to_contain_text("last hour")
    expect(page.locator(".history .uplot")).to_have_count(2)  # throughput, and wait / run times
    shows_the_api_totals(lambda: page.select_option(".history select", "day"), minutes=1440, step=10)
    expect(page.locator(".history h2")).to_contain_text("last day")
    # the chosen range is kept for the tab
    shows_the_api_totals(lambda: page.goto(base + "/dashboard/queues/payments"),
                         minutes=1440, step=10, queue="payments")
    expect(page.locator(".history h2")).to_have_text("payments, last day (per 10 minutes)")
    expect(page.locator(".history .uplot")).to_have_count(2)
    no_errors(page)
    page.context.close()


# -- navigation and live updates ------------------------------------------------------------------


def test_links_the_back_button_and_reload_keep_the_view(served):
    world, base, browser = served
    page = signed_in(browser, base, world.admin)
    page.goto(base + "/dashboard/")
    page.click("nav >> text=Dead")
    expect(page).to_have_url(base + "/dashboard/dead")
    page.click(f'a[href="/dashboard/jobs/{world.ids["dead"]}"]')
    expect(page.locator("#job-error")).to_contain_text("GatewayError")
    page.go_back()
    expect(page).to_have_url(base + "/dashboard/dead")
    expect(page.locator("h1")).to_have_text("Dead letters")
    page.reload()
    expect(page.locator(f'.jobs tr[data-key="{world.ids["dead"]}"]')).to_be_visible()
    expect(page.locator('nav a[aria-current="page"]')).to_have_text("Dead")
    # A filter goes into the URL; back and forward move between filters.
    page.goto(base + "/dashboard/jobs")
    page.select_option('select[name="state"]', "queued")
    expect(page).to_have_url(base + "/dashboard/jobs?state=queued")
    expect(page.locator(".jobs tbody tr")).to_have_count(5)  # 3 welcomes, a chain's step, a batch member
    page.fill('input[name="task"]', "welcome")
    expect(page).to_have_url(base + "/dashboard/jobs?state=queued&task=welcome")
    page.go_back()
    expect(page).to_have_url(base + "/dashboard/jobs")
    expect(page.locator('select[name="state"]')).to_have_value("")
    page.select_option('select[name="state"]', "waiting")  # jobs in a durable wait: none here
    expect(page).to_have_url(re.compile(r"/dashboard/jobs\?state=waiting"))
    no_errors(page)
    page.context.close()


def test_polling_updates_in_place_and_leaves_what_is_being_typed(served):
    world, base, browser = served
    page = signed_in(browser, base, world.admin)
    page.goto(f"{base}/dashboard/topics/order-paid")
    url = page.locator('input[name="url"]')
    expect(url).to_have_value("https://shop.example/hooks/paid")
    url.fill("https://shop.example/hooks/half-typed")
    page.wait_for_timeout(2600)  # one poll at least
    expect(url).to_have_value("https://shop.example/hooks/half-typed")
    page.goto(base + "/dashboard/jobs?state=queued")
    search = page.locator('input[name="q"]')
    search.click()
    search.press_sequentially("welcome:")  # applied after a pause, without leaving the box
    expect(page).to_have_url(base + "/dashboard/jobs?state=queued&q=welcome%3A")
    expect(page.locator(".jobs tbody tr")).to_have_count(3)
    page.evaluate("() => { document.querySelector('.jobs tbody tr').dataset.mark = 'same node'; }")
    job = deferq.App(world.url).enqueue("shop.tasks.send_welcome", ["late@example.com"], queue="email",
                                        key="welcome:late")
    expect(page.locator(f'.jobs tr[data-key="{job.id}"]')).to_be_visible()  # the poll added it ...
    expect(page.locator('.jobs tr[data-mark="same node"]')).to_have_count(1)  # ... keeping the old rows
    assert search.input_value() == "welcome:" and page.evaluate("document.activeElement.name") == "q"
    no_errors(page)
    page.context.close()


# -- acting --------------------------------------------------------------------------------------------


def test_a_dead_job_retried_from_its_page_runs_and_succeeds(served, worker):
    world, base, browser = served
    job = worker.enqueue("console.recovers", [1077], queue="retries")
    wait_until(lambda: worker.get(job.id).state == "dead", 15, "the first run failed for good")
    page = signed_in(browser, base, world.admin)
    page.goto(f"{base}/dashboard/jobs/{job.id}")
    expect(page.locator("#job-error")).to_contain_text("the payment service is down")
    worker.recovering.set()
    page.click("button:has-text('Retry')")
    expect(page.locator(".page-head .badge")).to_have_text("succeeded", timeout=15_000)  # no reload
    expect(page.locator("#job-result")).to_have_text('{"order":1077}')
    expect(page.locator("button:has-text('Retry')")).to_be_hidden()
    no_errors(page)
    page.context.close()


def test_a_topic_made_on_the_page_delivers_to_its_receiver(served, worker):
    world, base, browser = served
    page = signed_in(browser, base, world.admin)
    with Receiver([(200, b'{"code": 200, "data": {"status": 2}}')]) as receiver:
        page.goto(base + "/dashboard/topics")
        page.click("#new-topic")
        expect(page).to_have_url(base + "/dashboard/topics/new")
        page.fill('input[name="name"]', "made-here")
        page.fill('input[name="url"]', receiver.url)
        page.fill('input[name="max_attempts"]', "4")
        page.fill('textarea[name="retry_condition"]', CONDITION)
        expect(page.locator("#try-verdict")).to_have_text("Delivered: this answer ends the job (no retry).")
        page.fill("#try-answer", '{"code": 500}')
        expect(page.locator("#try-verdict")).to_contain_text(f"Retried: retry condition is true: {CONDITION}")
        page.fill('textarea[name="retry_condition"]', "{res.code} !=")
        expect(page.locator("#try-verdict")).to_contain_text("at position")
        page.fill('textarea[name="retry_condition"]', CONDITION)
        page.select_option('select[name="backoff_kind"]', "fixed")
        page.fill('input[name="seconds"]', "1")
        expect(page.locator("#backoff-preview li")).to_have_count(3)  # attempts 2, 3 and 4
        page.click("#save-topic")
        expect(page).to_have_url(base + "/dashboard/topics/made-here")
        page.fill("#send-body", '{"order": 99}')
        page.click("#send-job")
        hit = receiver.wait_for_hits(1, timeout=15)[0]
        assert hit.body == b'{"order":99}' and hit.headers[SIGNATURE_HEADER.lower()].startswith("v1=")
        page.click(".message a")  # the job just sent
        expect(page.locator(".page-head .badge")).to_have_text("succeeded")
        expect(page.locator(".job-name")).to_have_text("→ made-here")
    no_errors(page, 422)  # the condition tried with a syntax error
    page.context.close()


def test_a_reader_sees_everything_and_can_act_on_nothing(served):
    world, base, browser = served
    page = signed_in(browser, base, world.reader)
    page.goto(base + "/dashboard/dead")
    expect(page.locator(f'.jobs tr[data-key="{world.ids["dead"]}"]')).to_be_visible()
    assert page.locator("#retry-matching, #delete-matching, #delete-dead, .jobs button").count() == 0
    expect(page.locator("#who")).to_have_text("reader")
    page.goto(f"{base}/dashboard/jobs/{world.ids['dead']}")
    expect(page.locator("#job-error")).to_be_visible()
    assert not page.locator("button:has-text('Retry')").is_visible()
    assert page.locator("#save-remark, textarea[name=remark]").count() == 0
    page.goto(base + "/dashboard/queues/email")
    expect(page.locator(".jobs tbody tr").first).to_be_visible()
    assert not page.locator("#pause-queue").is_visible()
    page.goto(f"{base}/dashboard/jobs/{world.ids['queued']}")
    expect(page.locator(".page-head .badge")).to_have_text("queued")
    assert not page.locator("button:has-text('Cancel')").is_visible()
    for path, title in (("topics", "Topics"), ("tokens", "Tokens"), ("alerts", "Alert settings")):
        page.goto(f"{base}/dashboard/{path}")
        expect(page.locator(".empty")).to_contain_text(f"{title} need an admin token.")
    page.goto(base + "/dashboard/workers")
    expect(page.locator("#workers tbody tr", has_text=":4242:console-test")).to_be_visible()
    no_errors(page)
    page.context.close()
    reader = {"authorization": f"Bearer {world.reader}"}
    with httpx.Client(base_url=base, headers=reader, trust_env=False, timeout=10) as api:
        assert api.post(f"/v1/dead/{world.ids['dead']}/retry").status_code == 403
        assert api.delete(f"/v1/jobs/{world.ids['queued']}").status_code == 403
        assert api.post("/v1/queues/email/pause").status_code == 403
        assert api.put(f"/v1/jobs/{world.ids['dead']}/remark", json={"remark": "x"}).status_code == 403
        assert api.post("/v1/dead/delete-batch", json={"ids": [world.ids["dead"]]}).status_code == 403
        assert api.put("/v1/topics/x", json={"url": "http://127.0.0.1:9/"}).status_code == 403
        assert api.get(f"/v1/jobs/{world.ids['dead']}").json()["state"] == "dead"


def test_no_token_asks_for_one_and_a_wrong_one_is_refused(served):
    world, base, browser = served
    page = signed_in(browser, base, "")
    page.goto(base + "/dashboard/workers")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", "dq_wrong")
    page.click("#login button")
    expect(page.locator("#login")).to_contain_text("That token was refused")
    page.fill("#token", world.reader)
    page.click("#login button")
    expect(page.locator("#workers tbody tr", has_text=":4242:console-test")).to_be_visible()  # the page asked for
    page.context.close()


# -- safety and looks ----------------------------------------------------------------------------------


def test_text_from_jobs_stays_text_and_html_cannot_be_injected(served):
    world, base, browser = served
    job = deferq.App(world.url).enqueue(
        '<img src=x onerror="window.pwned=1">', ["<script>window.pwned=2</script>"], queue="xss", key="<b>bold</b>"
    )
    page = signed_in(browser, base, world.admin)
    page.goto(f"{base}/dashboard/jobs/{job.id}")
    expect(page.locator(".job-name")).to_have_text('<img src=x onerror="window.pwned=1">')
    expect(page.locator("#job-args")).to_contain_text("<script>window.pwned=2</script>")
    page.goto(base + "/dashboard/jobs?queue=xss")
    expect(page.locator(".jobs tbody tr")).to_contain_text("key <b>bold</b>")
    assert page.locator("main img, main b, main script").count() == 0
    assert page.evaluate("window.pwned") is None
    blocked = page.evaluate("""() => { try { document.body.innerHTML = '<b>x</b>'; return 'allowed'; }
                                        catch (e) { return e.name; } }""")
    assert blocked == "TypeError"  # Trusted Types: no HTML from strings on this page
    page.context.close()


def test_a_store_that_is_down_shows_a_banner_not_a_blank_page(served):
    _, _, browser = served
    with running_server(f"redis://127.0.0.1:{free_port()}/0", "--no-auth") as base:
        page = signed_in(browser, base, "")
        page.goto(base + "/dashboard/")
        expect(page.locator("#banner")).to_contain_text("The store is down: the store cannot be reached")
        expect(page.locator("h1")).to_have_text("Overview")
        expect(page.locator(".card[data-health]")).to_contain_text("down")
        expect(page.locator("#who")).to_have_text("no auth")
        page.goto(base + "/dashboard/jobs")
        expect(page.locator("#banner")).to_be_visible()
        page.context.close()


def test_dark_mode_follows_the_system_and_the_toggle(served):
    world, base, browser = served
    page = signed_in(browser, base, world.admin, dark=True)
    page.goto(base + "/dashboard/")
    html = page.locator("html")
    expect(html).to_have_attribute("data-theme", "dark")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(14, 17, 22)"
    page.click("#theme")  # auto -> light
    expect(html).to_have_attribute("data-theme", "light")
    page.reload()
    expect(html).to_have_attribute("data-theme", "light")
    expect(page.locator("#theme")).to_have_text("Theme: light")
    page.click("#theme")  # light -> dark
    expect(html).to_have_attribute("data-theme", "dark")
    page.context.close()


def test_a_token_is_shown_once_and_revoked_after_asking(served):
    world, base, browser = served
    page = signed_in(browser, base, world.admin)
    page.goto(base + "/dashboard/tokens")
    before = page.locator("#tokens tbody tr")
    expect(before.first).to_be_visible()
    count = before.count()
    page.select_option('select[name="scope"]', "reader")
    page.fill('input[name="note"]', "wall screen")
    page.click("#make-token button")
    expect(page.locator("#new-token")).to_contain_text("It is shown only now")
    token = page.locator("#new-token code").inner_text()
    assert token.startswith("dq_")
    row = page.locator("#tokens tbody tr", has_text="wall screen")
    expect(row).to_contain_text("reader")
    expect(page.locator("#tokens tbody tr")).to_have_count(count + 1)
    row.locator("button", has_text="Revoke").click()
    page.locator("dialog button", has_text="Cancel").click()
    expect(page.locator("#tokens tbody tr")).to_have_count(count + 1)
    row.locator("button", has_text="Revoke").click()
    page.locator("dialog button", has_text="Revoke").click()
    expect(page.locator("#tokens tbody tr")).to_have_count(count)
    no_errors(page)
    page.context.close()


def test_bulk_actions_on_dead_letters_ask_first(served):
    world, base, browser = served
    app = deferq.App(world.url)
    for task in ("bulk.alpha", "bulk.alpha", "bulk.beta", "bulk.beta"):
        app.enqueue(task, queue="bulk")
        (job,) = app.backend.reserve(["bulk"], 1, "bulk-test", 60.0, (0, 1, 2))
        app.backend.settle([Outcome(job, "dead", error="ValueError: no")])
    page = signed_in(browser, base, world.admin)
    page.goto(base + "/dashboard/dead?queue=bulk&task=bulk.alpha")
    retry = page.locator("#retry-matching")
    expect(retry).to_have_text("Retry all that match (2)")
    retry.click()
    expect(page.locator("dialog")).to_contain_text("This queues the 2 dead letter(s) that match again")
    page.locator("dialog button", has_text="Cancel").click()
    expect(page.locator(".jobs tbody tr")).to_have_count(2)
    retry.click()
    page.locator("dialog button", has_text="Retry them").click()
    expect(page.locator(".toast")).to_contain_text("2 dead letter(s) queued again.")
    expect(page.locator(".empty")).to_contain_text("No dead letter matches this filter.")
    assert {j.task for j in app.list_jobs("queued", "bulk")} == {"bulk.alpha"}
    app.enqueue("bulk.gamma", queue="bulk", priority="high")  # leased before the alphas now queued
    (job,) = app.backend.reserve(["bulk"], 1, "bulk-test", 60.0, (0, 1, 2))
    app.backend.settle([Outcome(job, "dead", error="ValueError: no")])
    page.goto(base + "/dashboard/dead?queue=bulk&task=bulk.beta")
    remove = page.locator("#delete-matching")
    expect(remove).to_have_text("Delete all that match (2)")
    remove.click()
    expect(page.locator("dialog")).to_contain_text("This deletes the 2 dead letter(s) that match for good")
    sure = page.locator("dialog button", has_text="Delete them")
    expect(sure).to_be_disabled()
    page.fill("dialog input", "delete")
    sure.click()
    expect(page.locator(".toast")).to_contain_text("2 dead letter(s) deleted.")
    expect(page.locator(".empty")).to_contain_text("No dead letter matches this filter.")
    assert [j.task for j in app.list_jobs("dead", "bulk")] == ["bulk.gamma"]  # outside the filter: kept
    page.click("#delete-dead")
    delete = page.locator("dialog button", has_text="Delete")
    expect(delete).to_be_disabled()
    page.fill("dialog input", "delete")
    expect(delete).to_be_enabled()
    delete.click()  # the earlier "2 ... deleted" toast may still show: wait on the store
    wait_until(lambda: app.list_jobs("dead", "bulk") == [], what="the purge by age")
    no_errors(page)
    page.context.close()
    app.close()


def test_dead_letters_page_by_cursor_and_act_on_every_page(served):
    """1,005 dead letters: pages of 50 by cursor; retry all that match goes through every
    page of the filter (the console posts 1,000 ids at a time), not just the first."""
    world, base, browser = served
    app = deferq.App(world.url)
    options = deferq.options.JobOptions(queue="deadpaged", max_attempts=1)
    app.enqueue_many([deferq.task.Call("bulk.many", (n,), {}, options) for n in range(1005)])
    app.enqueue("bulk.other", queue="deadpaged", max_attempts=1)
    while leased := app.backend.reserve(["deadpaged"], 500, "bulk-test", 60.0, (0, 1, 2)):
        app.backend.settle([Outcome(job, "dead", error="ValueError: no") for job in leased])
    page = signed_in(browser, base, world.admin)
    page.goto(base + "/dashboard/dead?queue=deadpaged")
    rows = page.locator(".jobs tbody tr")
    expect(rows).to_have_count(50)
    expect(page.locator("[data-testid=jobs-summary]")).to_contain_text("1,006 dead letter(s); 50 on this page")
    page.click("text=Older →")
    expect(page.locator("text=← Newest")).to_be_visible()
    assert "cursor=" in page.url
    expect(rows).to_have_count(50)
    page.goto(base + "/dashboard/dead?queue=deadpaged&task=bulk.many")
    expect(page.locator("[data-testid=jobs-summary]")).to_contain_text("50 dead letter(s) match (more on older")
    retry = page.locator("#retry-matching")
    expect(retry).to_have_text("Retry all that match")
    retry.click()
    expect(page.locator("dialog")).to_contain_text("every dead letter that matches this filter, on every page")
    page.locator("dialog button", has_text="Retry them").click()
    expect(page.locator(".toast")).to_contain_text("1,005 dead letter(s) queued again.")
    expect(page.locator(".empty")).to_contain_text("No dead letter matches this filter.")
    assert [j.task for j in app.list_jobs("dead", "deadpaged")] == ["bulk.other"]
    no_errors(page)
    page.context.close()
    app.close()


def test_pausing_a_queue_stops_a_running_worker_until_it_is_resumed(served):
    world, base, browser = served
    app = deferq.App(world.url, lease=5)
    ran: list[int] = []

    @app.task(name="console.tally", queue="tally")
    def tally(n: int) -> int:
        ran.append(n)
        return n

    running = Worker(app, WorkerConfig(queues=("tally",), concurrency=1, idle_wait=0.2, schedules=False))
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    page = signed_in(browser, base, world.admin)
    try:
        tally.enqueue(0)
        wait_until(lambda: ran == [0], 10, "the worker runs the queue's jobs")
        page.goto(base + "/dashboard/queues/tally")
        expect(page.locator(".state-succeeded .number")).to_have_text("1")
        expect(page.locator("#queue-paused")).to_be_hidden()
        page.click("#pause-queue")
        page.locator("dialog button", has_text="Pause it").click()
        expect(page.locator("#queue-paused")).to_be_visible()
        expect(page.locator("#pause-queue")).to_have_text("Resume")
        assert app.paused().keys() == {"tally"}
        for n in (1, 2, 3):
            tally.enqueue(n)
        expect(page.locator(".state-queued .number")).to_have_text("3")  # live, no reload
        page.wait_for_timeout(1500)  # the worker polls every 0.2 s: it had every chance to take them
        assert ran == [0] and thread.is_alive()
        expect(page.locator(".state-queued .number")).to_have_text("3")
        page.reload()
        expect(page.locator("#queue-paused")).to_be_visible()  # kept in the store
        page.click("#pause-queue")  # resume: no question asked
        expect(page.locator("#queue-paused")).to_be_hidden()
        expect(page.locator(".state-succeeded .number")).to_have_text("4", timeout=15_000)
        assert sorted(ran) == [0, 1, 2, 3]
        no_errors(page)
    finally:
        page.context.close()
        running.stop()
        thread.join(timeout=10)
        app.close()


def test_the_job_page_keeps_the_progress_of_an_ended_job(served):
    """docs/flow-control.md: the last progress report stays on a job after it ends, and
    its page shows it (the table of running jobs shows only running ones)."""
    world, base, browser = served
    page = signed_in(browser, base, world.admin)
    page.goto(f"{base}/dashboard/jobs/{world.ids['succeeded']}")
    expect(page.locator(".job-side")).to_contain_text("finished")
    panel = page.locator("section", has=page.locator("#job-progress"))
    expect(panel).to_be_visible()
    expect(panel).to_contain_text("100% · sent to 1 of 1")
    no_errors(page)
    page.context.close()


def test_a_remark_is_set_from_the_job_page_and_kept(served, worker):
    world, base, browser = served
    job_id = world.ids["succeeded"]
    page = signed_in(browser, base, world.admin)
    page.goto(f"{base}/dashboard/jobs/{job_id}")
    expect(page.locator(".job-side")).to_contain_text("last run by")
    expect(page.locator(".job-side")).to_contain_text(":4242:console-test")  # kept after it ended
    page.fill("textarea[name=remark]", "customer asked for a copy <b>twice</b>")
    page.wait_for_timeout(2500)  # a refresh passes: what is being typed stays
    expect(page.locator("textarea[name=remark]")).to_have_value("customer asked for a copy <b>twice</b>")
    page.click("#save-remark")
    expect(page.locator(".toast").last).to_have_text("Remark saved.")
    page.reload()
    expect(page.locator("textarea[name=remark]")).to_have_value("customer asked for a copy <b>twice</b>")
    assert worker.get(job_id).remark == "customer asked for a copy <b>twice</b>"
    assert page.locator("main b").count() == 0
    no_errors(page)
    page.context.close()


def test_the_stores_page_shows_each_shard_and_the_one_that_is_down(served, redis_shards_url):
    _, _, browser = served
    down = f"127.0.0.1:{free_port()}/0"
    url = redis_shards_url.replace("redis+shards://", f"redis+shards://{down},", 1)
    with running_server(url, "--no-auth") as base:
        page = signed_in(browser, base, "")
        page.goto(base + "/dashboard/stores")
        expect(page.locator(f'#store-parts tr[data-key="{down}"]')).to_contain_text("down")
        expect(page.locator('#store-parts td[data-health="up"]')).to_have_count(2)
        memory = re.compile(r"[0-9] [KMG]iB")  # each live shard's memory
        expect(page.locator("#store-parts tbody")).to_contain_text(memory)
        expect(page.locator(".card[data-health]")).to_contain_text("up")  # the others keep working
        expect(page.locator("dd.error-text")).to_contain_text(f"part(s) {down} cannot be reached")
        page.context.close()


def test_the_jobs_list_pages_by_cursor_and_searches_text(served):
    """Keyset pages (the cursor in the URL: reload and back keep the page), and a text
    search that says it went through the store's index. Last: it adds jobs to the world."""
    world, base, browser = served
    app = deferq.App(world.url)
    options = deferq.options.JobOptions(queue="paged")
    tagged = deferq.options.JobOptions(queue="paged", tags=("tenant:7", "import"))
    made = app.enqueue_many(
        [deferq.task.Call("shop.tasks.export", (f"batch-{n:03d}",), {}, tagged if n == 7 else options)
         for n in range(60)]
    )
    app.close()
    page = signed_in(browser, base, world.reader)
    page.goto(base + "/dashboard/jobs?queue=paged")
    rows = page.locator(".jobs tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first).to_have_attribute("data-key", made[-1].id)  # newest first
    page.click("text=Older →")
    expect(rows).to_have_count(10)
    assert "cursor=" in page.url
    page.reload()
    expect(rows).to_have_count(10)
    expect(rows.last).to_have_attribute("data-key", made[0].id)
    page.go_back()
    expect(rows).to_have_count(50)
    page.goto(base + "/dashboard/jobs?q=batch-042")
    expect(rows).to_have_count(1)
    expect(page.locator("[data-testid=jobs-summary]")).to_contain_text("through the store's index")
    page.goto(base + "/dashboard/jobs")
    page.fill("input[name=tag]", "tenant:7")  # a tag, exact: from the form, into the URL
    page.press("input[name=tag]", "Enter")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-key", made[7].id)
    expect(rows.first.locator(".tag")).to_have_text(["tenant:7", "import"])
    assert "tag=tenant%3A7" in page.url
    page.goto(base + f"/dashboard/jobs/{made[7].id}")  # the job's page links each of its tags
    page.click("a:text-is('import')")
    expect(rows).to_have_count(1)
    assert "tag=import" in page.url
    no_errors(page)
    page.context.close()


def jobs_waiting_for(app: deferq.App, queue: str, event: str, users: list[int],
                     welcome: bool = False) -> list[deferq.Job]:
    """Jobs that wait for `event` (keyed `user:N`), after a step "welcome" if asked, each
    run here until it waits."""
    @app.task(name=f"console.{queue}", queue=queue)
    def checkout(user: int) -> object:
        job = deferq.current_job()
        assert job is not None
        if welcome:
            job.step("welcome", lambda: {"mail": user})
        return job.wait_for("paid", event, f"user:{user}", 3600)

    jobs = [checkout.enqueue(user) for user in users]
    for leased in app.backend.reserve([queue], len(users), "console-test", 30, (0, 1, 2)):
        testing.run_here(app, leased)
    return jobs


def test_the_job_page_shows_its_durable_steps(served):
    """A job that ran a step and waits for an event: its steps as a timeline (the step
    done with its result, the wait with its event and key); then gone, as the job."""
    world, base, browser = served
    app = deferq.App(world.url)
    [job] = jobs_waiting_for(app, "steps-demo", "payment", [7], welcome=True)
    try:
        page = signed_in(browser, base, world.reader, width=390)
        page.goto(f"{base}/dashboard/jobs/{job.id}")
        steps = page.locator("#job-steps li")
        expect(steps).to_have_count(2)
        expect(steps.nth(0)).to_contain_text("welcome")
        expect(steps.nth(0)).to_contain_text('{"mail":7}')
        expect(steps.nth(1)).to_contain_text("waiting")
        expect(steps.nth(1)).to_contain_text("payment user:7")
        expect(page.locator(".page-head .badge").first).to_have_text("waiting")  # scheduled, in a wait
        no_errors(page)
        fits(page)
        page.context.close()
    finally:
        app.cancel(job.id)
        app.backend.delete(job.id)
        app.close()


def test_the_job_page_shows_its_child_jobs(served):
    """A job waiting for its child jobs (`job.gather`): the gather on its timeline with how
    many ended, its children linked under Workflow, and a child's page links its parent."""
    world, base, browser = served
    app = deferq.App(world.url)

    @app.task(name="console.child", queue="children-demo-kids")
    def child(n: int) -> int:
        return n

    @app.task(name="console.fan_out", queue="children-demo")
    def fan_out() -> list[int]:
        job = deferq.current_job()
        assert job is not None
        return job.gather("fan-out", [child.call(n) for n in range(3)])

    parent = fan_out.enqueue()
    for leased in app.backend.reserve(["children-demo"], 1, "console-test", 30, (0, 1, 2)):
        testing.run_here(app, leased)
    [first, *_] = app.children(parent.id)
    for leased in app.backend.reserve(["children-demo-kids"], 1, "console-test", 30, (0, 1, 2)):
        testing.run_here(app, leased)
    try:
        page = signed_in(browser, base, world.reader, width=390)
        page.goto(f"{base}/dashboard/jobs/{parent.id}")
        steps = page.locator("#job-steps li")
        expect(steps).to_have_count(1)
        expect(steps.nth(0)).to_contain_text("fan-out")
        expect(steps.nth(0)).to_contain_text("1 of 3 child jobs ended")
        expect(page.locator("#job-children li")).to_have_count(3)
        page.locator(f'#job-children a[href="/dashboard/jobs/{first["id"]}"]').click()
        expect(page.locator(f'#job-parents a[href="/dashboard/jobs/{parent.id}"]')).to_have_count(1)
        no_errors(page)
        fits(page)
        page.context.close()
    finally:
        app.cancel(parent.id)
        for job_id in [parent.id, *(row["id"] for row in app.children(parent.id))]:
            app.backend.delete(job_id)
        app.close()


def test_the_events_page_lists_the_kept_events(served):
    """Events kept for durable waits, newest first: name, key, when, how many jobs each
    woke, the size of its data; at 1280 px and at 390 px."""
    world, base, browser = served
    app = deferq.App(world.url)
    jobs = jobs_waiting_for(app, "events-demo", "console-paid", [8, 8])
    assert app.send_event("console-paid", "user:8", {"amount": 12, "note": "x" * 2000}) == 2
    app.send_event("console-shipped", "order:1050", None)
    try:
        for width in (1280, 390):
            page = signed_in(browser, base, world.reader, width=width)
            page.goto(f"{base}/dashboard/events")
            rows = page.locator("#events tbody tr")
            expect(rows.first).to_contain_text("console-shipped")
            paid = rows.filter(has_text="console-paid")
            expect(paid).to_contain_text("user:8")
            expect(paid.locator("td").nth(3)).to_have_text("2")
            expect(paid.locator("td").nth(4)).to_have_text("2.0 KiB")
            expect(page.locator("#nav a", has_text="Events")).to_have_attribute("aria-current", "page")
            no_errors(page)
            fits(page)
            page.context.close()
    finally:
        for job in jobs:
            app.cancel(job.id)
            app.backend.delete(job.id)
        app.backend.kv_delete("deferq.events", "console-paid\tuser:8")
        app.backend.kv_delete("deferq.events", "console-shipped\torder:1050")
        app.close()


def test_the_periodic_form_says_what_a_cron_means_and_a_broken_record_shows(served):
    with periodic_page(served, served[0].admin) as (store, page):
        good = orjson.loads(store.backend.kv_get("schedules", "refresh-rates"))
        store.backend.kv_put("schedules", "digest", orjson.dumps(  # as another version might have written it
            {**good, "schedule": {**good["schedule"], "name": "digest", "cron": "0 0 31 2 *"}}))
        page.reload()
        expect(page.locator('#broken-schedules li[data-name="digest"]')).to_contain_text("never fires")
        expect(page.locator('#periodic tr[data-key="refresh-rates"]')).to_be_visible()  # the others still show
        page.click("#add-schedule")
        page.fill('input[name="cron"]', "*/10 * * * * *")
        expect(page.locator("#cron-meaning")).to_have_text(re.compile(
            r"^\*/10 \* \* \* \* \* \(UTC\): next \S+ \d\d:\d\d:\d0\+00:00, \d\d:\d\d:\d0, \d\d:\d\d:\d0$"))
        page.fill('input[name="cron"]', "0 0 31 2 *")
        expect(page.locator("#cron-meaning")).to_contain_text("never fires")
        no_errors(page, 422)
