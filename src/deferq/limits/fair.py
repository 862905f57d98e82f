"""Fair queues, as an App declares them: ``app.fair_queue("reports", key="customer:{customer_id}")``.

A job stored on a fair queue gets a fair key (its own, its task's, else the queue's
template filled from the call's arguments) and a weight; the store serves the keys with
work round-robin, each in proportion to its weight (backends/fair.py: the claim's levels
and virtual times, which every store shares). The producer sees a declaration as
`task.FairKeys`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..options import fair_weight, queue_name, unique_key
from ..values import fields_of, filled, key_template

if TYPE_CHECKING:
    from ..task import Task


@dataclass(frozen=True)
class FairQueue:
    """A queue declared fair (`app.fair_queue(name, key=..., weights=...)`): a job stored
    on it that has no fair key of its own (`options(fair_key=...)`) nor its task's
    (`@app.task(fair_key=...)`) gets one, `key` filled from the call's arguments; a job
    that chose no `fair_weight` (nor its task) gets its key's weight from `weights`."""

    name: str
    key: str
    weights: Mapping[str, float] = field(default_factory=dict)
    _signatures: dict[str, inspect.Signature] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, name: str, key: Any, weights: Any = None) -> FairQueue:
        """A declaration checked: ValueError (one sentence) for a bad one."""
        if weights is not None and not isinstance(weights, Mapping):
            raise ValueError(f"weights must map fair keys to weights, e.g. {{\"customer:7\": 3}}, "
                             f"got {weights!r:.60}")
        checked = {unique_key(k, "a key of weights"): fair_weight(v, f"the weight of {k!r:.60}")
                   for k, v in (weights or {}).items()}
        return cls(queue_name(name), key_template(key, "key"), checked)

    def refusal(self, task: Task[..., Any]) -> str | None:
        """Why `task`'s jobs cannot be keyed by this queue's template, or None."""
        unknown = [f for f in fields_of(self.key) if f not in self._signature(task).parameters]
        if not unknown:
            return None
        return (f"queue {self.name!r} is fair by {self.key!r}, whose field {unknown[0]!r} is not a parameter "
                f"of {task.name}: give the task a fair_key of its own (fair_key=\"{task.name}\" makes its "
                "jobs one key)")

    def _signature(self, task: Task[..., Any]) -> inspect.Signature:
        signature = self._signatures.get(task.name)
        if signature is None:
            signature = self._signatures[task.name] = inspect.signature(task.fn)
        return signature

    def key_of(self, task: Task[..., Any] | None, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The fair key of one call on this queue; ValueError (one sentence) when the call
        cannot fill the template."""
        what = f"queue {self.name!r}'s fair key"
        if task is not None:
            problem = self.refusal(task)
            if problem:
                raise ValueError(f"{problem}, or the job one (options(fair_key=...))")
            return unique_key(filled(self.key, self._signature(task), name, args, kwargs, what), "fair_key")
        # a task this App does not declare: only the arguments given by name are known
        missing = [f for f in fields_of(self.key) if f not in kwargs]
        if missing:
            raise ValueError(f"queue {self.name!r} is fair by {self.key!r}: {name}, a task this App does not "
                             f"declare, must pass {missing[0]!r} by name (kwargs), or the job needs a fair_key")
        params = [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)]
        params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in kwargs]
        return unique_key(filled(self.key, inspect.Signature(params), name, args, kwargs, what), "fair_key")

    def weight_of(self, key: str, weight: float) -> float:
        return self.weights.get(key, weight)
