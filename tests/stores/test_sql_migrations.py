"""Migrations produce the reference schema (`tests/support/sql_schemas/<dialect>.txt`, a normalized
catalog dump); `deferq migrate` applies them once; a store older than the code, opened
with ?migrate=false, says to run `deferq migrate`. A SQLite file made before SQLite had
migrations keeps working.

After adding a migration, refresh the reference with DEFERQ_WRITE_SCHEMA=1 and review
its diff. The MySQL reference is MariaDB 10.11's SHOW CREATE TABLE (MySQL 8 prints
integer widths differently)."""

from __future__ import annotations

import functools
import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import deferq
from deferq.backends import open_backend
from deferq.backends.base import Enqueue, Outcome
from deferq.backends.search import JobQuery
from deferq.backends.sql.base import TABLES
from deferq.backends.sql.mysql import EXACT_COLLATIONS, exact_collation
from deferq.backends.sql.plans import Plan, Step
from deferq.backends.sql.sqlite import _bind as bind
from deferq.cli.main import main
from deferq.errors import ConfigError, SchemaOutdated
from deferq.job import Job, JobState, new_job_id
from deferq.worker import Worker, WorkerConfig
from tests.support.stores.mysql import SERVER as MYSQL_SERVER
from tests.support.stores.mysql import new_database
from tests.support.stores.postgres import BASE_URL as POSTGRES_BASE
from tests.support.stores.postgres import new_schema

SQL_DIR = Path(__file__).parents[2] / "src" / "deferq" / "backends" / "sql"
SCHEMAS = Path(__file__).parents[1] / "support" / "sql_schemas"  # the reference schema of each dialect


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
    ]
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


