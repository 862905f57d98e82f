"""Encryption at rest on every store: what a store keeps of an encrypted job's arguments,
result, error, progress message, attempt log, step result and event data holds none of
them in plain text; a process with the key sees them all, one without sees "encrypted";
a value that cannot be opened ends its own job with one sentence, never its batch."""

from __future__ import annotations

import time
import uuid

import pytest

import deferq
from deferq import testing
from deferq.encryption import new_key
from deferq.encryption.jobs import ARGS, sealed_args
from deferq.schedules.firing import Firer
from deferq.schedules.store import SCHEDULES
from deferq.server.api.jobs import view
from deferq.upkeep.rotation import rotate
from deferq.worker import Worker, WorkerConfig
from tests.support.raw_store import raw_bytes

KEY_OLD, KEY_NEW = new_key(), new_key()
KEYS = deferq.Encryption(keys={"2026-06": KEY_OLD})
BOTH = deferq.Encryption(keys={"2026-12": KEY_NEW, "2026-06": KEY_OLD}, current="2026-12")  # after rotating


def secret() -> str:
    """A value no other test stores: found in the raw bytes only if it leaked."""
    return f"{uuid.uuid4().hex[:8]}-45-6789"


def beside(app: deferq.App, **settings) -> deferq.App:
    """Another App on the same store (memory:// lives in one process: the same store object)."""
    other = deferq.App(app.url, lease=5, **settings)
    if app.url.startswith("memory:"):
        other.runtime.use_store(app.backend)
    return other


def done_with(other: deferq.App) -> None:
    if other.url.startswith("memory:"):
        other.runtime.use_store(None)  # the first App's store: it closes it
    other.close()


def work(app: deferq.App) -> None:
    """Every due job run by a real worker (its claim, settle and progress paths)."""
    assert Worker(app, WorkerConfig(burst=True, concurrency=2)).run() == 0


def declare(app: deferq.App) -> dict[str, deferq.Task]:
    @app.task(max_attempts=1)
    def remember(data: dict) -> dict:
        deferq.current_job().progress(0.5, f"looking at {data['ssn']}")
        return {"seen": data["ssn"]}

    @app.task(max_attempts=1)
    def refuse(data: dict) -> None:
        raise ValueError(f"no record of {data['ssn']}")

    @app.task(max_attempts=1)
    def stepped(data: dict) -> str:
        job = deferq.current_job()
        found = job.step("look-up", lambda: f"step saw {data['ssn']}")
        answer = job.wait_for("answer", event="reply", key="k1", timeout=60)
        return f"{found} {answer}"

    @app.task(max_attempts=1)
    def parent(data: dict) -> list:
        return deferq.current_job().gather("children", [remember.call(data), remember.call(data)])

    @app.task(max_attempts=1)
    def compensated(data: dict) -> None:
        deferq.current_job().step_with_undo("charge", undo_charge, lambda: f"charged {data['ssn']}")
        raise ValueError(f"shipping failed for {data['ssn']}")

    return {"remember": remember, "refuse": refuse, "stepped": stepped, "parent": parent,
            "compensated": compensated}


def undo_charge(result: str) -> None:
    raise RuntimeError(f"could not refund: {result}")


