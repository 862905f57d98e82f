"""Printing for the commands: JSON as `deferq ... --json` shows it.

A module of its own so that the subcommands' bodies (supervisor/cli.py) print the
same way as deferq/cli.py without importing it; it needs no click.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson


def print_json(value: Any) -> None:
    """`value` as indented JSON on stdout; what JSON lacks (datetimes, enums) as str()."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode() + "\n")
    sys.stdout.flush()
