"""Chunk tasks: one call of the function takes many jobs, and each job settles on its own.

`@app.task(chunk=deferq.Chunk(size=100, wait=1.0))` on a function of one list parameter
(`def index(doc_ids: list[int])`): producers enqueue one job per item (`index.enqueue(7)`,
the item encoded as the list's item type), a worker calls the function with up to `size`
of the task's jobs, or with those it holds once the first of them has waited `wait`
seconds in the worker. How the call ends is mapped back to each job
(`chunk_outcomes`): a return is every job's success (a list of as many values gives
each its result); `ChunkFailed({position: error})` fails those jobs alone; any other
exception fails every job of the call.

This module holds what the producer, the registry and the runner share: the option,
the exception, the item codec and the mapping. The worker gathers the jobs
(worker/gather.py); attempt/chunk.py runs one call.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..codec import ArgsCodec, codec_for
from ..errors import DeferqError, PayloadError

log = logging.getLogger("deferq.worker")

MAX_SIZE = 10_000  # jobs one call may take: a settle of them stays one statement on every store
MAX_WAIT = 3600.0  # seconds the first job of a chunk may wait in the worker for others


@dataclass(frozen=True, slots=True)
class Chunk:
    """A chunk task's option: calls of at most `size` jobs, made once `size` jobs are
    gathered or the first of them has waited `wait` seconds (a float or a timedelta)."""

    size: int = 100
    wait: float = 1.0

    def __post_init__(self) -> None:
        size, wait = self.size, self.wait
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
            raise ValueError(f"Chunk size must be a whole number from 1 to {MAX_SIZE}, got {size!r:.60}")
        if isinstance(wait, timedelta):
            wait = wait.total_seconds()
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not math.isfinite(wait) \
                or not 0 <= wait <= MAX_WAIT:
            raise ValueError(f"Chunk wait must be seconds (or a timedelta) from 0 to {MAX_WAIT:g}, "
                             f"got {self.wait!r:.60}")
        object.__setattr__(self, "wait", float(wait))


class ChunkFailed(DeferqError):
    """Raise from a chunk task to fail some of its jobs: `failures` maps a position in
    the list the function was given to that job's error (an exception, or a message).
    Those jobs retry on their own (or go dead) as any failed job; the others succeed,
    with `results[position]` as their result when `results` is given."""

    def __init__(self, failures: Mapping[int, BaseException | str],
                 results: Sequence[Any] | None = None) -> None:
        self.failures = failures
        self.results = results
        count = len(failures) if isinstance(failures, Mapping) else "?"
        super().__init__(f"{count} item(s) of the chunk failed")


class ItemFailed(DeferqError):
    """A job of a chunk that `ChunkFailed` named with a message (not an exception)."""


def chunk_option(value: Any, name: str = "chunk") -> Chunk:
    if not isinstance(value, Chunk):
        raise ValueError(f"{name} must be a deferq.Chunk(size=..., wait=...), got {value!r:.60}")
    return value


def chunk_of(fn: Callable[..., Any], name: str) -> str:
    """The name of a chunk function's list parameter; ValueError (one sentence) when
    the function cannot take a chunk: it must take one list."""
    params = list(inspect.signature(fn).parameters.values())
    takes = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not takes or len(required) > 1 or (required and required[0] is not takes[0]):
        raise ValueError(f"chunk task {name}() must take one list of items as its only required parameter")
    return takes[0].name


@functools.cache
def item_codec(fn: Callable[..., Any], task: str) -> ArgsCodec:
    """The codec of one job of a chunk task: its one argument is an item of the list
    the function takes (`list[int]` -> `int`), encoded and decoded as that type."""
    param = chunk_of(fn, task)
    try:
        hint = typing.get_type_hints(fn).get(param, Any)
    except (TypeError, ValueError, NameError):  # unresolved forward references: plain JSON
        hint = Any
    item = typing.get_args(hint)[0] if typing.get_origin(hint) in (list, Sequence, tuple) and typing.get_args(
        hint) else Any

    def one(value: Any, /) -> None:
        """Stands for one job's call: the function's item."""

    one.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(param, inspect.Parameter.POSITIONAL_ONLY, annotation=item)])
    one.__annotations__ = {param: item}
    return ItemCodec(one, task)


class ItemCodec(ArgsCodec):
    """A chunk task's codec: refuses a call that is not one item."""

    def encode(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if len(args) != 1 or kwargs:
            raise PayloadError(f"a job of chunk task {self.task}() is one item (task.enqueue(item)), got "
                               f"{len(args)} argument(s) and {len(kwargs)} keyword argument(s)")
        return super().encode(args, kwargs)


def codec_of(fn: Callable[..., Any], task: str, chunk: Chunk | None) -> ArgsCodec:
    """A task's codec: of its arguments, or of a chunk task's one item."""
    return item_codec(fn, task) if chunk is not None else codec_for(fn, task)


@dataclass(frozen=True, slots=True)
class Ending:
    """How one job of a call ended: its result, or its error (None: it succeeded)."""

    result: Any = None
    error: BaseException | None = None


def endings(count: int, result: Any, exc: BaseException | None, task: str) -> list[Ending]:
    """What the call's return (`result`) or exception (`exc`) means for each of its
    `count` jobs, in order. A `ChunkFailed` naming a position the call did not have fails
    every job (the map cannot be trusted); a return other than None or a list of `count`
    values leaves the jobs without a result (said once, as a warning)."""
    if exc is None:
        return [Ending(value) for value in _results(result, count, task)]
    if not isinstance(exc, ChunkFailed):
        return [Ending(None, exc)] * count
    failures = exc.failures
    wrong = _wrong_positions(failures, count)
    if wrong:
        error = ItemFailed(f"{task}() raised ChunkFailed naming {wrong[0]!r:.40}, but its call had positions "
                           f"0 to {count - 1}: every job of the call failed")
        error.__cause__ = exc
        return [Ending(None, error)] * count
    results = _results(exc.results, count, task)
    return [Ending(results[i], _error(failures[i])) if i in failures else Ending(results[i]) for i in range(count)]


def _wrong_positions(failures: Any, count: int) -> list[Any]:
    """What `failures` names that is not a position of the call (itself, if no map)."""
    if not isinstance(failures, Mapping):
        return [failures]
    return [position for position in failures if type(position) is not int or not 0 <= position < count]


def _error(error: Any) -> BaseException:
    if isinstance(error, BaseException):
        return error
    return ItemFailed(str(error))


def _results(result: Any, count: int, task: str) -> list[Any]:
    if result is None:
        return [None] * count
    if isinstance(result, list | tuple) and len(result) == count:
        return list(result)
    log.warning("chunk task %s() returned %s, not a list of one result per item (%d): its jobs keep no result",
                task, type(result).__name__, count)
    return [None] * count