def sqlite_catalog(path: Path) -> str:
    """Tables, columns and indexes as SQLite describes them: the same for the same
    schema however its DDL was spelled (comments, IF NOT EXISTS, line breaks)."""
    conn = sqlite3.connect(path)
    read = conn.execute
    lines = []
    for (table,) in read("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall():
        for row in read('SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?)', (table,)):
            lines.append(f"column: {table} | " + " | ".join(map(str, row)))
        indexes = read('SELECT name, "unique", origin, partial FROM pragma_index_list(?) ORDER BY name', (table,))
        for name, unique, origin, partial in indexes.fetchall():
            columns = [row[0] for row in read("SELECT name FROM pragma_index_info(?) ORDER BY seqno", (name,))]
            found = read("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
            sql = found[0] if found else ""  # a WITHOUT ROWID table's key has no entry
            where = " WHERE " + " ".join(sql.split(" WHERE ", 1)[1].split()) if partial else ""
            lines.append(f"index: {table} | {name} | unique={unique} | {origin} | ({', '.join(columns)}){where}")
    conn.close()
    return "\n".join(lines) + "\n"


def check_reference(dialect: str, catalog: str) -> None:
    reference = SCHEMAS / f"{dialect}.txt"
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


@contextmanager
def fresh_postgres_schema(conn, prefix: str) -> Iterator[str]:
    """A schema of its own (not yet created), dropped afterwards."""
    schema = new_schema(prefix)
    try:
        yield schema
    finally:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def fresh_mysql_database(conn, prefix: str) -> Iterator[str]:
    """An empty database of its own, dropped afterwards."""
    database = new_database(prefix)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    try:
        yield database
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


def test_postgres_migrations(postgres_admin):
    conn, _ = postgres_admin
    with fresh_postgres_schema(conn, "deferq_migrate") as schema:
        check_migrate_command(f"{POSTGRES_BASE}?schema={schema}")
        check_reference("postgres", postgres_catalog(conn, schema))


def test_mysql_migrations(mysql_admin):
    conn, _ = mysql_admin
    with fresh_mysql_database(conn, "deferq_migrate") as database:
        check_migrate_command(f"{MYSQL_SERVER}/{database}")
        check_reference("mysql", mysql_catalog(conn, database))


def test_outdated_schema_message_on_the_command_line(postgres_admin):
    schema = new_schema("deferq_empty")
    result = CliRunner().invoke(main, ["stats", "--url", f"{POSTGRES_BASE}?schema={schema}&migrate=false"])
    assert result.exit_code == 2
    assert "run `deferq migrate`" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("url, expect", [
    (POSTGRES_BASE.rsplit("/", 1)[0] + "/deferq_no_such_db", 'database "deferq_no_such_db" does not exist'),
    (POSTGRES_BASE + "?options=-c%20no_such_setting%3D1", "unrecognized configuration parameter"),
    (MYSQL_SERVER + "/deferq_no_such_db", "Unknown database"),
])
def test_wrong_store_url_is_one_sentence(url, expect, postgres_admin, mysql_admin):
    result = CliRunner().invoke(main, ["stats", "--url", url])
    assert result.exit_code == 2 and expect in result.output, result.output
    assert "Traceback" not in result.output


def test_sqlite_migrations(tmp_path):
    path = tmp_path / "deferq.db"
    check_migrate_command(f"sqlite:///{path}")
    check_reference("sqlite", sqlite_catalog(path))


# The schema of SQLite files made before SQLite had migrations (deferq 0.1): created
# by `sqlite.py` as one script and marked with PRAGMA user_version = 1. Copied here
# as it was, to prove that such a file keeps working.
SQLITE_SCHEMA_BEFORE_MIGRATIONS = """
CREATE TABLE IF NOT EXISTS deferq_jobs (
    seq          INTEGER PRIMARY KEY,   -- enqueue order: FIFO among equal due times
    id           TEXT NOT NULL UNIQUE,
    task         TEXT NOT NULL,
    payload      BLOB NOT NULL,         -- JSON [args, kwargs]
    queue        TEXT NOT NULL,
    priority     INTEGER NOT NULL,
    state        TEXT NOT NULL,         -- queued (waiting) | active | succeeded | dead | cancelled
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    timeout      REAL,
    key          TEXT,
    run_at       REAL NOT NULL,
    created_at   REAL NOT NULL,
    lease_until  REAL,
    worker       TEXT,
    error        TEXT,
    result       BLOB,
    finished_at  REAL
);
CREATE INDEX IF NOT EXISTS deferq_jobs_waiting
    ON deferq_jobs (queue, priority, run_at, seq) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS deferq_jobs_leased
    ON deferq_jobs (lease_until) WHERE state = 'active';
CREATE UNIQUE INDEX IF NOT EXISTS deferq_jobs_live_key
    ON deferq_jobs (key) WHERE key IS NOT NULL AND state IN ('queued', 'active');
CREATE INDEX IF NOT EXISTS deferq_jobs_key ON deferq_jobs (key, seq) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS deferq_jobs_finished
    ON deferq_jobs (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS deferq_kv (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      BLOB NOT NULL,
    expires_at REAL,
    PRIMARY KEY (namespace, key)
);
"""


def test_a_sqlite_file_from_before_migrations_keeps_working(tmp_path):
    path = tmp_path / "old.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.executescript("BEGIN IMMEDIATE;" + SQLITE_SCHEMA_BEFORE_MIGRATIONS + "PRAGMA user_version = 1; COMMIT;")
    old.execute(  # a job waiting in the old file, written as the old code wrote it
        "INSERT INTO deferq_jobs (id, task, payload, queue, priority, state, max_attempts, timeout, "
        "key, run_at, created_at) VALUES ('old-1', 'double', ?, 'default', 1, 'queued', 3, NULL, "
        "'unique-1', 1.0, 1.0)",
        (b"[[20],{}]",),
    )
    old.execute("INSERT INTO deferq_kv VALUES ('topics', 't', x'01', NULL)")
    old.close()

    app = deferq.App(f"sqlite:///{path}")

    @app.task()
    def double(x):
        return x * 2

    # version 1 recognised and recorded (not re-created), the later ones applied
    assert app.backend.applied_versions() == list(range(1, app.backend.schema_version + 1))
    assert sqlite_catalog(path) == (SCHEMAS / "sqlite.txt").read_text()
    assert app.backend.kv_get("topics", "t") == b"\x01"
    assert double.options(key="unique-1").enqueue(7).id == "old-1"  # the old job holds its key
    new = double.enqueue(21)
    assert Worker(app, WorkerConfig(burst=True)).run() == 0
    assert app.get("old-1").result == 40 and app.get(new.id).result == 42
    app.close()
    again = CliRunner().invoke(main, ["migrate", "--url", f"sqlite:///{path}"])
    assert again.exit_code == 0 and "up to date" in again.output, again.output


def check_blocked_before_blocker_counts(url: str) -> None:
    """A job blocked by schema version 10 (edges, no count) is counted by migration
    0011: it stays blocked until its last parent settles, then runs."""
    old = open_backend(url, prepare_schema=False)
    old.migrations = [m for m in old.migrations if m.version <= 10]
    old.migrate()
    jobs, deps = old.names["jobs"], old.names["deps"]

    def block_as_version_10_did() -> Plan[None]:  # its columns: today's insert writes later ones
        for job_id, state in (("parent-1", "queued"), ("parent-2", "queued"), ("child", "blocked")):
            yield Step(f"INSERT INTO {jobs} (id, task, payload, queue, priority, state, max_attempts, run_at, "
                       f"created_at) VALUES ('{job_id}', 't', '[[0], {{}}]', 'default', 1, '{state}', 3, 0, 0)")
        for parent in ("parent-1", "parent-2"):
            yield Step(f"INSERT INTO {deps} (parent, child) VALUES ('{parent}', 'child')")

    old.run(block_as_version_10_did(), atomic=True)
    old.close()
    new = open_backend(url)
    try:
        leased = new.reserve(["default"], 10, "w", 60, (0, 1, 2))
        assert sorted(job.id for job in leased) == ["parent-1", "parent-2"]
        new.settle([Outcome(leased[0], "succeeded")])
        assert new.get("child").state == JobState.BLOCKED
        new.settle([Outcome(leased[1], "succeeded")])
        assert new.get("child").state == JobState.QUEUED
    finally:
        new.close()


def test_jobs_blocked_before_blocker_counts_sqlite(tmp_path):
    check_blocked_before_blocker_counts(f"sqlite:///{tmp_path}/blocked.db")


def test_jobs_blocked_before_blocker_counts_postgres(postgres_admin):
    with fresh_postgres_schema(postgres_admin[0], "deferq_blocked") as schema:
        check_blocked_before_blocker_counts(f"{POSTGRES_BASE}?schema={schema}")


def test_jobs_blocked_before_blocker_counts_mysql(mysql_admin):
    with fresh_mysql_database(mysql_admin[0], "deferq_blocked") as database:
        check_blocked_before_blocker_counts(f"{MYSQL_SERVER}/{database}")


def check_chunk_call_after_migration(url: str, before: int) -> None:
    """A job stored by schema version `before` (no chunk_call column) reads with none once
    the store is migrated; a chunk call's settle then names it, and its call finds it."""
    old = open_backend(url, prepare_schema=False)
    old.migrations = [m for m in old.migrations if m.version <= before]
    old.migrate()
    stored = old.enqueue_many([Enqueue(Job(id=new_job_id(), task="t")), Enqueue(Job(id=new_job_id(), task="t"))])
    old.close()
    new = open_backend(url)
    try:
        assert new.applied_versions()[-1] > before
        assert [new.get(job.id).chunk_call for job in stored] == [None, None]
        first, second = new.reserve(["default"], 10, "w", 60, (0, 1, 2))
        assert new.settle([Outcome(first, "succeeded", chunk_call="call-1"), Outcome(second, "succeeded")])
        assert (new.get(first.id).chunk_call, new.get(second.id).chunk_call) == ("call-1", None)
        assert [job.id for job in new.find_jobs(JobQuery(chunk="call-1")).jobs] == [first.id]
    finally:
        new.close()


def test_jobs_stored_before_chunk_calls_sqlite(tmp_path):
    check_chunk_call_after_migration(f"sqlite:///{tmp_path}/chunks.db", 15)


def test_jobs_stored_before_chunk_calls_postgres(postgres_admin):
    with fresh_postgres_schema(postgres_admin[0], "deferq_chunks") as schema:
        check_chunk_call_after_migration(f"{POSTGRES_BASE}?schema={schema}", 17)


def test_jobs_stored_before_chunk_calls_mysql(mysql_admin):
    with fresh_mysql_database(mysql_admin[0], "deferq_chunks") as database:
        check_chunk_call_after_migration(f"{MYSQL_SERVER}/{database}", 16)


def check_lists_after_leaving_active_out(url: str, before: int) -> None:
    """Jobs stored by schema version `before` (list and text indexes over every state) are
    listed by state, queue and task, and found by their text, once the newer versions
    leave active jobs out of those indexes: the active ones through the leases' index,
    the others through the list and text indexes; a claim, heartbeat and settle go on."""
    old = open_backend(url, prepare_schema=False)
    old.migrations = [m for m in old.migrations if m.version <= before]
    old.migrate()
    stored = old.enqueue_many([Enqueue(Job(id=new_job_id(), task="t", queue="q", args=("Zebra42",)))
                               for _ in range(4)])
    running, finished = old.reserve(["q"], 2, "w", 60, (0, 1, 2))
    assert old.settle([Outcome(finished, "succeeded")])
    old.close()
    new = open_backend(url)
    try:
        assert new.applied_versions()[-1] > before
        waiting = {job.id for job in stored} - {running.id, finished.id}
        for state, expect in ((JobState.ACTIVE, {running.id}), (JobState.SUCCEEDED, {finished.id}),
                              (JobState.QUEUED, waiting)):
            for where in ({}, {"queue": "q"}, {"task": "t"}):
                assert {job.id for job in new.find_jobs(JobQuery(state=state, **where)).jobs} == expect, where
        assert len(new.find_jobs(JobQuery(queue="q")).jobs) == 4
        assert len(new.find_jobs(JobQuery(text="zebra42")).jobs) == 4
        assert [job.id for job in new.find_jobs(JobQuery(text="zebra42", state=JobState.ACTIVE)).jobs] == [
            running.id]
        claimed = new.reserve(["q"], 2, "w", 60, (0, 1, 2))
        assert {job.id for job in claimed} == waiting
        assert {job.id for job in new.find_jobs(JobQuery(state=JobState.ACTIVE, queue="q")).jobs} == (
            waiting | {running.id})
        assert new.heartbeat([running], 60) == set()  # no lease lost
        assert new.settle([Outcome(job, "succeeded") for job in [running, *claimed]]) == [True] * 3
        assert len(new.find_jobs(JobQuery(state=JobState.SUCCEEDED, task="t")).jobs) == 4
        assert [job.state for job in new.list_jobs(JobState.SUCCEEDED, "q")] == [JobState.SUCCEEDED] * 4
    finally:
        new.close()


def test_postgres_jobs_listed_and_found_after_the_indexes_leave_active_jobs_out(postgres_admin):
    """Versions 19 and 20 (from 18); a list of one queue's succeeded jobs reads its index."""
    conn = postgres_admin[0]
    with fresh_postgres_schema(conn, "deferq_lists") as schema:
        check_lists_after_leaving_active_out(f"{POSTGRES_BASE}?schema={schema}", 18)
        with conn.transaction():
            conn.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(row[0] for row in conn.execute(
                f"EXPLAIN SELECT id FROM \"{schema}\".deferq_jobs WHERE queue = 'q' AND state = 'succeeded' "
                "ORDER BY seq DESC LIMIT 50"))
        assert "deferq_jobs_queue_state" in plan, plan


def test_sqlite_jobs_listed_and_found_after_the_lists_leave_active_jobs_out(tmp_path):
    """Version 17 (from 16); each page of a list reads an index: the list indexes, or the
    leases' for active jobs (a plan that scans the table would read every job)."""
    path = tmp_path / "lists.db"
    check_lists_after_leaving_active_out(f"sqlite:///{path}", 16)
    backend = open_backend(f"sqlite:///{path}")
    plans: list[str] = []

    def explained(conn: sqlite3.Connection, step: Step) -> Any:
        if step.sql.startswith("SELECT") and "ORDER BY seq DESC" in step.sql:
            plans.append(" | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {step.sql}",
                                                                        bind(step.sql, step.params))))
        return backend.execute(conn, step)

    try:
        backend.connection()
        backend._local.execute = functools.partial(explained, backend._local.conn)
        for state in JobState:
            for where in ({}, {"queue": "q"}, {"task": "t"}, {"chunk": "c"}):
                plans.clear()
                backend.find_jobs(JobQuery(state=state, **where))
                assert plans and all("USING" in plan for plan in plans), (state, where, plans)
                assert all("INDEX deferq_jobs_chunk_call" in plan for plan in plans) == ("chunk" in where), plans
    finally:
        backend.close()


