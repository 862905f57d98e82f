"""Encryption at rest of job arguments, results, errors, progress messages, durable step
results and event data (docs/encryption.md). Needs the `cryptography` package (deferq's
encryption extra) once keys are given."""

from .envelope import Keyring, Unreadable
from .jobs import Sealer
from .keys import ENV, Encryption, new_key

__all__ = ["ENV", "Encryption", "Keyring", "Sealer", "Unreadable", "new_key"]
