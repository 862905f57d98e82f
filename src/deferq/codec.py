"""Task arguments arrive exactly as they were enqueued, or are refused at enqueue.

Payloads are JSON. A value JSON cannot carry exactly (NaN, an integer past 64 bits, a
dict with non-string keys, a datetime, a UUID, a Decimal, a dataclass, an enum, a set,
bytes...) is refused with a one-line `PayloadError` naming its path, e.g.
``argument 'when' of remind(): datetime ... cannot travel as JSON exactly``. Unless the
task's type annotation for that parameter says what it is: then msgspec encodes it to
JSON values at enqueue and converts it back to that type before the task runs
(`remind(when: datetime)` receives a datetime, `tuple[int, int]` a tuple, a dataclass
its dataclass). Eager mode and deferq.testing run tasks through the same decode.

One exception, for convenience: a tuple where nothing is annotated travels as a JSON
array and arrives as a list.

Two limits hold for every store alike: a value nests lists and dicts at most MAX_DEPTH
(100) levels deep (a list that holds itself is refused by the same rule), and no string,
nor dict key, holds the NUL character, which PostgreSQL cannot store (`find_nul`).
"""

from __future__ import annotations

import functools
import inspect
import math
import typing
from collections.abc import Callable
from typing import Any

from .errors import PayloadError

# Annotations whose values are JSON already: nothing to convert at run.
NATIVE: tuple[Any, ...] = (Any, object, str, int, float, bool, type(None), list, dict, inspect.Parameter.empty)
INT_RANGE = (-(2**63), 2**64 - 1)  # what orjson (and most JSON readers) keep exact
MAX_DEPTH = 100  # levels of lists and dicts a value may nest (orjson writes at most 254)
Path = list[str | int]  # where a value sits: keys and positions

