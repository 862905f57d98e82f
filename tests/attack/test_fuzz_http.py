"""The HTTP API in sequences (tests/attack/hostile.py): a state machine enqueues, reads,
cancels and retries jobs; puts, reads, pauses and deletes schedules; sets, pauses,
resumes and clears limits; sends events — with hostile values in every field and path.
Every answer is a 2xx or a 4xx with one sentence, never a 5xx; a refused request stores
nothing; and the listings (jobs, schedules, limits, events, queues: the console's pages)
answer after every step. The one-request fuzz of the OpenAPI document is
tests/server/test_server_schema.py."""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule, run_state_machine_as_test

import deferq
from deferq.server import ServerConfig, create_app
from tests.attack.hostile import (
    HOSTILE_NUMBER,
    HOSTILE_TEXT,
    JSON_VALUE,
    LONG,
    NAMEISH,
    budget,
    maybe,
    one_sentence,
    store_snapshot,
    stored_since,
)
from tests.conftest import need_service
from tests.support.server_helpers import TestClient
from tests.support.stores.redis import delete_prefix, shared_answers, shared_url, unique_prefix

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import starlette.testclient  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # reprs of 10k strings
# Each sequence on a store of its own (a failure must replay the same): a fresh SQLite file,
# or under ATTACK_LONG also a fresh key prefix on Redis. The stores' differences are the
# store differential's (test_store_differential.py).
STORES = ["sqlite", "redis"] if LONG else ["sqlite"]
READS = ["/v1/jobs", "/v1/schedules", "/v1/limits", "/v1/events", "/v1/queues", "/v1/dead"]

NUMBER = st.one_of(HOSTILE_NUMBER.filter(lambda v: not isinstance(v, str)), st.integers(0, 10**7))
JOB = st.fixed_dictionaries({"task": st.one_of(st.just("attack.plain"), NAMEISH)}, optional={
    "args": st.lists(JSON_VALUE, max_size=3), "kwargs": st.dictionaries(HOSTILE_TEXT, JSON_VALUE, max_size=2),
    "key": maybe(NAMEISH), "delay_ms": NUMBER, "queue": NAMEISH, "priority": st.one_of(
        st.sampled_from(["high", "normal", "low", "HIGH"]), NUMBER), "max_attempts": NUMBER, "ttr": NUMBER,
    "remark": maybe(HOSTILE_TEXT), "tags": st.lists(HOSTILE_TEXT, max_size=3), "at": st.one_of(
        NUMBER, HOSTILE_TEXT, st.sampled_from(["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z",
                                               "2030-01-01T00:00:00"])),
    "expires": st.one_of(NUMBER, HOSTILE_TEXT),
    "on_conflict": st.sampled_from(["ignore", "replace", "debounce", "x"]),
    "unique_for_ms": NUMBER, "fair_key": NAMEISH, "fair_weight": NUMBER,
})
CRON = st.one_of(st.sampled_from(["*/5 * * * *", "0 9 * * 1-5", "*/10 * * * * *", "0 0 31 2 *", "* * * * * * *",
                                  "0 0 30 2 *", "61 * * * *"]), HOSTILE_TEXT)
SCHEDULE = st.one_of(
    st.fixed_dictionaries({"task": st.just("attack.plain"), "cron": CRON}, optional={
        "tz": st.one_of(st.sampled_from(["UTC", "Europe/Berlin", "Etc/GMT+14"]), HOSTILE_TEXT),
        "jitter": NUMBER, "missed": st.sampled_from(["skip", "latest", "all", "x"]), "args": st.lists(JSON_VALUE,
                                                                                                    max_size=2)}),
    st.fixed_dictionaries({"task": st.just("attack.plain"), "every": NUMBER}, optional={"jitter": NUMBER}),
)
LIMIT = st.fixed_dictionaries({}, optional={
    "rate": st.one_of(st.sampled_from(["50/s", "1/d", "0/s", "1e300/s", "10/3s"]), HOSTILE_TEXT),
    "concurrency": NUMBER, "pause_s": NUMBER})
EVENT = st.fixed_dictionaries({"event": NAMEISH, "key": NAMEISH}, optional={"data": JSON_VALUE, "keep": NUMBER})

# Known findings another change is fixing: (what the answer shows, its name). A request
# that meets one is noted, and the test is expected to fail until the fix lands.
KNOWN: list[tuple[str, str]] = []


def plain(*args: Any, **kwargs: Any) -> None:
    pass


