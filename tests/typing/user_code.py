# ruff: noqa: F821  (reveal_type is known to mypy only)
"""A user's tasks module, type-checked by tests/test_typing.py. Lines marked `# error`
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
