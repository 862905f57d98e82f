"""Sealed values: AES-256-GCM with a 96-bit nonce never used before, as text a store keeps
anywhere.

    $enc:<key id>:<base64 of nonce + ciphertext + tag>

The associated data (`bound`) names the job and the field a value belongs to, so a
value copied into another job or field does not open (it reads as tampered).
"""

from __future__ import annotations

import binascii
import itertools
import os

from ..backends.search import ENCRYPTED
from ..errors import ConfigError
from .keys import Encryption

MARK = ENCRYPTED  # how every sealed value starts; text search leaves such values out
NONCE = 12
TAG = 16
_NONCE_SPACE = (1 << (8 * NONCE)) - 1
_AFTER_MARK = len(MARK)


class _Nonces:
    """This process's nonces: a random 96-bit start, then counting up from it (no system
    call per value, as os.urandom made: 0.1 against 0.3 µs alone, 1.3 in a worker).
    Under one key a nonce must never repeat. Within a process the count does not; two
    processes repeat one only if the runs counted from their random starts overlap, far
    less likely than two random nonces meeting. A forked child starts afresh
    (os.register_at_fork): it must not count on from its parent's place. `next` on an
    itertools.count is one indivisible step under the GIL, so threads never share a value."""

    def __init__(self) -> None:
        self.reseed()
        os.register_at_fork(after_in_child=self.reseed)

    def reseed(self) -> None:
        self._start, self._count = int.from_bytes(os.urandom(NONCE), "big"), itertools.count()

    def next(self) -> bytes:
        return ((self._start + next(self._count)) & _NONCE_SPACE).to_bytes(NONCE, "big")


next_nonce = _Nonces().next


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
            from pybase64 import b64decode, b64encode, b64encode_as_string
        except ImportError as exc:
            package = (exc.name or "cryptography").split(".")[0]
            raise ConfigError(f"encryption needs the {package} package: install deferq's encryption extra "
                              "(pip install 'deferq[encryption]')") from None

        self._invalid = InvalidTag
        # pybase64 (SIMD): the standard library's base64 took 3.2 µs to read 1.4 KB, more
        # than AES-GCM took to open it; both are strict (a stray character is refused)
        self._encode, self._encode_text, self._decode = b64encode, b64encode_as_string, b64decode
        self.ciphers = {kid: AESGCM(key) for kid, key in encryption.key_table().items()}
        self.current = encryption.current
        self._writer = self.ciphers[self.current] if self.current is not None else None
        self._head_text = f"{MARK}{self.current}:"
        self._head = self._head_text.encode()

    def seal(self, data: bytes, bound: bytes) -> str:
        """`data` sealed under the current key, bound to `bound`: one base64 text of the
        nonce, ciphertext and tag (the nonce's 12 bytes are 16 characters without padding)."""
        if (writer := self._writer) is None:
            raise self._no_writer()
        nonce = next_nonce()
        return self._head_text + self._encode_text(nonce + writer.encrypt(nonce, data, bound))

    def seal_ascii(self, data: bytes, bound: bytes, before: bytes = b"", after: bytes = b"") -> bytes:
        """`seal` as ASCII bytes, between `before` and `after`: a stored payload made in one
        copy (each copy of a 1 KB value costs, with the allocations, more than AES-GCM)."""
        if (writer := self._writer) is None:
            raise self._no_writer()
        nonce = next_nonce()
        return b"".join((before, self._head, self._encode(nonce + writer.encrypt(nonce, data, bound)), after))

    @staticmethod
    def _no_writer() -> Unreadable:
        return Unreadable("this process has no encryption key to write with: set DEFERQ_ENCRYPTION_KEYS "
                          "(or give the App its keys)")

    def opened(self, value: str, bound: bytes) -> bytes | None:
        """The bytes a sealed value holds, or None when they cannot be had (`open` says why).
        The path every job takes, so as few steps as can be: a value that is not base64, too
        short or changed fails in `decrypt` all the same (AES-GCM takes no nonce under 8
        bytes nor a ciphertext shorter than its tag)."""
        end = value.find(":", _AFTER_MARK)
        cipher = self.ciphers.get(value[_AFTER_MARK:end]) if end > 0 and value.startswith(MARK) else None
        if cipher is None:
            return None
        try:  # arguments by position: pybase64 parses keywords slowly (0.5 against 0.3 µs for 1.4 KB)
            raw = self._decode(value[end + 1:], None, True)
            # bytes slices: cryptography takes a memoryview's twice as slowly (1.8 against 0.9 µs a KB)
            return cipher.decrypt(raw[:NONCE], raw[NONCE:], bound)
        except (self._invalid, binascii.Error, ValueError):
            return None

    def open(self, value: str, bound: bytes, what: str = "the value") -> bytes:
        """The bytes a sealed value holds; Unreadable with one sentence when they cannot be had."""
        plain = self.opened(value, bound)
        if plain is None:
            raise self.refusal(value, bound, what)
        return plain

    def refusal(self, value: str, bound: bytes, what: str) -> Unreadable:
        """Why `opened` had nothing, as one sentence (the checks it leaves to AES-GCM, in order)."""
        end = value.find(":", _AFTER_MARK)
        if end < 0 or not value.startswith(MARK):
            return Unreadable(f"{what} cannot be decrypted: it names no key (not a value deferq encrypted)")
        kid = value[_AFTER_MARK:end]
        cipher = self.ciphers.get(kid)
        if cipher is None:
            return Unreadable(f"{what} cannot be decrypted: key {kid[:40]!r} is not among this process's keys "
                              "(add it to DEFERQ_ENCRYPTION_KEYS or to the App's Encryption keys)")
        try:
            raw = self._decode(value[end + 1:], None, True)
        except (binascii.Error, ValueError):
            return Unreadable(f"{what} cannot be decrypted: its encrypted text is not base64 (changed or cut "
                              "short)")
        if len(raw) < NONCE + TAG:
            return Unreadable(f"{what} cannot be decrypted: {len(raw)} encrypted bytes are too few (cut short)")
        return Unreadable(f"{what} cannot be decrypted with key {kid!r}: the key is not the one it was "
                          "written with, or the value was changed, cut short or copied from another job")
