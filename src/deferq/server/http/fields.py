"""Reading a JSON request through its typed model, each problem one sentence naming the
field (a 422).

Every request body and query is a msgspec Struct (server/api/models.py, server/topics/topic.py): the
Struct checks the request, and the same Struct gives the OpenAPI document its schema
(openapi.py), so the two cannot disagree. msgspec reports a problem in its own words
("Expected `int` >= 1 - at `$.max_attempts`"); `sentence` says it in the API's
("max_attempts must be at least 1, got 0"), naming the field and the value.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import msgspec
from msgspec import Meta, inspect

from .errors import Invalid

T = TypeVar("T")
Explain = Callable[[str, Any], "str | None"]  # (field, value) -> a better sentence, or None
_MISSING: Any = object()

# What a pattern means, for the sentence that refuses a value (see `matching`).
RULES: dict[str, str] = {}


def matching(pattern: str, says: str, **meta: Any) -> Meta:
    """The Meta of a string that must match `pattern`, noted with what it asks for in words
    (a refusal names those, not the regex). `pattern` is written for JSON Schema, where a
    closing `$` is the end of the string; msgspec checks it with Python's `re`, whose `$`
    also matches before a final newline, so msgspec gets `\\Z` there (and openapi.py
    writes it back as `$` in the document: see `ecma_pattern`)."""
    python = pattern[:-1] + "\\Z" if pattern.endswith("$") else pattern
    RULES[python] = says
    return Meta(pattern=python, **meta)


def ecma_pattern(python: str) -> str:
    """A pattern of `matching` as JSON Schema writes it."""
    return python[:-2] + "$" if python.endswith("\\Z") else python


def parse(model: type[T], data: Any, where: str, explain: Explain | None = None) -> T:
    """`data` (decoded JSON) as `model`, or Invalid: one sentence naming the field.
    `explain` may word a field's problem better (e.g. with a check's own message)."""
    if not isinstance(data, dict):
        raise Invalid(f"{where} must be a JSON object, got {json_type(data)}")
    while True:
        try:
            return msgspec.convert(data, model)
        except msgspec.ValidationError as exc:
            whole = _whole_numbers(str(exc), data)
            if whole is None:
                raise Invalid(sentence(str(exc), model, data, where, explain)) from None
            data = whole


def _whole_numbers(message: str, data: Any) -> Any:
    """`data` with the float that `message` refuses as no integer made one, when it is a
    whole number: JSON Schema (and so the document) holds 5.0 an integer, msgspec does
    not. A copy (the request's own data is left alone); None when there is nothing to mend."""
    at = _AT.match(message)
    if at is None or at["parent"] or not _TYPE.match(at["what"] or "") or "got `float`" not in at["what"]:
        return None
    segments = _segments(at["path"] or "$")
    mended = _mend(data, segments)
    return None if mended is _MISSING else mended


def _mend(data: Any, segments: list[Any]) -> Any:
    if not segments:
        return int(data) if isinstance(data, float) and data.is_integer() else _MISSING
    head, rest = segments[0], segments[1:]
    if head == "..." and isinstance(data, dict):  # a value of a map: mend every whole one
        values = {k: _mend(v, rest) for k, v in data.items()}
        if all(v is _MISSING for v in values.values()):
            return _MISSING
        return {k: data[k] if v is _MISSING else v for k, v in values.items()}
    inner = _value_at(data, [head])
    mended = _mend(inner, rest) if inner is not _MISSING else _MISSING
    if mended is _MISSING:
        return _MISSING
    copy = dict(data) if isinstance(data, dict) else list(data)
    copy[head] = mended
    return copy


def parse_query(model: type[T], params: dict[str, str]) -> T:
    """Query parameters as `model`: a whole number's digits become the number (only those:
    "1e2" or "5.0" stay strings, and are refused where the model wants an integer)."""
    integers = _integers(model)
    values: dict[str, Any] = {k: int(v) if k in integers and _DIGITS.match(v) else v for k, v in params.items()}
    try:
        query: T = msgspec.convert(values, model)
    except msgspec.ValidationError as exc:
        _refuse_query(str(exc), model, values)
    return query


_DIGITS = re.compile(r"-?[0-9]{1,18}\Z")


_INTEGERS: dict[type, frozenset[str]] = {}


def _integers(model: type[Any]) -> frozenset[str]:
    """The fields of a query model that hold whole numbers."""
    if model not in _INTEGERS:
        info = inspect.type_info(model)
        assert isinstance(info, inspect.StructType)
        _INTEGERS[model] = frozenset(f.encode_name for f in info.fields
                                     if isinstance(_plain(f.type, None), inspect.IntType))
    return _INTEGERS[model]


def _refuse_query(message: str, model: type[Any], values: dict[str, Any]) -> NoReturn:
    text = sentence(message, model, values, "the query")
    unknown = _UNKNOWN.match(message)
    if unknown:
        raise Invalid(f"unknown query parameter {unknown[1]!r}: this route takes "
                      f"{', '.join(_field_names(model, [], values)) or 'none'}")
    raise Invalid(f"query parameter {text}")


# -- msgspec's words into the API's ------------------------------------------------------------

_AT = re.compile(r"(?P<what>.*?)(?: - at `(?P<path>[^`]*)`(?: in `(?P<parent>[^`]*)`)?)?\Z", re.S)
_UNKNOWN = re.compile(r"Object contains unknown field `(.*)`\Z", re.S)
_REQUIRED = re.compile(r"Object missing required field `(.*)`\Z", re.S)
_TYPE = re.compile(r"Expected `([^`]*)`, got `([^`]*)`\Z")
_BOUND = re.compile(r"Expected `([^`]*)` (?:of length )?(>=|>|<=|<) (\S+)\Z")
_LENGTH = re.compile(r"Expected `([^`]*)` of length")
_PATTERN = re.compile(r"Expected `str` matching regex (.*)\Z", re.S)
_CHOICE = re.compile(r"Invalid (?:enum )?value (.*)\Z", re.S)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_BOUNDS = {">=": "at least", ">": "above", "<=": "at most", "<": "below"}
_KINDS = {"int": "a whole number", "float": "a number", "str": "a string", "bool": "true or false",
          "object": "an object", "array": "an array", "null": "null"}
_UNITS = {"str": "characters", "array": "items", "object": "entries"}


def sentence(message: str, model: type[Any], data: Any, where: str, explain: Explain | None = None) -> str:
    """msgspec's `message` about `data` (read as `model`) as one sentence of the API."""
    at = _AT.match(message)
    assert at is not None  # the pattern matches any text
    what, path = at["what"], at["parent"] or at["path"] or "$"
    segments = _segments(path)
    name = _name(segments) or where
    value = _MISSING if at["parent"] else _value_at(data, segments)
    top = _value_at(data, segments[:1]) if segments else _MISSING
    if explain is not None and top is not _MISSING:
        better = explain(str(segments[0]), top)
        if better is not None:
            return better
    if m := _UNKNOWN.match(what):
        known = _field_names(model, segments, data)
        return f"unknown field {m[1]!r} in {name}: fields are {', '.join(known)}"
    if m := _REQUIRED.match(what):
        return f"{name} needs {m[1]}"
    if m := _TYPE.match(what):
        return f"{name} must be {_kinds(m[1])}, got {_show(value, m[2])}"
    if m := _BOUND.match(what):
        unit = _UNITS.get(m[1], "") if _LENGTH.match(what) else ""
        unit = f" {unit[:-1] if m[3] == '1' else unit}".rstrip()
        got = f", got {_show(value)}" if not unit and value is not _MISSING else ""
        key = " (a key)" if at["parent"] else ""
        return f"{name}{key} must be {_BOUNDS[m[2]]} {_number(m[3])}{unit}{got}"
    if m := _PATTERN.match(what):
        pattern = _unquoted(m[1])
        says = RULES.get(pattern, f"a string matching {pattern}")
        key = " (a key)" if at["parent"] else ""
        return f"{name}{key} must be {says}" + (f", got {_show(value)}" if value is not _MISSING else "")
    if m := _CHOICE.match(what):
        choices = _choices(model, segments, data)
        return f"{name} must be one of {', '.join(choices)}, got {m[1]}" if choices else f"{name}: {what}"
    return what  # a check's own sentence (a ValueError raised in __post_init__)


def _unquoted(text: str) -> str:
    """A pattern as msgspec quotes it (Python's repr) back to the pattern."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, str) else text


def _segments(path: str) -> list[Any]:
    """`$.jobs[0].max_attempts` as ["jobs", 0, "max_attempts"]; a map's value is "..."."""
    found = [m[1] if m[1] is not None else m[2] for m in _SEGMENT.finditer(path)]
    return [int(s) if s.isdigit() else s for s in found]


def _name(segments: list[Any]) -> str:
    name = ""
    for s in segments:
        name += f"[{s}]" if isinstance(s, int) or s == "..." else (f".{s}" if name else s)
    return name.replace("[...]", "")


def _number(text: str) -> str:
    try:
        return f"{float(text):g}"
    except ValueError:
        return text


def _kinds(expected: str) -> str:
    kinds = [_KINDS.get(k.strip(), k.strip()) for k in expected.split("|") if k.strip() != "null"]
    return " or ".join(kinds) or "null"


def _show(value: Any, kind: str = "") -> str:
    if value is _MISSING:
        return _KINDS.get(kind, kind) or "something else"
    if isinstance(value, dict | list):
        return json_type(value)
    return f"{value!r:.60}"


def _value_at(data: Any, segments: list[Any]) -> Any:
    for s in segments:
        if isinstance(data, dict) and isinstance(s, str) and s in data:
            data = data[s]
        elif isinstance(data, list) and isinstance(s, int) and s < len(data):
            data = data[s]
        else:
            return _MISSING
    return data


def _plain(tp: Any, data: Any) -> Any:
    """`tp` without its Optional, or the member of a union that `data` names by its tag."""
    if isinstance(tp, inspect.Metadata):
        tp = tp.type
    if isinstance(tp, inspect.UnionType):
        members = [_plain(t, data) for t in tp.types if not isinstance(t, inspect.NoneType)]
        for member in members:
            if isinstance(member, inspect.StructType) and member.tag_field is not None and isinstance(data, dict):
                if data.get(member.tag_field) == member.tag:
                    return member
        return members[0] if len(members) == 1 else tp
    return tp


def _type_at(model: type[Any], segments: list[Any], data: Any) -> Any:
    tp: Any = inspect.type_info(model)
    for s in segments:
        tp = _plain(tp, data)
        if isinstance(tp, inspect.StructType):
            field = next((f for f in tp.fields if f.encode_name == s), None)
            if field is None:
                return None
            tp = field.type
        elif isinstance(tp, inspect.ListType | inspect.DictType):
            tp = tp.item_type if isinstance(tp, inspect.ListType) else tp.value_type
        else:
            return None
        data = _value_at(data, [s])
    return tp


def _field_names(model: type[Any], segments: list[Any], data: Any) -> list[str]:
    tp = _plain(_type_at(model, segments, data), _value_at(data, segments))
    if not isinstance(tp, inspect.StructType):
        return []
    return ([tp.tag_field] if tp.tag_field else []) + [f.encode_name for f in tp.fields]


def _choices(model: type[Any], segments: list[Any], data: Any) -> list[str]:
    tp = _plain(_type_at(model, segments, data), None)
    if isinstance(tp, inspect.LiteralType):
        return [str(v) for v in tp.values]
    parent = _type_at(model, segments[:-1], data)  # a tag: the union's members name the choices
    members = parent.types if isinstance(parent, inspect.UnionType) else ()
    return [str(t.tag) for t in members if isinstance(t, inspect.StructType) and t.tag_field == segments[-1]]


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    names: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}
    return names.get(type(value), "a value")


def json_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(f"{where} must be a JSON object, got {json_type(value)}")
    return value
