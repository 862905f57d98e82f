"""Acting on jobs from the console, in Debian's Chromium against a real `deferq serve`, on
SQLite and on Redis, at 1280 px and 390 px: stopping a running job with a reason (and
its live progress bar), running a scheduled job now, deleting one row, retrying checked
rows at once, the retrying filter, a worker ordered quiet then stopped; what a reader
sees (no action, no admin-only page in the nav), and the phone's nav saying that it scrolls."""

from __future__ import annotations

import itertools
import re
import threading
from typing import Any

import pytest
from playwright.sync_api import expect

import deferq
from deferq import testing
from deferq.backends.base import Outcome
from deferq.options import JobOptions
from deferq.worker import Worker, WorkerConfig
from tests.support.console_world import served_worlds, signed_in
from tests.support.server_helpers import wait_until

# Its tests share a module fixture: one xdist worker runs them all and builds it once.
pytestmark = pytest.mark.xdist_group("console_actions")

TIMEOUT = 10_000  # ms for anything a page should show
WORKER = "vm:77:console-actions"
WIDTHS = (1280, 390)
fresh = itertools.count()


worlds, served = served_worlds("actions", TIMEOUT)  # the module's fixtures: served[sqlite|redis]


def queue_of_its_own(app: deferq.App, task: str, count: int = 1, **options: Any) -> tuple[str, list[str]]:
    queue = f"q{next(fresh)}"
    return queue, [app.enqueue(task, [n], queue=queue, **options).id for n in range(count)]


def running(app: deferq.App, progress: float) -> Any:
    """A job leased by a worker (as a worker would), having reported `progress`."""
    queue, _ = queue_of_its_own(app, "shop.tasks.render_invoice")
    (job,) = app.backend.reserve([queue], 1, WORKER, 300.0, (0, 1, 2))
    app.backend.record_progress([job.evolve(progress=progress, progress_message="page 3 of 10")])
    return job


def running_job_page(served: Any, token: str, width: int, progress: float) -> tuple[Any, Any]:
    """The page of a running job that reported `progress`, its bar filled."""
    _, base, browser, app = served
    job = running(app, progress)
    page = signed_in(browser, base, token, width=width)
    page.goto(f"{base}/dashboard/jobs/{job.id}")
    expect(page.locator("#job-progress")).to_have_attribute("value", str(round(progress * 100)))
    return page, job