def test_mysql_keys_stored_before_exact_names_are_kept_and_told_apart(mysql_admin):
    """A database of schema version 14 (PAD SPACE: 'k' = 'k '), with a job holding key
    'k' and a kv record: migration 0015 keeps both, and then 'k ' is a key of its own."""
    with fresh_mysql_database(mysql_admin[0], "deferq_exact") as database:
        url = f"{MYSQL_SERVER}/{database}"
        old = open_backend(url, prepare_schema=False)
        old.migrations = [m for m in old.migrations if m.version <= 14]
        old.migrate()
        holder = old.enqueue_many([Enqueue(Job(id=new_job_id(), task="t", key="k"))])[0]
        old.kv_put("ns", "a", b"1")
        old.close()
        new = open_backend(url)
        try:
            assert new.get_by_key("k").id == holder.id and new.kv_get("ns", "a") == b"1"
            spaced = new.enqueue_many([Enqueue(Job(id=new_job_id(), task="t", key="k "))])[0]
            assert spaced.id != holder.id and new.get_by_key("k ").id == spaced.id
            assert new.kv_get("ns", "a ") is None
        finally:
            new.close()


def test_a_mysql_server_without_a_no_pad_collation_is_refused_with_a_sentence(mysql_admin):
    """MySQL before 8.0.17 has neither NO PAD collation: asked for names it lacks, as such
    a server would answer, the migration stops with one sentence."""
    with mysql_admin[0].cursor() as cur:
        assert exact_collation(cur) in EXACT_COLLATIONS
        with pytest.raises(ConfigError, match=r"no NO PAD collation.*use MySQL 8\.0\.17\+ or MariaDB 10\.2\+"):
            exact_collation(cur, ("utf8mb4_no_such_bin",))