def test_nothing_readable_at_rest_and_all_of_it_with_the_key(store_url):
    app = deferq.App(store_url, lease=5, encryption=KEYS)
    tasks = declare(app)
    ssn = secret()
    try:
        kept = tasks["remember"].enqueue({"ssn": ssn})
        failed = tasks["refuse"].enqueue({"ssn": ssn})
        durable = tasks["stepped"].enqueue({"ssn": ssn})
        app.send_event("reply", "k1", {"answer-for": ssn})  # kept: the job finds it when it waits
        gathered = tasks["parent"].enqueue({"ssn": ssn})
        undone = tasks["compensated"].enqueue({"ssn": ssn})
        assert kept.args == ({"ssn": ssn},)  # the producer's job shows its own arguments
        for _ in range(3):  # the parent leaves the worker until its children end
            work(app)
        raw = raw_bytes(app)
        assert ssn.encode() not in raw
        assert b"123-45" not in raw and ssn[:8].encode() not in raw
        done = app.get(kept.id)
        assert done is not None and done.state == deferq.JobState.SUCCEEDED
        assert done.args == ({"ssn": ssn},) and done.result == {"seen": ssn}
        assert done.progress_message == f"looking at {ssn}"
        dead = app.get(failed.id)
        assert dead is not None and dead.state == deferq.JobState.DEAD
        assert f"no record of {ssn}" in (dead.error or "")
        assert app.get(durable.id).result == f"step saw {ssn} {{'answer-for': '{ssn}'}}"
        assert app.steps(durable.id)[0]["result"] == f"step saw {ssn}"
        assert app.events()[0]["data"] == {"answer-for": ssn}
        assert kept.wait(timeout=5) == {"seen": ssn}
        assert app.get(gathered.id).result == [{"seen": ssn}, {"seen": ssn}]
        assert [child["result"] for child in app.children(gathered.id)] == [{"seen": ssn}, {"seen": ssn}]
        compensating = app.get(undone.id)
        assert compensating.state == deferq.JobState.DEAD and f"shipping failed for {ssn}" in compensating.error
        assert f"could not refund: charged {ssn}" in repr(app.steps(undone.id))

        blind = beside(app, encryption=deferq.Encryption())  # declares it, has no key
        hidden = blind.get(kept.id)
        assert hidden is not None and sealed_args(hidden) is not None
        shown = view(hidden, blind.registry.chain.sealer)
        assert shown["args"] is None and shown["kwargs"] is None
        assert shown["result"].startswith("encrypted (") and shown["progress_message"].startswith("encrypted (")
        assert set(shown["encrypted"]) == {"args", "result", "progress_message"}
        assert view(blind.get(failed.id))["error"].startswith("encrypted (")
        assert blind.steps(durable.id)[0]["result"].startswith("encrypted (")
        assert blind.events()[0]["data"].startswith("encrypted (")
        assert ssn not in repr(view(blind.get(durable.id)))
        assert ssn not in repr(blind.children(gathered.id)) and ssn not in repr(blind.steps(undone.id))
        done_with(blind)
    finally:
        app.close()


def test_a_value_that_cannot_be_opened_ends_its_own_job_only(store_url):
    app = deferq.App(store_url, lease=5, encryption=KEYS)
    remember = declare(app)["remember"]
    plain = beside(app)  # writes what it is given, as a tampering hand would
    try:
        good = [remember.enqueue({"ssn": secret()}) for _ in range(3)]
        donor = app.backend.get(good[0].id)
        assert donor is not None
        sealed = donor.kwargs[ARGS]
        body = sealed.rsplit(":", 1)[1]
        flipped = sealed[:-len(body)] + ("A" if body[0] != "A" else "B") + body[1:]
        bad = {
            "copied": sealed,  # another job's arguments: bound to that job's id
            "truncated": sealed[:-12],
            "flipped": flipped,
            "unknown key": sealed.replace("$enc:2026-06:", "$enc:2027-01:"),
            "not base64": sealed[:-4] + "!!!!",
        }
        wrong = {name: plain.enqueue("remember", kwargs={ARGS: value}, max_attempts=1)
                 for name, value in bad.items()}
        work(app)
        for job in good:
            assert app.get(job.id).state == deferq.JobState.SUCCEEDED
        for name, job in wrong.items():
            ended = app.get(job.id)
            assert ended is not None and ended.state == deferq.JobState.DEAD, name
            error = ended.error or ""
            assert "Traceback" not in error and "\n" not in error and error.count(": ") <= 3, (name, error)
            assert f"job {job.id}" in error, (name, error)
            assert app.get(job.id).kwargs == {ARGS: bad[name]}, name  # nothing lost: kept as it was
    finally:
        done_with(plain)
        app.close()


def test_old_keys_read_after_a_new_key_becomes_current(store_url):
    old = deferq.App(store_url, lease=5, encryption=KEYS)
    remember = declare(old)["remember"]
    ssn = secret()
    job = remember.enqueue({"ssn": ssn})
    new = beside(old, encryption=BOTH)
    declare(new)
    try:
        work(new)
        done = new.get(job.id)
        assert done is not None and done.result == {"seen": ssn}
        stored = new.backend.get(job.id)
        assert stored.kwargs[ARGS].startswith("$enc:2026-06:")  # read under the old key ...
        assert stored.result[ARGS].startswith("$enc:2026-12:")  # ... its result written under the new
    finally:
        done_with(new)
        old.close()


