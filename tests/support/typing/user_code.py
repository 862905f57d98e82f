# ruff: noqa: F821  (reveal_type is known to mypy only)
"""A user's tasks module, type-checked by tests/process/test_typing.py. Lines marked `# error`
must be reported by mypy --strict; every other line must pass."""

from datetime import timedelta

import deferq

app = deferq.App("memory://")


@app.task(queue="email", max_attempts=5)
def send(user_id: int, email: str) -> None:
    return None


@app.task
async def ping(url: str) -> int:
    return 200


reveal_type(send.enqueue(1, "a"))
send.enqueue(2, email="b")
send.options(delay=5, priority="high").enqueue(1, "a")
app.enqueue_many([send.call(1, "a"), ping.call("http://x")])
send.options(priority=0, key="k", on_conflict="replace", expires=timedelta(hours=1), remark="r").enqueue(1, "a")
send.options(after=[send.enqueue(1, "a")], after_any_outcome=True, at="2030-01-01T09:00:00Z").enqueue(1, "a")
app.enqueue("send", [1, "a"], queue="email", delay=timedelta(seconds=5))
send.options(priorty="high")  # error
send.options(priority="urgent")  # error
send.options(on_conflict="merge")  # error
app.enqueue("send", [1], queu="email")  # error
app.task(queu="email")  # error
send.enqueue("x")  # error
send.options(delay=5).enqueue(1)  # error
send.call(1, mail="a")  # error
ping.call(3)  # error
answer: str = ping("u")  # error


async def main() -> None:
    reveal_type(await ping.enqueue_async("u"))
    await ping.enqueue_async(1)  # error


@app.task
def total(prices: list[float]) -> float:
    return sum(prices)


job = total.enqueue([1.0, 2.5])
reveal_type(job.wait())
reveal_type(ping.enqueue("u").wait(timeout=5))
sent: None = send.enqueue(1, "a").wait()
label: str = total.enqueue([1.0]).wait()  # error
total.enqueue([1.0]).wait().upper()  # error


async def results() -> None:
    reveal_type(await (await ping.enqueue_async("u")).wait_async())
    count: int = await total.enqueue([2.0]).wait_async()  # error
    print(count)


@app.task
def receipt(amount: float) -> str:
    return f"{amount:.2f}"


reveal_type(deferq.chain(total.call([1.0]), receipt.partial()).enqueue().wait())
reveal_type(deferq.chord([ping.call("a"), ping.call("b")], total.partial()).enqueue().wait())
reveal_type(deferq.group(ping.call("a"), ping.call("b")).enqueue().wait())
flow_count: int = deferq.chain(ping.call("a"), receipt.partial()).enqueue().wait()  # error
deferq.chain(total.call([1.0]), send.partial(email=3))  # error


def lookup(user: int, *, verbose: bool = False) -> str:
    return str(user)


async def fetch(user: int) -> bytes:
    return b""


@app.task
def stepped(user: int) -> None:
    job = deferq.current_job()
    assert job is not None
    name: str = job.step("lookup", lookup, user, verbose=True)
    count: int = job.step("lookup again", lookup, user)  # error
    job.step("bad args", lookup, "u")  # error
    undone: str = job.step("booked", lookup, user, undo=print)
    job.step("booked again", lookup, user, undo=lambda kept: kept.upper())
    print(undone)
    job.sleep("nap", 3.0)
    print(name, count)


async def async_steps() -> None:
    job = deferq.current_job()
    assert job is not None
    body: bytes = await job.step_async("fetch", fetch, 1)
    text: str = await job.step_async("fetch again", fetch, 1)  # error
    print(body, text)


@app.periodic("0 9 * * 1-5", tz="Europe/Berlin", queue="reports", priority="low")
def report() -> None:
    return None


@app.periodic(every=timedelta(seconds=30), jitter=2.0, missed="latest", name="tick-30s", args=[1, "a"])
def tick(n: int, label: str) -> int:
    return n


@app.periodic(every=30)
@app.task(queue="reports")
def scheduled_task() -> str:
    return ""


reveal_type(tick)
tick.enqueue(1, "a")
tick.enqueue("a")  # error
app.periodic(every="30s")  # error
app.periodic("* * * * *", tz=1)  # error
app.periodic("* * * * *", missed="some")  # error
app.periodic("* * * * *", queu="reports")  # error
app.schedules.add("nightly", report.call(), cron="0 3 * * *", tz="UTC")
app.schedules.pause(3)  # error
app.limits.set("report", rate="5/s", concurrency=2)
app.limits.set("report", concurrency="2")  # error


def progress_of(job: deferq.RunningJob) -> None:
    job.progress(0.5, "half")


running: deferq.RunningJob | None = deferq.current_job()