@pytest.mark.parametrize("width", WIDTHS)
def test_a_running_job_shows_live_progress_and_is_stopped_with_a_reason(served, width):
    _, base, _, app = served
    page, job = running_job_page(served, served[0].admin, width, 0.3)
    expect(page.locator(".job-main .progress-text")).to_have_text("30% · page 3 of 10")
    app.backend.record_progress([job.evolve(progress=0.8, progress_message="page 8 of 10")])
    expect(page.locator(".job-main .progress-text")).to_have_text("80% · page 8 of 10")  # the poll brings it
    page.goto(f"{base}/dashboard/queues/{job.queue}?state=active")
    expect(page.locator(f'.jobs tr[data-key="{job.id}"] .progress-text')).to_have_text("80%")
    page.goto(f"{base}/dashboard/jobs/{job.id}")
    page.locator('button[data-action="cancel"]').click()
    expect(page.locator("dialog")).to_contain_text("ends cancelled at its worker's next heartbeat")
    page.fill('dialog input[name="reason"]', "the printer is gone")
    page.locator("dialog button", has_text="Stop the job").click()
    expect(page.locator("#cancel-requested")).to_be_visible()
    expect(page.locator('button[data-action="cancel"]')).to_have_count(0)
    stored = app.get(job.id)
    assert stored.state == "active" and stored.cancel_requested
    assert "from the console: the printer is gone" in stored.remark and "(console tests)" in stored.remark
    assert app.backend.heartbeat([job], 300.0).cancel_requested == {job.id}  # its worker hears it
    assert app.backend.settle([Outcome(job, "cancelled")]) == [True]
    expect(page.locator(".page-head .badge")).to_have_text("cancelled")
    expect(page.locator("#cancel-requested")).to_be_hidden()
    assert page.errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_run_now_and_a_rows_delete(served, width):
    world, base, browser, app = served
    queue, (later_id,) = queue_of_its_own(app, "shop.tasks.remind_expiry", delay=86400)
    later = app.get(later_id)
    done = app.enqueue("shop.tasks.send_receipt", [1], queue=queue)
    (leased,) = app.backend.reserve([queue], 1, WORKER, 300.0, (0, 1, 2))
    assert leased.id == done.id and app.backend.settle([Outcome(leased, "succeeded")]) == [True]
    page = signed_in(browser, base, world.admin, width=width)
    page.goto(f"{base}/dashboard/jobs?queue={queue}")
    page.locator(f'tr[data-key="{later.id}"] button[data-action="run-now"]').click()
    expect(page.locator(f'tr[data-key="{later.id}"] .badge')).to_have_text("queued")
    assert app.get(later.id).state == "queued"
    page.locator(f'tr[data-key="{done.id}"] button[data-action="delete"]').click()
    page.locator("dialog button", has_text="Delete it").click()
    expect(page.locator(f'tr[data-key="{done.id}"]')).to_have_count(0)
    assert app.get(done.id) is None
    assert page.errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_checked_rows_are_retried_at_once(served, width):
    world, base, browser, app = served
    queue, ids = queue_of_its_own(app, "shop.tasks.charge_card", 3)
    for job in app.backend.reserve([queue], 3, WORKER, 300.0, (0, 1, 2)):
        app.backend.settle([Outcome(job, "dead", error="card declined")])
    page = signed_in(browser, base, world.admin, width=width)
    page.goto(f"{base}/dashboard/jobs?state=dead&queue={queue}")
    expect(page.locator(".jobs tbody tr")).to_have_count(3)
    expect(page.locator(".bulk")).to_be_hidden()
    for job_id in ids[:2]:
        page.locator(f'tr[data-key="{job_id}"] input.pick-job').check()
    expect(page.locator(".bulk-count")).to_have_text("2 selected.")
    page.locator('.bulk button[data-bulk="retry"]').click()
    page.locator("dialog button", has_text="Retry them").click()
    expect(page.locator(".jobs tbody tr")).to_have_count(1)
    assert [app.get(i).state for i in ids] == ["queued", "queued", "dead"]
    page.locator("input.select-page").check()  # every row on the page, then every job that matches
    page.locator("#select-matching").click()
    expect(page.locator(".bulk-count")).to_have_text("Every job that matches the filter is selected.")
    page.locator('.bulk button[data-bulk="delete"]').click()
    page.fill('dialog input[aria-label="type delete"]', "delete")
    page.locator("dialog button", has_text="Delete them").click()
    expect(page.locator(".jobs tbody tr")).to_have_count(0)
    assert app.get(ids[2]) is None and app.get(ids[0]) is not None
    assert page.errors == []


def test_retrying_jobs_have_a_card_and_a_filter(served):
    world, base, browser, _ = served
    page = signed_in(browser, base, world.reader)
    page.goto(f"{base}/dashboard/")
    expect(page.locator('.state-card[data-state="retrying"] .number')).not_to_have_text("–")
    page.locator('.state-card[data-state="retrying"]').click()
    expect(page).to_have_url(f"{base}/dashboard/jobs?state=retrying")
    row = page.locator(f'.jobs tr[data-key="{world.ids["retrying"]}"]')
    expect(row.locator(".tag")).to_have_text(["vip", "eu"])
    expect(row.locator("td.args")).to_have_text('1044, amount=12.5, currency="EUR"')
    expect(page.locator(f'.jobs tr[data-key="{world.ids["scheduled"]}"]')).to_have_count(0)
    assert page.errors == []


@pytest.mark.parametrize("width", WIDTHS)
def test_a_reader_sees_no_action_and_no_admin_page(served, width):
    world, base, _, _ = served
    page, job = running_job_page(served, world.reader, width, 0.5)
    expect(page.locator(".job-actions button")).to_have_count(0)
    expect(page.locator("#nav a")).to_have_text(
        ["Overview", "Jobs", "Dead", "Workers", "Periodic", "Events", "Limits", "Stores"])
    page.goto(f"{base}/dashboard/jobs")
    expect(page.locator(".jobs tbody tr").first).to_be_visible()
    expect(page.locator(".jobs input[type=checkbox]")).to_have_count(0)
    expect(page.locator(".jobs button")).to_have_count(0)
    refused = page.request.delete(f"{base}/v1/jobs/{job.id}?via=console",
                                  headers={"authorization": f"Bearer {world.reader}"})
    assert refused.status == 403
    assert page.errors == []


