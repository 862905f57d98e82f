"""Migrations produce the reference schema (`<dialect>/schema.txt`, a normalized
catalog dump); `deferq migrate` applies them once; a store older than the code, opened
with ?migrate=false, says to run `deferq migrate`.

After adding a migration, refresh the reference with DEFERQ_WRITE_SCHEMA=1 and review
its diff. The MySQL reference is MariaDB 10.11's SHOW CREATE TABLE (MySQL 8 prints
integer widths differently)."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from deferq.backends import open_backend
from deferq.backends.sql.common import TABLES
from deferq.cli import main
from deferq.errors import SchemaOutdated

from .stores.mysql import SERVER as MYSQL_SERVER
from .stores.postgres import BASE_URL as POSTGRES_BASE

SQL_DIR = Path(__file__).parent.parent / "src" / "deferq" / "backends" / "sql"


def postgres_catalog(conn, schema: str) -> str:
    queries = [
        ("column", "SELECT table_name, column_name, data_type, is_nullable, column_default, "
                   "is_identity, identity_generation FROM information_schema.columns "
                   "WHERE table_schema = %(s)s ORDER BY table_name, ordinal_position"),
        ("constraint", "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
                       "FROM pg_constraint WHERE connamespace = %(s)s::regnamespace ORDER BY 2"),
        ("index", "SELECT indexdef FROM pg_indexes WHERE schemaname = %(s)s ORDER BY indexname"),
        ("trigger", "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c "
                    "ON c.oid = t.tgrelid WHERE c.relnamespace = %(s)s::regnamespace "
                    "AND NOT t.tgisinternal ORDER BY t.tgname"),
        ("options", "SELECT relname, reloptions FROM pg_class WHERE relnamespace = "
                    "%(s)s::regnamespace AND relkind = 'r' ORDER BY relname"),
        ("function", "SELECT proname, md5(prosrc) FROM pg_proc WHERE pronamespace = "
                     "%(s)s::regnamespace ORDER BY proname"),
    ]  # fmt: skip
    lines = []
    for kind, sql in queries:
        for row in conn.execute(sql, {"s": schema}):
            lines.append(f"{kind}: " + " | ".join(map(str, row)))
    return "\n".join(lines).replace(f"{schema}.", "<schema>.").replace(f'"{schema}".', "<schema>.") + "\n"


def mysql_catalog(conn, database: str) -> str:
    lines = []
    with conn.cursor() as cur:
        for table in TABLES.values():
            cur.execute(f"SHOW CREATE TABLE `{database}`.`{table}`")
            lines.append(re.sub(r" AUTO_INCREMENT=\d+", "", cur.fetchone()[1]))
    return "\n".join(lines) + "\n"


def check_reference(dialect: str, catalog: str) -> None:
    reference = SQL_DIR / dialect / "schema.txt"
    if os.environ.get("DEFERQ_WRITE_SCHEMA") == "1":
        reference.write_text(catalog)
    assert catalog == reference.read_text(), (
        f"the migrations no longer produce {reference}: if that is intended, run with "
        "DEFERQ_WRITE_SCHEMA=1 and review the diff"
    )


def check_migrate_command(url: str) -> None:
    """Outdated store -> clear message; `deferq migrate` fixes it, once."""
    with pytest.raises(SchemaOutdated, match="run `deferq migrate`"):
        open_backend(url + ("&" if "?" in url else "?") + "migrate=false")
    runner = CliRunner()
    first = runner.invoke(main, ["migrate", "--url", url])
    assert first.exit_code == 0 and "applied 0001_initial" in first.output, first.output
    again = runner.invoke(main, ["migrate", "--url", url])
    assert again.exit_code == 0 and "up to date" in again.output
    assert runner.invoke(main, ["stats", "--json", "--url", url]).exit_code == 0
    open_backend(url + ("&" if "?" in url else "?") + "migrate=false").close()


def test_postgres_migrations(postgres_admin):
    conn, _ = postgres_admin
    schema = f"deferq_migrate_{uuid.uuid4().hex[:8]}"
    try:
        check_migrate_command(f"{POSTGRES_BASE}?schema={schema}")
        check_reference("postgres", postgres_catalog(conn, schema))
    finally:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_mysql_migrations(mysql_admin):
    conn, _ = mysql_admin
    database = f"deferq_migrate_{uuid.uuid4().hex[:8]}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    try:
        check_migrate_command(f"{MYSQL_SERVER}/{database}")
        check_reference("mysql", mysql_catalog(conn, database))
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


def test_outdated_schema_message_on_the_command_line(postgres_admin):
    schema = f"deferq_empty_{uuid.uuid4().hex[:8]}"
    result = CliRunner().invoke(main, ["stats", "--url", f"{POSTGRES_BASE}?schema={schema}&migrate=false"])
    assert result.exit_code == 2
    assert "run `deferq migrate`" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("url, expect", [
    (POSTGRES_BASE.rsplit("/", 1)[0] + "/deferq_no_such_db", 'database "deferq_no_such_db" does not exist'),
    (POSTGRES_BASE + "?options=-c%20no_such_setting%3D1", "unrecognized configuration parameter"),
    (MYSQL_SERVER + "/deferq_no_such_db", "Unknown database"),
])  # fmt: skip
def test_wrong_store_url_is_one_sentence(url, expect, postgres_admin, mysql_admin):
    result = CliRunner().invoke(main, ["stats", "--url", url])
    assert result.exit_code == 2 and expect in result.output, result.output
    assert "Traceback" not in result.output
