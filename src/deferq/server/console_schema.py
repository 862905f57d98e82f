"""JSON Schema pieces and field readers for the console's own routes (console_api).

The core API's requests are typed models (models.py) that also give /openapi.json its
schema; the console's small routes still read their few fields and describe their
answers with these helpers. Moving them to models too is listed under "Console: not
yet" in docs/http.md.
"""

from __future__ import annotations

from typing import Any

from ..job import ALL_STATES
from .errors import Invalid
from .topics import Backoff

BACKOFF_KINDS = tuple(kind.__struct_config__.tag for kind in Backoff.__args__)

NUMBER = {"type": "number"}
INTEGER = {"type": "integer"}
STRING = {"type": "string"}
STATE = {"type": "string", "enum": [str(state) for state in ALL_STATES]}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def obj(properties: dict[str, Any], required: tuple[str, ...] = (), extra: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if not extra:
        schema["additionalProperties"] = False
    return schema


def request_obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A request body: no unknown fields; an optional field may be null (= left out)."""
    return obj({name: schema if name in required else nullable(schema)
                for name, schema in properties.items()}, required, extra=False)  # fmt: skip


def query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def only_known(data: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r} in {where}: fields are {', '.join(known)}")


def string(data: dict[str, Any], name: str, max_length: int = 1000) -> str | None:
    value = data.get(name)
    if value is not None and (not isinstance(value, str) or len(value) > max_length):
        raise Invalid(f"{name} must be a string of at most {max_length} characters")
    return value


def integer(data: dict[str, Any], name: str, default: int, minimum: int, maximum: int) -> int:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON Schema counts 5.0 as a whole number too
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise Invalid(f"{name} must be a whole number from {minimum} to {maximum}, got {value!r:.60}")
    return value