def test_the_phone_nav_shows_that_it_scrolls(served):
    world, base, browser, _ = served
    page = signed_in(browser, base, world.admin, width=390, height=844)
    page.goto(f"{base}/dashboard/")
    expect(page.locator("#nav-right")).to_be_visible()
    expect(page.locator("#nav-left")).to_be_hidden()
    page.locator('#nav a[data-entry="tokens"]').focus()  # a keyboard reaches the last entry
    expect(page.locator("#nav-left")).to_be_visible()
    expect(page.locator("#nav-right")).to_be_hidden()
    page.locator("#nav-left").click()  # a tap on the arrow scrolls back
    expect(page.locator("#nav-right")).to_be_visible()
    wide = signed_in(browser, base, world.admin, width=1280)
    wide.goto(f"{base}/dashboard/")
    expect(wide.locator("#nav a")).to_have_count(11)
    expect(wide.locator("#nav-right")).to_be_hidden()
    assert page.errors == [] and wide.errors == []


def test_a_worker_ordered_quiet_finishes_its_job_and_takes_no_new_one_then_stops(served):
    world, base, browser, app = served
    queue = f"q{next(fresh)}"
    worker_app = deferq.App(world.url, lease=1.5)  # a heartbeat every half second
    release = threading.Event()

    @worker_app.task(name="console.slow", queue=queue)
    def slow(n: int) -> int:
        release.wait(20)
        return n

    name = f"vm:{next(fresh)}:quiet-test"
    worker = Worker(worker_app, WorkerConfig(queues=(queue,), concurrency=2, name=name, idle_wait=0.2))
    thread = threading.Thread(target=worker.run, daemon=True)
    first = slow.enqueue(1)
    thread.start()
    try:
        wait_until(lambda: app.get(first.id).state == "active", 10, "the worker took the first job")
        page = signed_in(browser, base, world.admin)
        page.goto(f"{base}/dashboard/workers")
        row = page.locator(f'#workers tr[data-key="{name}"]')
        row.locator('button[data-order="quiet"]').click()
        page.locator("dialog button", has_text="Quiet").click()
        expect(row.locator(".flag")).to_have_text("quiet")  # it heard the order at a heartbeat
        second = slow.enqueue(2)
        release.set()
        wait_until(lambda: app.get(first.id).state == "succeeded", 10, "its running job finished")
        expect(row.locator(".flag")).to_have_text("quiet")  # a heartbeat after the job settled
        assert app.get(second.id).state == "queued"  # it took no new job
        row.locator('button[data-order="stop"]').click()
        page.locator("dialog button", has_text="Stop").click()
        thread.join(10)
        assert not thread.is_alive()
        expect(row).to_have_count(0)  # its record goes with it
        assert page.errors == []
    finally:
        release.set()
        worker.stop()
        thread.join(10)
        worker_app.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_batch_page_and_a_chains_graph(served, width):
    world, base, browser, _ = served
    page = signed_in(browser, base, world.reader, width=width)
    page.goto(f"{base}/dashboard/jobs/{world.ids['batch_member']}")
    page.locator("#batch-link").click()
    expect(page).to_have_url(f"{base}/dashboard/batches/{world.ids['batch']}")
    expect(page.locator("#batch-counts")).to_contain_text("2 of 3 finished")
    expect(page.locator("#batch-members li .badge")).to_have_text(["succeeded", "dead", "queued"])
    expect(page.locator("#batch-bar .part")).to_have_count(3)  # succeeded, dead, pending
    page.locator("#batch-callbacks a").click()
    expect(page).to_have_url(f"{base}/dashboard/jobs/{world.ids['batch_callback']}")
    page.goto(f"{base}/dashboard/jobs/{world.ids['chain_middle']}")
    graph = page.locator("#job-graph")
    expect(graph.locator(".node .badge")).to_have_text(["succeeded", "queued", "blocked"])
    graph.locator("#job-children a").click()
    expect(page).to_have_url(f"{base}/dashboard/jobs/{world.ids['chain_last']}")
    width_now = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width_now[0] <= width_now[1]
    assert page.errors == []


