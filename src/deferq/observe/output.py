"""Printing for the commands: JSON as `deferq ... --json` shows it, and text for a person.

A module of its own so that the subcommands' bodies (cli/run.py, cli/serve.py)
and the status report print the same way as deferq/cli/main.py without importing it; it
needs no click.

Text output follows two rules: a time is shown as ISO 8601 (UTC) with a relative form
("2026-11-22T10:04:05Z (in 4 min)", from `when`), and no line is wider than the
terminal (`width()`: $COLUMNS, else the terminal, else 80). `--json` keeps epoch seconds.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from ..encryption.jobs import hidden, sealed

DEFAULT_WIDTH = 80
_UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def print_json(value: Any) -> None:
    """`value` as indented JSON on stdout; what JSON lacks (datetimes, enums) as str()."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode() + "\n")
    sys.stdout.flush()


def say(message: str) -> None:
    """A note for the person at the terminal, on stderr (stdout stays the command's output)."""
    sys.stderr.write(f"deferq: {message}\n")
    sys.stderr.flush()


# -- times ----------------------------------------------------------------------------


def iso(epoch: float) -> str:
    """Epoch seconds as ISO 8601 in UTC, to the second: 2026-11-22T10:04:05Z."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def span(seconds: float) -> str:
    """A length of time in its largest whole unit: 12 s, 4 min, 2 h, 3 d."""
    seconds = abs(seconds)
    for size, unit in _UNITS:
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{seconds:.1f} s"


def relative(epoch: float, now: float | None = None) -> str:
    """"in 4 min", "2 h ago", or "now" within a second."""
    delta = epoch - (time.time() if now is None else now)
    if abs(delta) < 1:
        return "now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def when(epoch: float | None, now: float | None = None) -> str:
    """The one form of a time in text output: "2026-11-22T10:04:05Z (in 4 min)"; "-" for none."""
    if not epoch:
        return "-"
    return f"{iso(epoch)} ({relative(epoch, now)})"


# -- width ----------------------------------------------------------------------------


def width() -> int:
    """Columns to fit: $COLUMNS, else the terminal's, else 80 (never below 40)."""
    return max(40, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def fit(line: str, columns: int | None = None) -> list[str]:
    """One line wrapped to the width, continuation lines indented two more than the first."""
    columns = columns or width()
    if len(line) <= columns:
        return [line]
    indent = " " * (len(line) - len(line.lstrip(" ")))
    return textwrap.wrap(line.strip(), columns, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False) or [line[:columns]]


def fit_all(lines: Iterable[str], columns: int | None = None) -> list[str]:
    columns = columns or width()
    return [part for line in lines for part in fit(line, columns)]


def aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as lines whose columns line up (two spaces between; the last column not padded)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def clip(text: str, columns: int) -> str:
    """`text` cut to `columns` characters, with an ellipsis when cut."""
    return text if len(text) <= columns else text[: max(0, columns - 1)] + "…"


def safe_url(url: str) -> str:
    """A store URL fit to print: any password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


# -- jobs -----------------------------------------------------------------------------


def job_lines(job: dict[str, Any], now: float | None = None) -> list[str]:
    """One job (as `Job.to_dict()` gives it) for a person: what `deferq job` prints."""
    now = time.time() if now is None else now
    timeout = "the task's" if job.get("timeout") is None else f"{job['timeout']:g} s"
    rows: list[tuple[str, str]] = [
        ("queue", f"{job['queue']} (priority {job['priority']})"),
        ("attempts", f"{job['attempts']} of {job['max_attempts']}, timeout {timeout}"),
        ("created", when(job.get("created_at"), now)),
        ("due", when(job.get("run_at"), now)),
    ]
    if job.get("key"):
        rows.insert(1, ("key", job["key"]))
    if job.get("lease_until"):
        rows.append(("leased", f"until {when(job['lease_until'], now)} by {job.get('worker') or '?'}"))
    if job.get("progress") is not None:
        message = f": {job['progress_message']}" if job.get("progress_message") else ""
        rows.append(("progress", f"{job['progress']:.0%}{message}"))
    if job.get("finished_at"):
        rows.append(("finished", when(job["finished_at"], now)))
    if job.get("updated_at"):
        rows.append(("updated", when(job["updated_at"], now)))
    if job.get("last_worker"):
        rows.append(("ran on", job["last_worker"]))
    if job.get("chunk_call"):  # deferq jobs --chunk lists the call's jobs
        rows.append(("call", job["chunk_call"]))
    if job.get("remark"):
        rows.append(("remark", job["remark"]))
    rows.append(("args", orjson.dumps(job.get("args", [])).decode()))
    if job.get("kwargs"):
        rows.append(("kwargs", orjson.dumps(job["kwargs"]).decode()))
    if job.get("result") is not None:
        rows.append(("result", orjson.dumps(job["result"], default=str).decode()))
    lines = [f"job {job['id']}: {job['task']}, {job['state']}"]
    lines += [f"  {label:<9} {value}" for label, value in rows]
    if job.get("error"):
        lines.append("  error:")
        lines += [f"    {line}" for line in str(job["error"]).rstrip().splitlines()]
    return fit_all(lines)


def last_error_line(error: str | None) -> str:
    """The line of an error that says the most: the last of a traceback."""
    if sealed(error) and error is not None:  # encrypted, and this process cannot open it
        return hidden(error)
    lines = (error or "").strip().splitlines()
    return lines[-1].strip() if lines else ""
