"""What a request's JSON may hold beyond being JSON, the same rules the Python API keeps
(codec.py), each refused with a 422 naming where: no string or key holding NUL (which
PostgreSQL cannot store), arrays and objects nested at most MAX_DEPTH levels, no integer
beyond 64 bits (orjson reads one as a float: it would be stored changed).

Each rule is first asked of the raw bytes, which is cheap (a substring search, a count):
the decoded value is walked only when the bytes say it may break one.
"""

from __future__ import annotations

import re
from typing import Any

from ...codec import INT_RANGE, MAX_DEPTH, Path, find_nul, shown
from .errors import Invalid

NUL_ESCAPE = b"\\u0000"  # the only way JSON spells NUL (a raw one is malformed)
# 2**63 has 19 digits: a shorter run fits. Found as 19 zeros once each digit is one
# (translate and a substring search run in C: a regex here costs 25 times more).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|(-?[0-9]+)(?![0-9.eE])|-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?')


def too_deep() -> Invalid:
    return Invalid(f"the request nests arrays and objects more than {MAX_DEPTH} levels deep: "
                   f"deferq takes at most {MAX_DEPTH}")


def check(body: bytes, data: Any) -> None:
    """Refuse (Invalid) decoded `data` if it breaks a rule above; `body` is its JSON."""
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _depth_over(data):
        raise too_deep()
    if NUL_ESCAPE in body:
        found = find_nul(data)
        if found is not None:
            path, is_key = found  # a key is not echoed: it is named by where it is
            where = (f"a key of {shown(path[:-1]) if path[:-1] else 'the request'}" if is_key else shown(path))
            raise Invalid(f"{where} holds the NUL character (\\u0000), which deferq does not store: "
                          "remove it or encode it")
    if _LONG_DIGITS in body.translate(_DIGITS_AS_ZERO):
        big = next((m[1] for m in _TOKEN.finditer(body) if m[1] and not INT_RANGE[0] <= int(m[1]) <= INT_RANGE[1]),
                   None)
        if big is not None:
            at = _float_at(data, float(int(big)))
            raise Invalid(f"{shown(at) if at is not None else 'a number'} is an integer beyond 64 bits "
                          f"({big.decode()[:40]}), which JSON readers cannot keep exact: send it as a string")


def _depth_over(data: Any) -> bool:
    """Whether arrays and objects nest more than MAX_DEPTH levels in `data`."""
    stack = [(data, 1)]
    while stack:
        item, level = stack.pop()
        inner = item.values() if type(item) is dict else item if type(item) is list else None
        if inner is None:
            continue
        if level > MAX_DEPTH:
            return True
        stack.extend((value, level + 1) for value in inner)
    return False


def _float_at(data: Any, value: float) -> Path | None:
    """Where the float `value` (an integer orjson could not keep) sits in `data`."""
    stack: list[tuple[Path, Any]] = [([], data)]
    while stack:
        path, item = stack.pop()
        if type(item) is float and item == value:
            return path
        if type(item) is dict:
            stack.extend(([*path, key], inner) for key, inner in item.items())
        elif type(item) is list:
            stack.extend(([*path, i], inner) for i, inner in enumerate(item))
    return None
