"""The traceback a failed job keeps, as Python prints it, less two costs.

`traceback.format_exception` stats every file of the stack to see whether its source
changed since it was cached (`linecache.checkcache`: ~85 µs of CPU per failed job on a
VM, a fifth of a failing worker's time) and parses each frame's source line to draw
`^^^^` under the failing expression (half of the rest). A worker in a retry storm
formats one traceback per job, so this formats from the cached source lines without
either: chained causes, contexts, exception groups and notes as Python writes them.
"""

from __future__ import annotations

import linecache
import traceback
from types import TracebackType

CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"
REPEATS = 3  # as Python: a frame repeated more often (recursion) is printed this often


def format_error(exc: BaseException) -> str:
    return "".join(_chain(exc, set(), ""))


def _chain(exc: BaseException, seen: set[int], indent: str) -> list[str]:
    seen.add(id(exc))
    lines: list[str] = []
    if exc.__cause__ is not None and id(exc.__cause__) not in seen:
        lines += _chain(exc.__cause__, seen, indent) + [_indented(CAUSE, indent)]
    elif (exc.__context__ is not None and not exc.__suppress_context__
          and id(exc.__context__) not in seen):
        lines += _chain(exc.__context__, seen, indent) + [_indented(CONTEXT, indent)]
    if exc.__traceback__ is not None:
        group = isinstance(exc, BaseExceptionGroup)
        lines.append(f"{indent}{'Exception Group ' if group else ''}Traceback (most recent call last):\n")
        lines += [indent + line for line in _frames(exc.__traceback__)]
    lines += [indent + line for line in traceback.format_exception_only(type(exc), exc)]
    if isinstance(exc, BaseExceptionGroup):
        for number, inner in enumerate(exc.exceptions, 1):
            lines.append(f"{indent}+---------------- {number} ----------------\n")
            lines += _chain(inner, seen, indent + "| ")
    return lines


def _frames(tb: TracebackType) -> list[str]:
    """A `File ..., line N, in name` line and its source line a frame; a run of the
    same frame (recursion) cut after REPEATS, as Python cuts it."""
    lines: list[str] = []
    last, count = None, 0
    for frame, lineno in traceback.walk_tb(tb):
        code = frame.f_code
        where = (code.co_filename, lineno, code.co_name)
        if where != last:
            lines += _repeats(count)
            last, count = where, 0
        count += 1
        if count <= REPEATS:
            lines.append(f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n')
            source = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
            if source:
                lines.append(f"    {source}\n")
    return lines + _repeats(count)


def _repeats(count: int) -> list[str]:
    more = count - REPEATS
    return [f"  [Previous line repeated {more} more time{'s' if more > 1 else ''}]\n"] if more > 0 else []


def _indented(text: str, indent: str) -> str:
    return "".join(indent + line if line.strip() else line for line in text.splitlines(keepends=True))