@pytest.mark.parametrize("kind", ["trgm", "words"])
def test_postgres_text_index_made_again_without_encrypted_values(postgres_admin, kind):
    """A database of schema version 16, its text index (trigrams, or words as made where
    pg_trgm is missing) holding sealed arguments and a sealed error: migration 0017
    indexes it again, of the same kind, leaving them out. A search then finds the plain
    job by its words, never a sealed one by a piece of its ciphertext, and the planner
    reads the index for it (its expression is the queries')."""
    from deferq.encryption import Encryption, Keyring, new_key
    from deferq.encryption.jobs import bound

    ring = Keyring(Encryption(keys={"k": new_key()}))
    with fresh_postgres_schema(postgres_admin[0], "deferq_sealed") as schema:
        url = f"{POSTGRES_BASE}?schema={schema}"
        old = open_backend(url, prepare_schema=False)
        old.migrations = [m for m in old.migrations if m.version <= 16]
        old.migrate()
        conn = postgres_admin[0]
        if kind == "words":  # as migration 0009 indexes without pg_trgm
            conn.execute(f'DROP INDEX "{schema}".deferq_jobs_text_trgm')
            conn.execute(f'CREATE INDEX deferq_jobs_text_words ON "{schema}".deferq_jobs USING gin '
                         "(to_tsvector('simple', payload::text || ' ' || coalesce(error, '') || ' ' || "
                         "coalesce(unique_key, '')))")
        sealed_id, failed_id = new_job_id(), new_job_id()
        sealed = ring.seal(b'[["Zebra42 secret"],{}]', bound(sealed_id, "args"))
        error = ring.seal(b"Traceback: Zebra42 secret", bound(failed_id, "error"))
        plain = old.enqueue_many([Enqueue(Job(id=new_job_id(), task="t", args=("Zebra42 plain",)))])[0]
        payload = b'[[],{"$enc":"' + sealed.encode() + b'"}]'  # as encryption/jobs.py stores them
        old.enqueue_many([Enqueue(Job(id=sealed_id, task="t"), payload=payload),
                          Enqueue(Job(id=failed_id, task="t"))])
        old.close()
        conn.execute(f'UPDATE "{schema}".deferq_jobs SET state = %s, error = %s WHERE id = %s',
                     ("dead", error, failed_id))  # as a settle of version 16 wrote it (today's reads chunk_call)
        new = open_backend(url)
        try:
            assert new.applied_versions()[-1] >= 17
            found = new.find_jobs(JobQuery(text="zebra42"))
            how = {"trgm": "index", "words": "words"}[kind]
            assert [job.id for job in found.jobs] == [plain.id] and found.text_search == how
            for piece in (sealed[-20:-4], error[-20:-4], "enc"):  # the ciphertext is not searched
                assert new.find_jobs(JobQuery(text=piece)).jobs == [], piece
            index = f"deferq_jobs_text_{kind}"
            indexdefs = [row[0] for row in conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname LIKE 'deferq_jobs_text_%%'",
                (schema,))]
            assert len(indexdefs) == 1 and index in indexdefs[0], indexdefs
            assert "deferq_search_text(payload, error, unique_key)" in indexdefs[0]
            query, params = {"trgm": (new.q["find_text"], {"pattern": "%zebra42%"}),
                             "words": (new.q["find_words"], {"text": "zebra42"})}[kind]
            with conn.transaction(force_rollback=True):  # the other indexes dropped meanwhile: on
                conn.execute("SET LOCAL enable_seqscan = off")  # three rows they would be cheaper
                for (other,) in conn.execute(
                        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'deferq_jobs' "
                        "AND indexname NOT LIKE 'deferq_jobs_text_%%' AND indexname <> 'deferq_jobs_pkey'",
                        (schema,)).fetchall():
                    conn.execute(f'DROP INDEX "{schema}".{other}')
                plan = "\n".join(row[0] for row in conn.execute(  # a state the index holds (not 'active')
                    f"EXPLAIN SELECT id FROM \"{schema}\".deferq_jobs WHERE state = 'dead' AND {query}", params))
            assert index in plan, plan
        finally:
            new.close()