def test_a_finished_durable_job_is_retried_from_a_step_of_its_timeline(served):
    """Each step of a dead job's timeline offers "Retry from here" to an admin: the job is
    queued again with the steps before that one kept, those from it on dropped."""
    world, base, _, app = served
    queue = f"q{next(fresh)}"

    @app.task(name=f"console.{queue}", queue=queue, max_attempts=1)
    def three_steps() -> None:
        job = deferq.current_job()
        assert job is not None
        for name in ("fetch", "render"):
            job.step(name, str, name)
        job.step("send", str, "send", undo=print)  # its undo ran: the row says so
        raise RuntimeError("the mail server refused it")

    job = three_steps.enqueue()
    [leased] = app.backend.reserve([queue], 1, WORKER, 30.0, (0, 1, 2))
    testing.run_here(app, leased)
    page = signed_in(served[2], base, world.admin, width=1280)
    page.goto(f"{base}/dashboard/jobs/{job.id}")
    expect(page.locator("#job-steps li")).to_have_count(3)
    expect(page.locator("#job-steps li").nth(2)).to_contain_text("undo done")
    page.locator('#job-steps button[data-step="render"]').click()
    expect(page.locator("dialog")).to_contain_text("render and every step after it run anew")
    page.locator("dialog button", has_text="Retry from here").click()
    expect(page.locator("#job-steps li")).to_have_count(1)  # fetch kept; render and send dropped
    expect(page.locator(".page-head .badge").first).to_have_text("queued")
    expect(page.locator('#job-steps button[data-action="retry-from"]')).to_have_count(0)  # not finished now
    assert [step["name"] for step in app.steps(job.id)] == ["fetch"]
    reader = signed_in(served[2], base, world.reader, width=390)
    app.cancel(job.id)
    reader.goto(f"{base}/dashboard/jobs/{job.id}")
    expect(reader.locator("#job-steps li")).to_have_count(1)
    expect(reader.locator('#job-steps button[data-action="retry-from"]')).to_have_count(0)  # admins only
    assert page.errors == [] and reader.errors == []
    for opened in (page, reader):
        opened.context.close()


def test_a_server_without_the_key_shows_encrypted_values_and_their_size(served):
    """Jobs an App encrypted (deferq.Encryption): this `deferq serve` has no key, so the
    job's page and the jobs list say "encrypted (N bytes)" and never show the value."""
    from deferq.encryption import new_key

    world, base, browser, app = served
    keyed = deferq.App(app.url, encryption=deferq.Encryption(keys={"k": new_key()}))
    ssn = f"{next(fresh):03d}-45-6789"
    queue = f"q{next(fresh)}"
    job = keyed.enqueue("shop.tasks.render_invoice", [{"ssn": ssn}], queue=queue)
    (leased,) = app.backend.reserve([queue], 1, WORKER, 300.0, (0, 1, 2))
    done = keyed.registry.chain.to_store([Outcome(leased, "succeeded", result={"seen": ssn})])
    assert app.backend.settle(done) == [True]
    page = signed_in(browser, base, world.reader)
    page.goto(f"{base}/dashboard/jobs/{job.id}")
    expect(page.locator("#job-args")).to_have_text(re.compile(r"^encrypted \(\d+ bytes\)$"))
    expect(page.locator("#job-result")).to_contain_text("encrypted (")
    assert ssn not in page.content()
    page.goto(f"{base}/dashboard/jobs?queue={queue}")
    expect(page.locator("table.jobs td.args").first).to_contain_text("encrypted (")
    assert ssn not in page.content()
    assert keyed.get(job.id).result == {"seen": ssn}  # with the key: all of it
    assert page.errors == []
    page.context.close()

    # a schedule's arguments too: shown by size, and not editable without the key
    name = f"sealed-{next(fresh)}"
    keyed.schedules.add(name, deferq.Call("shop.tasks.render_invoice", ({"ssn": ssn},), {}, JobOptions()),
                        every=3600)
    try:
        for width in (1280, 390):
            page = signed_in(browser, base, world.admin, width=width)
            page.goto(f"{base}/dashboard/periodic")
            row = page.locator(f'#periodic tr[data-key="{name}"]')
            expect(row).to_contain_text(re.compile(r"arguments encrypted \(\d+ bytes\)"))
            assert ssn not in page.content()
            row.locator('button[data-action="edit"]').click()
            expect(page.locator('input[name="args"]')).to_be_disabled()
            page.click("#save-schedule")
            expect(page.locator(".message.error")).to_contain_text("this server has not the key")
            assert page.errors == []
            page.context.close()
        assert keyed.schedules[name].schedule.args == ({"ssn": ssn},)  # nothing changed
    finally:
        keyed.schedules.remove(name)
        keyed.close()