def machine(new_store: Callable[[], str]) -> type[RuleBasedStateMachine]:  # noqa: C901 - one rule a route
    class Api(RuleBasedStateMachine):
        jobs = Bundle("jobs")
        schedules = Bundle("schedules")
        limits = Bundle("limits")

        def __init__(self) -> None:
            super().__init__()
            self.app = deferq.App(new_store())
            self.app.task(name="attack.plain")(plain)
            self.client = TestClient(create_app(ServerConfig(auth=False, error_log="off"), self.app),
                                     raise_server_exceptions=False)
            self.client.__enter__()

        def teardown(self) -> None:
            self.client.__exit__(None, None, None)
            self.app.close()

        def call(self, method: str, path: str, body: Any = None) -> Any:
            """One request under the oracle; the answer's JSON (None when refused)."""
            before = store_snapshot(self.app) if method != "GET" else None
            content = None if body is None else json.dumps(body, allow_nan=True).encode()
            answer = self.client.request(method, path, content=content,
                                         headers={"content-type": "application/json"})
            where = f"{method} {path} {(content or b'')[:300]!r}"
            if answer.status_code >= 500:
                stored = before is not None and stored_since(before, store_snapshot(self.app))
                finding = known_finding(method, path, body, answer.text)
                if finding is None:
                    raise AssertionError(f"{where} -> {answer.status_code}: {answer.text[:500]}"
                                         + (" (and stored something)" if stored else ""))
                raise AssertionError(f"a fixed finding is back: {finding}: {where} -> {answer.status_code}")
            if answer.status_code >= 400:
                one_sentence(answer.json()["error"]["message"], where)
                if before is not None:
                    added = stored_since(before, store_snapshot(self.app))
                    assert not added, f"{where}: refused ({answer.text[:300]}) but stored {str(added)[:300]}"
                return None
            return answer.json()

        @rule(target=jobs, body=JOB)
        def enqueue(self, body: dict[str, Any]) -> str:
            made = self.call("POST", "/v1/jobs", body)
            return made["id"] if made else "06H00000000000000000000000"

        @rule(job=jobs)
        def get(self, job: str) -> None:
            self.call("GET", f"/v1/jobs/{job}")

        @rule(key=NAMEISH)
        def get_by_key(self, key: str) -> None:
            self.call("GET", f"/v1/jobs?key={part(key)}")

        @rule(job=consumes(jobs))
        def cancel(self, job: str) -> None:
            self.call("DELETE", f"/v1/jobs/{job}")

        @rule(job=jobs)
        def retry(self, job: str) -> None:
            self.call("POST", f"/v1/dead/{job}/retry")

        @rule(job=jobs, step=st.one_of(NAMEISH, JSON_VALUE))
        def retry_from(self, job: str, step: Any) -> None:
            self.call("POST", f"/v1/jobs/{job}/retry-from", {"step": step})

        @rule(job=jobs, remark=maybe(HOSTILE_TEXT))
        def remark(self, job: str, remark: str | None) -> None:
            self.call("PUT", f"/v1/jobs/{job}/remark", {"remark": remark})

        @rule(target=schedules, name=NAMEISH, body=SCHEDULE)
        def put_schedule(self, name: str, body: dict[str, Any]) -> str:
            self.call("PUT", f"/v1/schedules/{part(name)}", body)
            return name

        @rule(name=schedules, action=st.sampled_from(["GET", "pause", "resume", "run-now"]))
        def use_schedule(self, name: str, action: str) -> None:
            path = f"/v1/schedules/{part(name)}"
            self.call("GET", path) if action == "GET" else self.call("POST", f"{path}/{action}")

        @rule(name=consumes(schedules))
        def delete_schedule(self, name: str) -> None:
            self.call("DELETE", f"/v1/schedules/{part(name)}")

        @rule(target=limits, name=NAMEISH, body=LIMIT)
        def set_limit(self, name: str, body: dict[str, Any]) -> str:
            self.call("PUT", f"/v1/limits/{part(name)}", body)
            return name

        @rule(name=limits)
        def resume_limit(self, name: str) -> None:
            self.call("POST", f"/v1/limits/{part(name)}/resume")
            shown = self.call("GET", "/v1/limits")
            entry = (shown or {}).get("limits", {}).get(name)
            if entry and entry.get("paused_for") is not None:
                KNOWN.append((f"resume {name!r}", "limits clear/resume: the pause is still shown"))

        @rule(name=consumes(limits))
        def clear_limit(self, name: str) -> None:
            self.call("DELETE", f"/v1/limits/{part(name)}")
            shown = self.call("GET", "/v1/limits")
            if shown and name in shown.get("limits", {}):
                KNOWN.append((f"clear {name!r}", "limits clear/resume: the limit is still shown"))

        @rule(body=EVENT)
        def send_event(self, body: dict[str, Any]) -> None:
            self.call("POST", "/v1/events", body)

        @rule(queue=NAMEISH, action=st.sampled_from(["pause", "resume"]))
        def queue(self, queue: str, action: str) -> None:
            self.call("POST", f"/v1/queues/{part(queue)}/{action}")

        @invariant()
        def listings_answer(self) -> None:
            for path in READS:
                self.call("GET", path)

    return Api


def part(text: str) -> str:
    """`text` as one part of a URL path or query; a lone surrogate as the bytes UTF-8 would
    give it (invalid UTF-8: the server must refuse it with a sentence)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def known_finding(method: str, path: str, body: Any, text: str) -> str | None:
    """The name of the known finding a 5xx is, or None: a new one."""
    if path.startswith("/v1/schedules"):
        return "schedules validation: a schedule that cannot fire or fit answers 500 (issue 37 #1)"
    if path == "/v1/events" and method == "POST" and len(json.dumps(body, allow_nan=True)) > 60_000:
        return "events: data over 64 KiB answers 500"
    return None


@pytest.mark.parametrize("store", STORES)
def test_the_api_in_sequences(store, tmp_path):
    made = itertools.count()
    prefixes: list[str] = []

    def new_store() -> str:
        if store == "sqlite":
            return f"sqlite:///{tmp_path}/{next(made)}.db"
        if not shared_answers():
            need_service("Redis", "nothing answers at DEFERQ_TEST_REDIS")
        prefixes.append(unique_prefix())
        return shared_url(prefix=prefixes[-1])

    KNOWN.clear()
    try:
        run_state_machine_as_test(machine(new_store),
                                  settings=budget(6, 60, stateful_step_count=40 if LONG else 15))
    finally:
        for prefix in prefixes:
            delete_prefix(prefix)
    if KNOWN:
        pytest.fail("fixed findings are back: " + "; ".join(sorted({name for _, name in KNOWN})))
