"""Named queries and numbered migrations, read from the `.sql` files of one database.

A queries file is a list of blocks, each opened by a `-- name: NAME` line. Comment
lines are dropped (they document, the server needn't read them). `{word}` inserts
another block (a fragment such as `job_columns`) or a name of the backend's
(table names, the clock expression); any other brace is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
NAME_LINE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
PLACEHOLDER = re.compile(r"\{(\w+)\}")
MIGRATION_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
STATEMENT_END = re.compile(r";\s*$", re.MULTILINE)


def render(sql: str, names: Mapping[str, str]) -> str:
    """Replace `{word}` by `names[word]` where known, repeatedly (fragments nest)."""
    for _ in range(5):
        rendered = PLACEHOLDER.sub(lambda m: names.get(m.group(1), m.group(0)), sql)
        if rendered == sql:
            break
        sql = rendered
    return sql


def _strip_comments(sql: str) -> str:
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()


def load_queries(dialect: str, names: Mapping[str, str]) -> dict[str, str]:
    """The named queries of `<dialect>/queries.sql`, rendered with `names`."""
    text = (HERE / dialect / "queries.sql").read_text()
    parts = NAME_LINE.split(text)
    raw = {name: _strip_comments(body) for name, body in zip(parts[1::2], parts[2::2], strict=True)}
    scope = {**raw, **names}
    return {name: render(body, scope) for name, body in raw.items()}


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"

    @property
    def statements(self) -> list[str]:
        """The statements one by one, for drivers that run one at a time (a statement
        ends with `;` at the end of a line; comment-only pieces are dropped)."""
        pieces = (_strip_comments(piece) for piece in STATEMENT_END.split(self.sql))
        return [piece for piece in pieces if piece]

    @property
    def record(self) -> dict[str, object]:
        """Parameters of the `record_migration` query."""
        return {"version": self.version, "name": self.name}


def load_migrations(dialect: str, names: Mapping[str, str]) -> list[Migration]:
    """`<dialect>/migrations/NNNN_name.sql`, in order, rendered with `names`."""
    found = []
    for path in sorted((HERE / dialect / "migrations").iterdir()):
        match = MIGRATION_FILE.match(path.name)
        if match:
            found.append(Migration(int(match[1]), match[2], render(path.read_text(), names)))
    return found
