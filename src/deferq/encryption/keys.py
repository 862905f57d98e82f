"""Encryption keys: how an App is given them (`deferq.Encryption`, DEFERQ_ENCRYPTION_KEYS).

A key is 32 random bytes (AES-256), given as bytes or as URL-safe base64 text, the form
`deferq encryption new-key` prints. Each key has an id, kept beside every value it
encrypts: several keys read, the `current` one writes, so a new key can become current
while values written under the old one are still read (rotation without downtime).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

KEY_BYTES = 32
ENV = "DEFERQ_ENCRYPTION_KEYS"
KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}")  # kept in every value: short, no ':' (the separator)


def new_key() -> str:
    """A new random key as URL-safe base64 text (44 characters)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def key_bytes(key_id: str, key: Any) -> bytes:
    """`key` (bytes, or URL-safe base64 text) as its 32 bytes; ConfigError naming the key id,
    never the key."""
    if isinstance(key, str):
        text = key.strip()
        try:
            padded = text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4)
            key = base64.b64decode(padded, validate=True)  # strict: a stray character is refused
        except (binascii.Error, ValueError):
            raise ConfigError(f"encryption key {key_id!r} is not URL-safe base64 text: make one with "
                              "deferq encryption new-key") from None
    if not isinstance(key, bytes | bytearray):
        raise ConfigError(f"encryption key {key_id!r} must be bytes or base64 text, got {type(key).__name__}")
    if len(key) != KEY_BYTES:
        raise ConfigError(f"encryption key {key_id!r} is {len(key)} bytes long; a key is {KEY_BYTES} random bytes "
                          "(deferq encryption new-key prints one)")
    return bytes(key)


def key_id(value: Any) -> str:
    if not isinstance(value, str) or not KEY_ID.fullmatch(value):
        raise ConfigError(f"an encryption key id is 1-40 letters, digits, '.', '_' or '-' (starting with a letter "
                          f"or digit), got {value!r:.60}")
    return value


@dataclass(frozen=True)
class Encryption:
    """Encrypt job arguments, results, errors and progress messages at rest.

    ``deferq.App(url, encryption=deferq.Encryption(keys={"2026-12": key2, "2026-06": key1},
    current="2026-12"))``: every value is written under the `current` key and read under
    any key it names. `every_task=False`: only the tasks declared with
    ``@app.task(encrypt=True)`` are encrypted (a task may also opt out with
    ``encrypt=False``). No keys (``Encryption()``, or `from_env` with the variable
    unset): the App still declares that it encrypts; a process without keys shows
    encrypted values as "encrypted", refuses to enqueue such jobs and cannot run them.
    """

    keys: Mapping[str, bytes | str] = field(default_factory=dict, repr=False)
    current: str | None = None
    every_task: bool = True
    _keys: dict[str, bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.keys, Mapping):
            raise ConfigError("Encryption(keys=...) takes a dict of key id -> key")
        parsed = {key_id(kid): key_bytes(kid, key) for kid, key in self.keys.items()}
        current = self.current
        if current is None and len(parsed) == 1:
            current = next(iter(parsed))
        if parsed and current not in parsed:
            raise ConfigError(f"the current encryption key {current!r} is not among the keys "
                              f"({', '.join(parsed)}): name the one new values are written under")
        if not parsed and current is not None:
            raise ConfigError(f"the current encryption key {current!r} is not among the keys (none given)")
        if not isinstance(self.every_task, bool):
            raise ConfigError(f"every_task must be true or false, got {self.every_task!r:.60}")
        object.__setattr__(self, "_keys", parsed)
        object.__setattr__(self, "current", current)

    @property
    def has_keys(self) -> bool:
        return bool(self._keys)

    def key_table(self) -> dict[str, bytes]:
        """Key id -> its 32 bytes."""
        return dict(self._keys)

    @classmethod
    def from_env(cls, every_task: bool = True, environ: Mapping[str, str] | None = None) -> Encryption:
        """The keys of DEFERQ_ENCRYPTION_KEYS: ``id:key`` pairs separated by commas, the
        first one current (``2026-12:base64...,2026-06:base64...``). Unset or empty: an
        Encryption without keys."""
        text = (os.environ if environ is None else environ).get(ENV, "")
        return cls(parse_env(text), None if not text.strip() else text.split(",")[0].split(":")[0].strip(),
                   every_task)

    def with_keys(self, other: Encryption) -> Encryption:
        """These settings with `other`'s keys (a process given its keys by the environment)."""
        return Encryption(other.key_table(), other.current, self.every_task)


def parse_env(text: str) -> dict[str, bytes]:
    """DEFERQ_ENCRYPTION_KEYS as key id -> key, in order (the first is current)."""
    keys: dict[str, bytes] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kid, sep, key = part.partition(":")
        if not sep:
            raise ConfigError(f"{ENV} holds an entry that is not id:key: write key-id:base64-key pairs "
                              "separated by commas, the current key first")
        kid = key_id(kid.strip())
        if kid in keys:
            raise ConfigError(f"{ENV} names the key id {kid!r} twice")
        keys[kid] = key_bytes(kid, key)
    return keys
