"""The seed's overload rule (S3-4): past --max-inflight a request is refused at once
(refuse) or waits in a bounded queue whose oldest is answered busy when it is full
(shed-oldest); server processes grow under a waiting queue and shrink when calm."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.overload import processes_under
from hypothesis import given, settings
from hypothesis import strategies as st

import deferq
from deferq.cli.scaling import Scaler
from deferq.server.http.overload import Admission
from tests.support.server_helpers import _env, _stop, free_port, running_server, wait_until

# -- the admission of one process, without a server -------------------------------------------


async def settle() -> None:
    """Let every request whose turn was decided run to its answer (a few loop turns)."""
    for _ in range(10):
        await asyncio.sleep(0)


def burst(admission: Admission, arrivals: int) -> list[asyncio.Task[str | None]]:
    """Requests past the free slots, started one after another in this order."""
    return [asyncio.ensure_future(admission.wait_turn()) for _ in range(arrivals)]


def test_shed_oldest_serves_the_first_and_the_newest() -> None:
    async def scenario() -> list[str | None]:
        admission = Admission(2, "shed-oldest", max_waiting=4)
        assert admission.try_enter() and admission.try_enter() and not admission.try_enter()
        waiting = burst(admission, 8)
        await settle()  # each has queued (or shed the oldest) in arrival order
        assert len(admission.waiting) == 4
        for _ in range(2 + 4):  # the two first requests answered, then each admitted one
            admission.leave()
            await settle()
        assert admission.inflight == 0 and not admission.waiting
        return await asyncio.gather(*waiting)

    assert asyncio.run(scenario()) == ["full"] * 4 + [None] * 4


def test_refuse_answers_busy_at_once_and_waits_for_nothing() -> None:
    async def scenario() -> str | None:
        admission = Admission(1, "refuse", max_waiting=4)
        assert admission.try_enter()
        return await admission.wait_turn()

    assert asyncio.run(scenario()) == "refused"


def test_a_request_that_waited_past_max_wait_is_answered_busy() -> None:
    async def scenario() -> tuple[str | None, int]:
        admission = Admission(1, "shed-oldest", max_waiting=4, max_wait=0.05)
        assert admission.try_enter()
        shed = await admission.wait_turn()
        return shed, len(admission.waiting)

    assert asyncio.run(scenario()) == ("waited", 0)


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(1, 4), max_waiting=st.integers(1, 5),
       steps=st.lists(st.sampled_from(["arrive", "leave"]), max_size=60))
def test_admission_keeps_its_bounds_and_the_order_of_arrival(limit: int, max_waiting: int,
                                                              steps: list[str]) -> None:
    """Whatever arrives and leaves: never more in flight than the limit nor more waiting
    than the bound; waiting requests are admitted in the order they came; each request
    ends admitted or busy exactly once; a slot is never left free while one waits."""

    async def scenario() -> None:
        admission = Admission(limit, "shed-oldest", max_waiting=max_waiting)
        holding = 0
        queued: list[tuple[int, asyncio.Task[str | None]]] = []
        admitted: list[int] = []
        for number, step in enumerate(steps):
            if step == "arrive":
                if admission.try_enter():
                    holding += 1
                else:
                    queued.append((number, asyncio.ensure_future(admission.wait_turn())))
            elif holding:
                admission.leave()
                holding -= 1
            await settle()
            for arrival, task in list(queued):
                if task.done():
                    queued.remove((arrival, task))
                    if task.result() is None:
                        admitted.append(arrival)
                        holding += 1
            assert admission.inflight <= limit and len(admission.waiting) <= max_waiting
            assert admission.inflight == holding
            assert not admission.waiting or admission.inflight == limit
        assert admitted == sorted(admitted)
        for _, task in queued:
            task.cancel()

    asyncio.run(scenario())


# -- the scaler's decisions ---------------------------------------------------------------------


def test_the_scaler_grows_one_at_a_time_under_pressure_and_shrinks_when_calm() -> None:
    scaler = Scaler(1, 3, calm=10, grow_after=2)
    assert [scaler.step(t, 5, 0) for t in (0, 1, 2, 3, 4, 5, 6)] == [0, 0, 1, 0, 1, 0, 0]
    assert scaler.processes == 3  # never past the top
    assert [scaler.step(t, 0, 0) for t in (7, 16, 17, 26, 27, 40)] == [0, 0, -1, 0, -1, 0]
    assert scaler.processes == 1  # never below the bottom


def test_busy_answers_press_like_a_waiting_queue() -> None:
    scaler = Scaler(2, 4, calm=5, grow_after=1)
    assert scaler.step(0, 0, 100) == 0  # the first reading only sets where the count stands
    assert [scaler.step(t, 0, 100 + t) for t in (1, 2)] == [0, 1]
    assert scaler.step(3, 0, 102) == 0 and scaler.processes == 3  # no new refusal: calm from now


def test_bursts_a_second_apart_are_one_spell_of_pressure() -> None:
    scaler = Scaler(1, 4, calm=30, grow_after=2)
    readings = [(0.0, 3), (0.5, 0), (1.0, 3), (1.5, 0), (2.0, 3), (2.5, 0), (3.0, 3)]
    assert [scaler.step(t, waiting, 0) for t, waiting in readings] == [0, 0, 0, 0, 1, 0, 0]
    assert scaler.step(5.0, 3, 0) == 0  # 2 s without pressure: a new spell starts here
    assert scaler.step(6.5, 3, 0) == 0 and scaler.step(7.0, 3, 0) == 1


# -- a real server ------------------------------------------------------------------------------


def hold_slot(port: int) -> socket.socket:
    """A POST /v1/jobs whose body is sent only in part: it holds one slot until finished."""
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 40\r\n\r\n{\"task\": ")
    return slow


def finish(slow: socket.socket, key: str) -> int:
    """Send the rest of a held request's body; its status."""
    rest = f'"t", "key": "{key}"}}'.encode()
    slow.sendall(rest.ljust(40 - len(b'{"task": ')))
    answer = slow.recv(4096)
    slow.close()
    return int(answer.split(b" ", 2)[1])