_ALWAYS_EXACT = frozenset({str, bool, type(None)})  # one set probe per argument, before _plain
Decoder = Callable[[tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]


def _plain(value: Any) -> bool:
    """A scalar JSON carries exactly (the fast answer for most arguments)."""
    kind = type(value)
    return (kind is str or kind is bool or value is None or (kind is int and INT_RANGE[0] <= value <= INT_RANGE[1])
            or (kind is float and math.isfinite(value)))


def check_exact(value: Any, where: str, depth: int = 1) -> None:
    """Raise PayloadError unless JSON carries `value` exactly (tuples as arrays), nested at
    most MAX_DEPTH levels (`depth`: the level of `value` if it is a list or dict)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return
    if kind is int:
        if not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise PayloadError(f"{where} is an integer beyond 64 bits, which JSON readers cannot keep exact")
        return
    if kind is float:
        if not math.isfinite(value):
            raise PayloadError(f"{where} is {value}, which JSON cannot carry")
        return
    if (kind is list or kind is tuple or kind is dict) and depth > MAX_DEPTH:
        argument = where.split("[", 1)[0]  # not the hundred [0]s that lead here
        raise PayloadError(f"{argument} nests lists and dicts more than {MAX_DEPTH} levels deep (or holds "
                           f"itself): deferq takes at most {MAX_DEPTH}")
    if kind is list or kind is tuple:
        for i, item in enumerate(value):
            check_exact(item, f"{where}[{i}]", depth + 1)
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise PayloadError(f"{where} has the key {key!r:.40}, but JSON object keys are strings")
            check_exact(item, f"{where}[{key!r:.40}]", depth + 1)
        return
    raise PayloadError(
        f"{where} is {kind.__name__} {value!r:.60}, which cannot travel as JSON exactly: pass JSON values, "
        f"or annotate the parameter with its type to have it encoded and decoded back"
    )


def find_nul(value: Any) -> tuple[Path, bool] | None:
    """Where the first string or dict key holding NUL sits in decoded JSON `value` (its
    path, and whether it is a key), or None. A walk with its own stack: never recursion."""
    stack: list[tuple[Path, Any]] = [([], value)]
    while stack:
        path, item = stack.pop()
        if type(item) is str:
            if "\0" in item:
                return path, False
        elif type(item) is dict:
            for key, inner in item.items():
                if type(key) is str and "\0" in key:
                    return [*path, key], True
                stack.append(([*path, key], inner))
        elif type(item) is list or type(item) is tuple:
            stack.extend(([*path, i], inner) for i, inner in enumerate(item))
    return None


def shown(path: Path, where: str = "") -> str:
    """A path as a request names it, args[0].user; after `where` (an argument of the
    Python API), as Python does: argument 'x' of t()['user']."""
    text = where
    for step in path:
        if type(step) is int:
            text += f"[{step}]"
        else:
            text += f"[{step!r:.40}]" if where else f".{step}" if text else str(step)
    return text or "the value"


class ArgsCodec:
    """The encode (at enqueue) and decode (before run) of one task's arguments."""

    def __init__(self, fn: Callable[..., Any], task: str) -> None:
        self.task = task
        try:
            self.params = list(inspect.signature(fn).parameters.values())
            hints = typing.get_type_hints(fn)
        except (TypeError, ValueError, NameError):  # builtins, unresolved forward references
            self.params, hints = [], {}
        self.typed = {p.name: hints[p.name] for p in self.params
                      if p.name in hints and hints[p.name] not in NATIVE}
        self.decoder: Decoder | None = self._decode if self.typed else None

    def _hint(self, position: int | None, name: str | None) -> tuple[str, Any]:
        """(how to name the argument, its annotation to convert with, or None)."""
        if position is not None:
            for i, param in enumerate(self.params):
                if param.kind is inspect.Parameter.VAR_POSITIONAL or (i == position and param.kind in (
                        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)):
                    return repr(param.name), self.typed.get(param.name)
            return str(position), None
        for param in self.params:
            if param.name == name and param.kind is not inspect.Parameter.POSITIONAL_ONLY:
                return repr(param.name), self.typed.get(param.name)
        var_kw = next((p for p in self.params if p.kind is inspect.Parameter.VAR_KEYWORD), None)
        return repr(name), self.typed.get(var_kw.name) if var_kw else None

    def encode(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Arguments as JSON values; refuses what cannot arrive exactly."""
        if not self.typed:  # the common case: check in place, name an argument only if refused
            low, high = INT_RANGE
            for value in args:  # no enumerate: the position is needed only to name a refusal
                kind = type(value)
                if kind not in _ALWAYS_EXACT and not (kind is int and low <= value <= high) and not _plain(value):
                    i = next(i for i, arg in enumerate(args) if arg is value)
                    check_exact(value, f"argument {self._hint(i, None)[0]} of {self.task}()")
            for name, value in kwargs.items():
                if not _plain(value):
                    check_exact(value, f"argument {name!r} of {self.task}()")
            return args, kwargs
        out_args = tuple(self._encode_one(value, *self._hint(i, None)) for i, value in enumerate(args))
        out_kwargs = {name: self._encode_one(value, *self._hint(None, name)) for name, value in kwargs.items()}
        return out_args, out_kwargs

    def _encode_one(self, value: Any, name: str, hint: Any) -> Any:
        if hint is not None:
            try:
                value = _msgspec().to_builtins(value)
            except RecursionError:  # a value that holds itself
                check_exact(value, f"argument {name} of {self.task}()")
                raise
        check_exact(value, f"argument {name} of {self.task}()")
        return value

    def _decode(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Arguments converted back to the annotated types (PayloadError if one is not)."""
        convert = _msgspec().convert
        try:
            out_args = tuple(
                value if (hint := self._hint(i, None)[1]) is None else convert(value, hint, strict=False)
                for i, value in enumerate(args)
            )
            out_kwargs = {
                name: value if (hint := self._hint(None, name)[1]) is None else convert(value, hint, strict=False)
                for name, value in kwargs.items()
            }
        except _msgspec().ValidationError as exc:
            raise PayloadError(f"the arguments of {self.task}() do not match its annotations: {exc}") from None
        return out_args, out_kwargs


@functools.cache
def codec_for(fn: Callable[..., Any], task: str) -> ArgsCodec:
    """One codec per task function, made on first use (annotations may name classes
    defined after the task)."""
    return ArgsCodec(fn, task)


def unknown_task_codec(task: str) -> ArgsCodec:
    """For a call to a task this process does not know (enqueue by name): JSON only."""
    return codec_for(_no_annotations, task)


def _no_annotations(*args: Any, **kwargs: Any) -> None:
    """Stands for a task whose signature is not known here."""


def _msgspec() -> Any:
    import msgspec

    return msgspec
