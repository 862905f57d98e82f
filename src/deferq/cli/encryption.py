"""`deferq encryption new-key | rotate`: keys for encryption at rest (docs/encryption.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..app import App
from ..encryption import ENV, Encryption, new_key
from ..errors import ConfigError
from ..observe.output import print_json
from ..upkeep.rotation import rotate

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def encryption_group(store_options: Decorator) -> click.Group:
    @click.group()
    def encryption() -> None:
        """Keys for encrypting job arguments and results at rest."""

    @encryption.command("new-key")
    def new_key_command() -> None:
        """Print a new random key (32 bytes, URL-safe base64), for DEFERQ_ENCRYPTION_KEYS or
        deferq.Encryption(keys=...)."""
        click.echo(new_key())

    @encryption.command("rotate")
    @store_options
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    def rotate_command(app: App, as_json: bool) -> None:
        """Re-encrypt under the current key every value stored under another key (the
        current key is the first of DEFERQ_ENCRYPTION_KEYS, or the App's `current`); workers
        and producers go on meanwhile. Run it again if it reports values changed meanwhile."""
        declared = app.encryption
        if declared is None or not declared.has_keys:
            raise click.UsageError(f"no encryption keys: set {ENV} (the new key first, then the old ones) "
                                   "or name an App that has its keys (--app)")
        sealer = app.registry.chain.sealer
        assert sealer is not None  # app.encryption is its sealer's
        try:
            done = rotate(app.backend, sealer, app.result_ttl)
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from None
        if as_json:
            print_json(done.to_dict())
        else:
            click.echo(f"re-encrypted {done.resealed} value(s) under key {done.current!r}; "
                       f"{done.changed} changed meanwhile, {done.unreadable} could not be opened")
            for problem in done.problems[:10]:
                click.echo(f"  {problem}")
        if done.unreadable:
            raise SystemExit(1)

    return encryption


__all__ = ["Encryption", "encryption_group"]