def test_no_worker_and_no_enqueue_without_the_key(store_url):
    app = deferq.App(store_url, encryption=deferq.Encryption())
    remember = declare(app)["remember"]
    try:
        with pytest.raises(deferq.ConfigError, match="no encryption key"):
            Worker(app, WorkerConfig(burst=True))
        with pytest.raises(deferq.ConfigError, match="no encryption key"):
            remember.enqueue({"ssn": secret()})
        assert app.backend.list_jobs(deferq.JobState.QUEUED) == []
    finally:
        app.close()


def test_only_the_tasks_that_ask(store_url):
    app = deferq.App(store_url, encryption=deferq.Encryption(keys={"k": KEY_NEW}, every_task=False))

    @app.task(encrypt=True)
    def hidden(value: str) -> str:
        return value

    @app.task()
    def shown(value: str) -> str:
        return value

    try:
        a, b = hidden.enqueue("a-secret"), shown.enqueue("a-label")
        testing.drain(app)
        assert sealed_args(app.backend.get(a.id)) is not None and app.backend.get(b.id).args == ("a-label",)
        assert app.get(a.id).result == "a-secret" and app.backend.get(b.id).result == "a-label"
    finally:
        app.close()


def test_eager_mode_and_deferq_testing():
    app = deferq.App("memory://", eager=True, encryption=KEYS)

    @app.task
    def double(n: int) -> int:
        return 2 * n

    job = double.enqueue(21)
    assert job.result == 42 and job.args == (21,)
    stored = app.backend.get(job.id)
    assert sealed_args(stored) is not None and ARGS in stored.result
    lazy = deferq.App("memory://", encryption=KEYS)
    triple = lazy.task(lambda n: 3 * n, name="triple")
    triple.enqueue(5)
    assert testing.assert_enqueued(lazy, "triple", 5).args == (5,)
    assert [j.result for j in testing.drain(lazy)] == [15]


def test_rotate_leaves_nothing_under_the_old_key(store_url):
    old = deferq.App(store_url, lease=5, encryption=KEYS)
    tasks = declare(old)
    ssn = secret()
    try:
        waiting = tasks["remember"].options(delay=3600).enqueue({"ssn": ssn})
        ran = [tasks[name].enqueue({"ssn": ssn}) for name in ("remember", "refuse", "stepped", "parent",
                                                               "compensated")]
        old.send_event("reply", "k1", {"answer-for": ssn})
        old.schedules.add("nightly", tasks["remember"].call({"ssn": ssn}), every=3600)
        for _ in range(3):  # the parent leaves the worker until its children end
            work(old)
        assert b"$enc:2026-06:" in raw_bytes(old)
        new = beside(old, encryption=BOTH)
        declare(new)
        first = rotate(new.backend, new.registry.chain.sealer, new.result_ttl)
        assert first.resealed >= 9 and first.unreadable == 0, first
        after = raw_bytes(new, live_only=True)  # a SQLite file keeps overwritten pages until reused
        assert b"$enc:2026-06:" not in after and b"$enc:2026-12:" in after and ssn.encode() not in after
        assert rotate(new.backend, new.registry.chain.sealer, new.result_ttl).resealed == 0  # nothing left
        only_new = beside(old, encryption=deferq.Encryption(keys={"2026-12": KEY_NEW}))
        assert only_new.get(waiting.id).args == ({"ssn": ssn},)
        assert only_new.get(ran[0].id).result == {"seen": ssn}
        assert ssn in (only_new.get(ran[1].id).error or "")
        assert only_new.steps(ran[2].id)[0]["result"] == f"step saw {ssn}"
        assert only_new.events()[0]["data"] == {"answer-for": ssn}
        assert only_new.get(ran[3].id).result == [{"seen": ssn}, {"seen": ssn}]
        assert [child["result"] for child in only_new.children(ran[3].id)] == [{"seen": ssn}, {"seen": ssn}]
        assert f"could not refund: charged {ssn}" in repr(only_new.steps(ran[4].id))
        assert only_new.schedules["nightly"].schedule.args == ({"ssn": ssn},)
        done_with(only_new)
        done_with(new)
    finally:
        old.close()


