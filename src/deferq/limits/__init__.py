"""Limits and fairness: how often and how many jobs run, and whose jobs run next.

- rate.py: rate limits, ``@app.task(rate="100/m", rate_key="customer:{customer_id}")``,
  one turn per `period / count` per key, kept in the store (GCRA);
- slots.py: concurrency limits, ``@app.task(concurrency=5, concurrency_key=...)``, slots
  held by a run and given back after it;
- limiter.py: the `Limits` middleware every App installs, which asks both before a run
  and holds the job (snoozed, its attempt not counted) until it may run;
- runtime.py: limits set, changed and cleared at run time (`app.limits`, `deferq limits`),
  and pauses (`deferq.Backoff`); in_force.py: the limits in force, for the console;
- fair.py: fair queues, ``app.fair_queue(name, key=...)``.

A task's declared limits are `registry.Limited`; a rate, a concurrency and the key
templates are values (values.py), which options.py checks too.
"""

from ..values import Rate
from .fair import FairQueue
from .limiter import Held, Limits
from .rate import Turn, take_turn
from .runtime import LimitsAdmin, Override
from .slots import HeldSlot, take_slot

__all__ = ["FairQueue", "Held", "HeldSlot", "Limits", "LimitsAdmin", "Override", "Rate", "Turn", "take_slot",
           "take_turn"]