def queued_behind(load: dict[str, Any], arrived: int) -> bool:
    """The load once `arrived` requests came past two busy slots, with four places to wait."""
    return bool(load["waiting"] == min(arrived, 4) and load["shed"]["full"] == max(0, arrived - 4))


def test_shed_oldest_on_a_server_serves_the_first_two_and_the_last_four(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/deferq.db"
    options = ["--no-auth", "--overload", "shed-oldest", "--max-inflight", "2", "--max-waiting", "4"]
    with running_server(url, *options) as base:
        port = int(base.rsplit(":", 1)[1])
        client = httpx.Client(base_url=base, trust_env=False, timeout=10)
        load = lambda: client.get("/v1/server").json()  # noqa: E731 - never waits behind the load
        held = [hold_slot(port) for _ in range(2)]
        wait_until(lambda: load()["inflight"] == 2, 10, "the two first requests in flight")
        answers: dict[int, httpx.Response] = {}

        def send(number: int) -> None:
            with httpx.Client(base_url=base, trust_env=False, timeout=10) as own:
                answers[number] = own.post("/v1/jobs", json={"task": "t", "key": f"burst-{number}"})

        threads = []
        for number in range(1, 9):  # staggered: each is waiting (or has shed the oldest) before the next
            threads.append(threading.Thread(target=send, args=(number,)))
            threads[-1].start()
            wait_until(lambda n=number: queued_behind(load(), n), 10, f"request {number} waiting")
        assert [finish(slow, f"slow-{i}") for i, slow in enumerate(held)] == [201, 201]
        for thread in threads:
            thread.join(10)
        statuses = [answers[n].status_code for n in range(1, 9)]
        assert statuses == [503] * 4 + [201] * 4
        busy = answers[1]
        assert busy.json()["error"]["code"] == "busy" and busy.headers["retry-after"] == "1"
        metrics = client.get("/metrics").text
        assert 'deferq_http_shed_total{reason="full"} 4.0' in metrics
    app = deferq.App(url)
    try:
        kept = {n: app.get_by_key(f"burst-{n}") is not None for n in range(1, 9)}
        assert kept == {n: n > 4 for n in range(1, 9)}, "a request answered busy stored nothing"
        assert all(app.get_by_key(f"slow-{i}") for i in range(2))
    finally:
        app.close()


def test_refused_settings_are_one_sentence(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/deferq.db"
    for options, says in [(["--overload", "shed-oldest", "--max-inflight", "2"], "needs --max-inflight"),
                          (["--max-waiting", "3"], "only mean something with --overload shed-oldest"),
                          (["--workers", "1..4"], "give --max-inflight too"),
                          (["--workers", "3..2"], "top must be at least its bottom")]:
        done = subprocess.run([sys.executable, "-m", "deferq", "serve", "--url", url, "--no-auth", *options],
                              env=_env(), capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and says in done.stderr, (options, done.stderr)
        assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_server_processes_grow_while_requests_wait_and_shrink_when_calm(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "deferq", "serve", "--url", f"sqlite:///{tmp_path}/deferq.db",
               "--port", str(port), "--no-auth", "--workers", "1..2", "--overload", "shed-oldest",
               "--max-inflight", "1", "--max-waiting", "8", "--calm", "2"]
    process = subprocess.Popen(command, env=_env(), stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stderr.readline, "")), daemon=True)
    reader.start()
    base = f"http://127.0.0.1:{port}"
    server_processes = lambda: processes_under(process.pid)  # noqa: E731
    try:
        wait_until(lambda: _answers(base), 30, "deferq serve answering")
        assert server_processes() == 1
        slow = hold_slot(port)  # one process: it holds that process's only slot
        waiter = threading.Thread(target=lambda: httpx.get(base + "/v1/queues", timeout=30, trust_env=False))
        waiter.start()
        wait_until(lambda: any("server processes 1 -> 2" in line for line in lines), 20, "a second process")
        wait_until(lambda: server_processes() == 2, 20, "the second process started")
        assert finish(slow, "slow") == 201
        waiter.join(20)
        wait_until(lambda: any("server processes 2 -> 1" in line for line in lines), 20, "back to one")
        wait_until(lambda: server_processes() == 1, 20, "the second process retired")
    finally:
        _stop(process)
    assert process.returncode == 0 or process.returncode == -signal.SIGTERM, process.returncode


def _answers(base: str) -> Any:
    try:
        return httpx.get(base + "/healthz", timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


if os.name != "posix":  # pragma: no cover - /proc and signals
    pytest.skip("POSIX only", allow_module_level=True)


def test_the_console_overview_shows_the_server_load(tmp_path: Path) -> None:
    from playwright.sync_api import expect

    from tests.support.console_world import chromium, signed_in

    options = ["--no-auth", "--overload", "shed-oldest", "--max-inflight", "1", "--max-waiting", "1"]
    with running_server(f"sqlite:///{tmp_path}/deferq.db", *options) as base, chromium() as browser:
        port = int(base.rsplit(":", 1)[1])
        client = httpx.Client(base_url=base, trust_env=False, timeout=10)
        slow = hold_slot(port)
        wait_until(lambda: client.get("/v1/server").json()["inflight"] == 1, 10, "the slot held")
        answers: list[int] = []
        first = threading.Thread(target=lambda: answers.append(httpx.get(base + "/v1/queues", trust_env=False,
                                                                         timeout=10).status_code))
        first.start()
        wait_until(lambda: client.get("/v1/server").json()["waiting"] == 1, 10, "one waiting")
        second = threading.Thread(target=lambda: httpx.get(base + "/v1/queues", trust_env=False, timeout=10))
        second.start()  # the queue holds one: the first is answered busy
        first.join(10)
        assert answers == [503]
        assert finish(slow, "slow") == 201
        second.join(10)
        page = signed_in(browser, base, "")
        page.goto(base + "/dashboard/")
        card = page.locator(".card", has_text="server load")
        # the console's own requests count too: with one slot, some of them wait or are shed as well
        expect(card).to_contain_text(re.compile(r"in flight · shed-oldest · \d+ waiting · [1-9]\d* busy"))
        expect(card.locator(".number")).to_contain_text("/1")
        expect(card).to_have_attribute("data-health", "warn")
        # the browser logs each 503 it got; nothing else may go wrong on the page
        assert [error for error in page.errors if "status of 503" not in error] == []
        page.context.close()
