"""Sealed values: AES-256-GCM with a fresh 96-bit nonce, as text a store keeps anywhere.

    $enc:<key id>:<base64 of nonce + ciphertext + tag>

The associated data (`bound`) names the job and the field a value belongs to, so a
value copied into another job or field does not open (it reads as tampered).
"""

from __future__ import annotations

import binascii
import os

from ..backends.search import ENCRYPTED
from ..errors import ConfigError
from .keys import Encryption

MARK = ENCRYPTED  # how every sealed value starts; text search leaves such values out
NONCE = 12
TAG = 16


class Unreadable(ValueError):
    """A sealed value that cannot be opened here: its sentence says why (no such key,
    wrong key or changed bytes, not a sealed value)."""


def sealed(value: object) -> bool:
    return type(value) is str and value.startswith(MARK)


def key_of(value: str) -> str:
    """The key id a sealed value names ("" if it names none)."""
    kid, sep, _ = value[len(MARK):].partition(":")
    return kid if sep else ""


def size_of(value: str) -> int:
    """The bytes of plain text a sealed value holds (what a process without the key shows)."""
    body = value[len(MARK):].partition(":")[2]
    return max(0, len(body) * 3 // 4 - body.count("=") - NONCE - TAG)


class Keyring:
    """An Encryption's keys, ready to seal and open: one AESGCM per key, made once."""

    def __init__(self, encryption: Encryption) -> None:
        try:  # the encryption extra: imported only by a process given keys
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            from pybase64 import b64decode, b64encode
        except ImportError as exc:
            package = (exc.name or "cryptography").split(".")[0]
            raise ConfigError(f"encryption needs the {package} package: install deferq's encryption extra "
                              "(pip install 'deferq[encryption]')") from None

        self._invalid = InvalidTag
        # pybase64 (SIMD): the standard library's base64 took 3.2 µs to read 1.4 KB, more
        # than AES-GCM took to open it; both are strict (a stray character is refused)
        self._encode, self._decode = b64encode, b64decode
        self.ciphers = {kid: AESGCM(key) for kid, key in encryption.key_table().items()}
        self.current = encryption.current
        self._writer = self.ciphers[self.current] if self.current is not None else None
        self._head = f"{MARK}{self.current}:".encode()

    def seal(self, data: bytes, bound: bytes) -> str:
        """`data` sealed under the current key, bound to `bound`."""
        return self.seal_ascii(data, bound).decode()

    def seal_ascii(self, data: bytes, bound: bytes, before: bytes = b"", after: bytes = b"") -> bytes:
        """`seal` as ASCII bytes, between `before` and `after`: a stored payload made in one
        copy (each copy of a 1 KB value costs, with the allocations, more than AES-GCM)."""
        if self._writer is None:
            raise Unreadable("this process has no encryption key to write with: set DEFERQ_ENCRYPTION_KEYS "
                             "(or give the App its keys)")
        nonce = os.urandom(NONCE)  # 12 bytes: base64 of its own, 16 characters, as it is of nonce + rest
        sealed = self._writer.encrypt(nonce, data, bound)
        return b"".join((before, self._head, self._encode(nonce), self._encode(sealed), after))

    def open(self, value: str, bound: bytes, what: str = "the value") -> bytes:
        """The bytes a sealed value holds; Unreadable with one sentence when they cannot be had."""
        end = value.find(":", len(MARK))
        if end < 0 or not value.startswith(MARK):
            raise Unreadable(f"{what} cannot be decrypted: it names no key (not a value deferq encrypted)")
        kid = value[len(MARK):end]
        cipher = self.ciphers.get(kid)
        if cipher is None:
            raise Unreadable(f"{what} cannot be decrypted: key {kid[:40]!r} is not among this process's keys "
                             "(add it to DEFERQ_ENCRYPTION_KEYS or to the App's Encryption keys)")
        try:
            raw = self._decode(value[end + 1:], validate=True)
        except (binascii.Error, ValueError):
            raise Unreadable(f"{what} cannot be decrypted: its encrypted text is not base64 (changed or cut "
                             "short)") from None
        if len(raw) < NONCE + TAG:
            raise Unreadable(f"{what} cannot be decrypted: {len(raw)} encrypted bytes are too few (cut short)")
        try:  # bytes slices: cryptography takes a memoryview's twice as slowly (1.8 against 0.9 µs a KB)
            return cipher.decrypt(raw[:NONCE], raw[NONCE:], bound)
        except self._invalid:
            raise Unreadable(f"{what} cannot be decrypted with key {kid!r}: the key is not the one it was "
                             "written with, or the value was changed, cut short or copied from another job"
                             ) from None
