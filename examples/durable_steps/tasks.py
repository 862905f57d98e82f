"""Durable steps for the three delayed-job cases of a delay-queue service: a reminder
three days before a membership expires, a check five minutes after a payment, and a
re-notify at 1, 3, 5 and 7 minutes that stops when the other side answers.

    DEFERQ_URL=sqlite:///deferq.db deferq worker --app tasks:app
    python -c 'import tasks; tasks.remind_before_expiry.enqueue(7, 1893456000)'
    python -c 'import tasks; tasks.renotify.enqueue(9)'
    deferq event send answered 9 --data '"on it"'       # the other side answered

None of these tasks holds a worker while it sleeps or waits: each sleep or wait stores
the job again, due when it ends, and the job runs again from the top, where every step
that finished returns its kept result (docs/steps.md).
"""

from __future__ import annotations

from datetime import timedelta

import deferq
from deferq.context import RunningJob

app = deferq.App()  # DEFERQ_URL, else sqlite:///deferq.db

#: what was sent, in order: stands in for your mail, SMS or webhook provider
outbox: list[str] = []


def send(message: str) -> str:
    # ... hand the message to your provider here ...
    outbox.append(message)
    return message


def running() -> RunningJob:
    job = deferq.current_job()
    if job is None:
        raise RuntimeError("these tasks run under a worker (or deferq.testing)")
    return job


@app.task()
def remind_before_expiry(member: int, expires_at: float) -> str:
    """Remind a member three days before the membership expires (`expires_at`, epoch
    seconds). Enqueue it when the membership starts or is renewed."""
    job = running()
    job.sleep_until("three days before", expires_at - timedelta(days=3).total_seconds())
    return job.step("remind", send, f"member {member}: your membership ends in 3 days")


def payment_state(order: int) -> str:
    # ... ask the payment provider and your order table here ...
    return "paid"


@app.task()
def check_payment(order: int) -> str:
    """Five minutes after a payment, check that the order's state downstream agrees;
    alert if it does not. Enqueue it when the payment goes out."""
    job = running()
    job.sleep("five minutes", timedelta(minutes=5))
    state = job.step("check", payment_state, order)
    if state != "paid":
        job.step("alert", send, f"order {order}: paid five minutes ago, downstream says {state}")
    return state


#: minutes after the first notice at which a notice goes out again, while nobody answers
RENOTIFY_AT = (1, 3, 5, 7)


@app.task()
def renotify(ticket: int) -> str:
    """Notify, then notify again at 1, 3, 5 and 7 minutes until the other side answers
    (`app.send_event("answered", str(ticket), data)`, POST /v1/events or
    `deferq event send answered TICKET`)."""
    job = running()
    job.step("notify", send, f"ticket {ticket}: please answer")
    previous = 0
    for minute in RENOTIFY_AT:
        answer = job.wait_for(f"answer before {minute}", event="answered", key=str(ticket),
                              timeout=timedelta(minutes=minute - previous))
        if answer is not None:
            return f"answered: {answer}"
        job.step(f"notify at {minute}", send, f"ticket {ticket}: please answer ({minute} min)")
        previous = minute
    return "no answer"
