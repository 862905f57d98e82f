"""Two Apps in one process, on two stores, each with a task of the same name: every job
lands in the store of the App that enqueued it, and every wait reads that store. A job
knows its App (deferq.job.Origin); nothing in the process maps task names to Apps."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import deferq
from deferq import testing
from tests.support.stores.redis import delete_prefix, shared_url, unique_prefix


@pytest.fixture(params=["sqlite+memory", "sqlite+sqlite", "redis+redis"])
def urls(request: pytest.FixtureRequest, tmp_path) -> Iterator[tuple[str, str]]:
    """Two stores: a SQLite file and memory://, two SQLite files, or the shared Redis
    under two key prefixes."""
    if request.param == "sqlite+memory":
        yield f"sqlite:///{tmp_path}/a.db", "memory://"
    elif request.param == "sqlite+sqlite":
        yield f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    else:
        request.getfixturevalue("redis_url")  # skips (or fails in CI) when Redis does not answer
        prefixes = unique_prefix(), unique_prefix()
        yield shared_url(prefixes[0]), shared_url(prefixes[1])
        for prefix in prefixes:
            delete_prefix(prefix)


Shop = tuple[deferq.App, deferq.Task[[int], str], deferq.Task[[str], str]]


def shop(url: str, name: str) -> Shop:
    """An App whose tasks `price` and `label` (the same names in every shop) say which
    shop ran them."""
    app = deferq.App(url)

    @app.task(name="price")
    def price(n: int) -> str:
        return f"{name}:{n}"

    @app.task(name="label")
    def label(text: str) -> str:
        return f"{text}@{name}"

    return app, price, label


@pytest.fixture
def shops(urls: tuple[str, str]) -> Iterator[list[Shop]]:
    made = [shop(urls[0], "a"), shop(urls[1], "b")]
    yield made
    for app, _, _ in made:
        app.close()


def test_each_job_lands_in_its_own_store_and_each_wait_reads_it(shops):
    (a, price_a, _), (b, price_b, _) = shops  # b made last: once "the last App made" answered for all
    job_a, job_b = price_a.enqueue(1), price_b.enqueue(2)
    by_name = a.enqueue("price", [3])  # by name: its App is the one that stored it
    assert a.get(job_b.id) is None and b.get(job_a.id) is None and b.get(by_name.id) is None
    assert [j.id for j in testing.drain(a)] == [job_a.id, by_name.id]
    assert [j.id for j in testing.drain(b)] == [job_b.id]
    assert job_a.wait(timeout=5) == "a:1" and by_name.wait(timeout=5) == "a:3"
    assert job_b.wait(timeout=5) == "b:2"
    assert a.get(job_a.id).wait(timeout=5) == "a:1"  # a job read back knows its App too
    assert (a.wait(job_a.id, timeout=5), b.wait(job_b.id, timeout=5)) == ("a:1", "b:2")
    with pytest.raises(LookupError):
        b.wait(job_a.id, timeout=1)


def test_async_waits_read_their_own_store(shops):
    (a, price_a, _), (b, price_b, _) = shops

    async def enqueue() -> tuple[deferq.Job[str], deferq.Job[str]]:
        return await price_a.enqueue_async(4), await price_b.enqueue_async(5)

    job_a, job_b = asyncio.run(enqueue())
    testing.drain(a)
    testing.drain(b)

    async def results() -> list[str]:
        return list(await asyncio.gather(job_b.wait_async(timeout=5), job_a.wait_async(timeout=5)))

    assert asyncio.run(results()) == ["b:5", "a:4"]


def test_each_chain_and_group_is_stored_in_the_app_of_its_first_call(shops):
    (a, price_a, label_a), (b, price_b, label_b) = shops
    # testing.drain runs jobs as stored (a worker puts a parent's result in front of the
    # arguments): these chains pass no results
    flow_a = deferq.chain(price_a.call(1), label_a.call("x"), pass_result=False).enqueue()
    flow_b = deferq.chain(price_b.call(2), label_b.call("x"), pass_result=False).enqueue()
    group_b = asyncio.run(deferq.group(price_b.call(7), price_b.call(8)).enqueue_async())
    assert flow_a.app is a and flow_b.app is b and group_b.app is b
    assert all(a.get(i) is None for i in [*flow_b.ids, *group_b.ids])
    assert all(b.get(i) is None for i in flow_a.ids)
    assert len(testing.drain(a)) == 2 and len(testing.drain(b)) == 4
    assert flow_a.wait(timeout=5) == "x@a" and flow_b.wait(timeout=5) == "x@b"
    assert group_b.wait(timeout=5) == ["b:7", "b:8"]


def test_a_workflow_names_its_app_when_its_calls_do_not(shops):
    (a, price_a, _), (b, price_b, _) = shops
    by_hand = deferq.Call("price", (9,), {})
    with pytest.raises(deferq.ConfigError, match=r"enqueue\(app\)"):
        deferq.chain(by_hand).enqueue()
    with pytest.raises(deferq.ConfigError, match="different Apps"):
        deferq.group(price_a.call(1), price_b.call(2)).enqueue()
    flow = deferq.chain(by_hand).enqueue(b)
    testing.drain(b)
    assert flow.wait(timeout=5) == "b:9" and a.get(flow.id) is None


def test_a_job_that_no_app_returned_says_how_to_wait_for_it(shops):
    (a, price_a, _), _ = shops
    stored = a.backend.get(price_a.enqueue(1).id)  # read from the store below the App
    with pytest.raises(deferq.ConfigError, match=rf"app\.wait\('{stored.id}'\)"):
        stored.wait(timeout=1)
    assert stored == a.get(stored.id)  # the App a job came from is no part of its value