def test_a_chunk_tasks_items_and_results_are_encrypted_too(store_url):
    app = deferq.App(store_url, lease=5, encryption=KEYS)
    ssn = secret()

    @app.task(chunk=deferq.Chunk(size=3, wait=0))
    def check(items: list[dict]) -> list[str]:
        return [f"checked {item['ssn']}" for item in items]

    try:
        jobs = [check.enqueue({"ssn": f"{ssn}-{n}"}) for n in range(3)]
        testing.drain(app)
        assert [app.get(job.id).result for job in jobs] == [f"checked {ssn}-{n}" for n in range(3)]
        jobs += [check.enqueue({"ssn": f"{ssn}-{n}"}) for n in range(3, 6)]
        work(app)
        assert [app.get(job.id).result for job in jobs] == [f"checked {ssn}-{n}" for n in range(6)]
        assert ssn.encode() not in raw_bytes(app)
    finally:
        app.close()


def test_text_search_finds_an_encrypted_job_by_its_key_never_by_its_ciphertext(store_url):
    """Every store's text search (an index, or a scan) leaves encrypted arguments and
    errors out: random base64 matches what nobody meant; the key stays searchable."""
    from deferq.backends.search import JobQuery

    app = deferq.App(store_url, lease=5, encryption=KEYS)
    tasks = declare(app)
    queue = f"q{uuid.uuid4().hex[:8]}"
    try:
        job = tasks["refuse"].options(queue=queue, key=f"key-{queue}").enqueue({"ssn": secret()})
        assert Worker(app, WorkerConfig(burst=True, concurrency=1, queues=(queue,))).run() == 0
        stored = app.backend.get(job.id)
        assert stored is not None and stored.state == deferq.JobState.DEAD
        for text in (sealed_args(stored)[-14:-2], stored.error[-14:-2], "enc:"):
            assert app.backend.find_jobs(JobQuery(queue=queue, text=text)).jobs == [], text
        by_key = app.backend.find_jobs(JobQuery(queue=queue, text=f"key-{queue}"))
        assert [found.id for found in by_key.jobs] == [job.id]
    finally:
        app.close()


def test_a_worker_opens_each_jobs_arguments_and_seals_its_result_once(store_url, monkeypatch):
    """What encryption costs a job is one open and one seal in a worker (none for logs,
    hooks or the console) and one seal at enqueue: counted on the real keyring."""
    from collections import Counter

    from deferq.encryption import Keyring

    calls: Counter[str] = Counter()
    for name in ("seal", "seal_ascii", "opened"):  # every open goes through `opened`
        real = getattr(Keyring, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(Keyring, name, counted)
    app = deferq.App(store_url, lease=5, encryption=KEYS)

    @app.task()
    def echo(data: dict) -> dict:
        return data

    try:
        jobs = [echo.enqueue({"ssn": secret()}) for _ in range(6)]
        # the producer's jobs keep its own plain arguments, on memory:// too (which hands
        # back the jobs as a worker reads them, decoded from the payload): none is opened
        assert calls == {"seal_ascii": 6}
        calls.clear()
        work(app)
        assert calls == {"opened": 6, "seal": 6}
        assert [app.get(job.id).result for job in jobs] == [job.args[0] for job in jobs]
    finally:
        app.close()


def test_a_failed_attempt_seals_its_error_once_for_the_job_and_its_attempt_log(store_url, monkeypatch):
    from collections import Counter

    from deferq.encryption import Keyring
    from deferq.observe.attempts import read

    calls: Counter[str] = Counter()
    real = Keyring.seal

    def counted(self, *args, **kwargs):
        calls["seal"] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Keyring, "seal", counted)
    app = deferq.App(store_url, lease=5, encryption=KEYS)
    refuse = declare(app)["refuse"]
    try:
        job = refuse.enqueue({"ssn": secret()})
        work(app)
        stored = app.backend.get(job.id)
        (entry,) = read(app.backend, job.id)
        assert calls == {"seal": 1} and stored.error == entry["error"] and stored.error.startswith("$enc:")
        assert "no record of" in app.get(job.id).error
    finally:
        app.close()



@pytest.mark.parametrize("on_conflict", ["replace", "debounce"])
def test_arguments_that_replace_a_waiting_jobs_stay_encrypted_and_open(store_url, on_conflict):
    """The waiting job holding a key takes the arguments of an enqueue that replaces them:
    sealed as the store keeps every job's (never the producer's plain ones) and opened by a
    worker with the key, though sealed before the store chose the job; rotate moves them."""
    app = deferq.App(store_url, lease=5, encryption=KEYS)
    ssn, key = secret(), f"customer-{uuid.uuid4().hex[:8]}"
    try:
        remember = remembering(app, [])
        first = remember.options(key=key, delay=3600).enqueue({"ssn": "none yet"})
        wait = {"max_wait": 60} if on_conflict == "debounce" else {}
        second = remember.options(key=key, on_conflict=on_conflict, **wait).enqueue({"ssn": ssn})
        assert second.id == first.id and second.args == ({"ssn": ssn},)  # the producer sees its own
        assert ssn.encode() not in raw_bytes(app)
        new = beside(app, encryption=BOTH)
        assert rotate(new.backend, new.registry.chain.sealer, new.result_ttl).unreadable == 0
        only_new = beside(app, encryption=deferq.Encryption(keys={"2026-12": KEY_NEW}))
        seen: list[dict] = []
        remembering(only_new, seen)
        work(only_new)
        done = only_new.get(first.id)
        assert done is not None and done.state == deferq.JobState.SUCCEEDED, done.error
        assert seen == [{"ssn": ssn}] and done.args == ({"ssn": ssn},) and done.result == {"seen": ssn}
        assert ssn.encode() not in raw_bytes(app)
        done_with(only_new)
        done_with(new)
    finally:
        app.close()


def remembering(app: deferq.App, seen: list[dict]) -> deferq.Task:
    """The task `remember` of `app`, keeping each job's arguments in `seen`."""
    def remember(data: dict) -> dict:
        seen.append(data)
        return {"seen": data["ssn"]}

    return app.task(remember, name="remember", max_attempts=1)


def test_a_schedules_arguments_are_encrypted_and_its_jobs_get_them(store_url):
    app = deferq.App(store_url, lease=5, encryption=KEYS)
    remember = declare(app)["remember"]
    ssn, declared = secret(), secret()
    app.periodic(every=3600, name="declared", args=[{"ssn": declared}])(remember)
    try:
        firer = Firer(app, "test-leader")
        firer.declare()  # as every process does at its start
        app.schedules.add("often", remember.call({"ssn": ssn}), every=1)
        raw = raw_bytes(app)
        assert ssn.encode() not in raw and declared.encode() not in raw
        assert app.schedules["often"].schedule.args == ({"ssn": ssn},)
        stored = app.backend.kv_get(SCHEDULES, "declared")
        Firer(app, "another-process").declare()  # the same declaration: not written again
        assert app.backend.kv_get(SCHEDULES, "declared") == stored

        deadline = time.monotonic() + 5  # the next tick of an every-second schedule
        while not app.find_jobs(task="remember").jobs:
            assert time.monotonic() < deadline, "the schedule did not fire"
            time.sleep(min(0.5, firer.step()))
        work(app)
        ran = app.find_jobs(task="remember").jobs[0]
        assert app.get(ran.id).result == {"seen": ssn}
        app.schedules.run_now("declared")
        work(app)
        assert {"seen": declared} in [j.result for j in app.find_jobs(task="remember").jobs]

        blind = beside(app, encryption=deferq.Encryption())  # declares it, has no key
        shown = blind.schedules["often"].to_dict(blind.backend.now())
        assert shown["args"] == [] and shown["kwargs"] == {} and shown["encrypted"]["args"] > 20
        assert ssn not in repr(shown)
        with pytest.raises(deferq.ConfigError, match="encrypted"):
            blind.schedules.run_now("often")
        assert blind.schedules.pause("often")  # pausing needs no key: the arguments stay as stored
        assert app.schedules["often"].paused and app.schedules["often"].schedule.args == ({"ssn": ssn},)
        done_with(blind)
    finally:
        app.close()
