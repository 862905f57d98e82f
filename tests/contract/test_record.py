"""The stored job record is declared once (job.Job's fields and their `Stored`): every
store's columns, reads and inserts, the Redis hash reader and the HTTP API's job are
held to that declaration, so a store that forgets a field fails here."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from pathlib import Path

import msgspec
import pytest

from deferq import options
from deferq.backends.base import Enqueue
from deferq.backends.redis import codec as redis_codec
from deferq.backends.sql import rows
from deferq.backends.sql.queries import load_queries
from deferq.job import (
    COLUMNS,
    HTTP_FIELDS,
    NEW_COLUMNS,
    NEW_FIELDS,
    RECORD,
    Job,
    JobState,
    dumps,
    encode_payload,
    new_job_id,
    stamped,
)
from deferq.options import JobOptions, JobOptionsKw, TaskDefaults, TaskOptions
from deferq.server.api import jobs as api_jobs
from deferq.server.api import models

SQL = Path(rows.__file__).parent
DIALECTS = ("sqlite", "postgres", "mysql")
RENAMED = {"sqlite": {}, "postgres": {"key": "unique_key"}, "mysql": {"key": "unique_key"}}  # KEY is reserved

# A value for every field, none of them its default: a field left out of a store's write
# or read comes back as its default and fails the comparison. A new field needs one here.
SAMPLE = {
    "id": "01J0RECORD0000000000000001", "task": "mail.send", "args": (1, "two"), "kwargs": {"to": "a@b.c"},
    "queue": "mail", "priority": 0, "state": JobState.ACTIVE, "attempts": 2, "max_attempts": 7,
    "timeout": 42.5, "key": "order-9", "run_at": 2_000_000_000.0, "created_at": 1_999_999_990.0,
    "lease_until": 2_000_000_030.0, "worker": "w-1", "error": "boom", "result": {"ok": [1, 2]},
    "finished_at": 2_000_000_020.0, "meta": {"trace": "t-1"}, "progress": 0.5, "progress_message": "half",
    "cancel_requested": True, "expires_at": 2_100_000_000.0, "updated_at": 2_000_000_010.0,
    "remark": "for people", "last_worker": "w-0", "tags": ("billing", "customer:42"),
    "fair_key": "customer:42", "waits_for": "payment\tuser:42", "chunk_call": "01J0CHUNKCALL0000000000001",
}


def test_every_field_has_a_sample_that_is_not_its_default():
    assert set(SAMPLE) == set(RECORD), "give a new field of job.Job a sample value in SAMPLE"
    for f in fields(Job):
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        assert SAMPLE[f.name] != default, f.name


JSON_FIELDS = [name for name, spec in RECORD.items() if spec.json]  # kept as JSON text (Stored.json)


def sample() -> Job:
    return Job(**SAMPLE)


def column_list(sql: str) -> list[str]:
    return [re.sub(r"::\w+$", "", name.strip()) for name in sql.split(",")]


def queries(dialect: str) -> dict[str, str]:
    return load_queries(dialect, {"jobs": "deferq_jobs", "now": "NOW"})


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_reads_the_declared_columns_in_order(dialect):
    rename = RENAMED[dialect]
    assert column_list(queries(dialect)["job_columns"]) == [rename.get(c, c) for c in COLUMNS]
    assert rows.WIDTH == len(COLUMNS)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_inserts_every_field_a_new_job_sets(dialect):
    rename = RENAMED[dialect]
    wanted = {rename.get(c, c) for c in NEW_COLUMNS}
    found = {name: sql for name, sql in queries(dialect).items() if name.startswith("enqueue")}
    assert found
    for name, sql in found.items():
        listed = re.search(r"INSERT[^(]*\(([^)]*)\)", sql)
        assert listed is not None, name
        # vtime: the store's own, a fair job's virtual time (backends/fair.py), not a field
        assert set(column_list(listed[1])) - {"vtime"} == wanted, f"{dialect} {name}"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_has_a_column_for_every_stored_field(dialect):
    schema = (Path(__file__).parents[1] / "support" / "sql_schemas" / f"{dialect}.txt").read_text()
    held = set(re.findall(r"^column: deferq_jobs \| (\w+) ", schema, re.MULTILINE))
    if dialect == "mysql":  # SHOW CREATE TABLE
        table = schema.split("CREATE TABLE `deferq_jobs`")[1].split(";")[0]
        held = set(re.findall(r"^  `(\w+)` ", table, re.MULTILINE))
    assert {RENAMED[dialect].get(c, c) for c in COLUMNS} <= held


def test_the_sql_row_reader_reads_every_field():
    job = sample()
    row = [getattr(job, c, None) for c in COLUMNS]
    row[COLUMNS.index("payload")] = dumps([list(job.args), job.kwargs, job.meta])
    for name in JSON_FIELDS:
        row[COLUMNS.index(name)] = dumps(getattr(job, name))
    row[COLUMNS.index("cancel_requested_at")] = 1.0
    row[COLUMNS.index("state")] = "active"
    assert rows.job_from_row(row, now=2_000_000_000.0) == job


def test_the_sql_insert_row_writes_every_field_a_new_job_sets():
    job = sample().evolve(state=JobState.QUEUED)
    row = dict(zip(NEW_COLUMNS, rows.new_row(job, b"PAYLOAD"), strict=True))
    assert row.pop("payload") == b"PAYLOAD"
    assert row.pop("state") == "queued"
    assert row == {c: dumps(getattr(job, c)).decode() if c in JSON_FIELDS else getattr(job, c)
                   for c in NEW_COLUMNS if c not in ("payload", "state")}


def redis_hash(job: Job) -> dict[bytes, bytes]:
    """The job's hash as the Lua scripts write it (id and queue are in its keys)."""
    values = {c: getattr(job, c, None) for c in COLUMNS if c not in ("id", "queue")}
    values.update({name: dumps(getattr(job, name)).decode() for name in JSON_FIELDS})
    values.update(payload=dumps([list(job.args), job.kwargs, job.meta]).decode(),
                  cancel_requested_at=1.0, state=str(job.state))
    return {name.encode(): str(value).encode() for name, value in values.items()}


def test_the_redis_codec_reads_every_stored_field():
    job = sample()
    assert redis_codec.job_from_hash(job.id, job.queue, redis_hash(job), now=0.0) == job
    # the careful reader (a hash edited by hand) reads the same fields
    assert redis_codec._read_carefully(job.id, job.queue, redis_hash(job), now=0.0) == job


def test_the_http_model_names_every_shown_field():
    shown = set(models.Job.__struct_fields__)
    assert set(HTTP_FIELDS) <= shown
    view = api_jobs.view(sample())
    assert set(HTTP_FIELDS) <= set(view) <= shown
    msgspec.convert(view, models.Job)  # the view is a valid model
    assert view["ttr"] == SAMPLE["timeout"] and view["remark"] == SAMPLE["remark"]


def test_every_store_keeps_every_field_a_new_job_sets(backend):
    """Stored, then read back: each field a producer sets (fresh_job's) comes back."""
    values = {name: SAMPLE[name] for name in NEW_FIELDS}
    job = Job(**{**values, "id": new_job_id(), "state": JobState.QUEUED, "run_at": 4_000_000_000.0,
                 "expires_at": 4_100_000_000.0})
    item = Enqueue(job, payload=encode_payload(job.task, job.args, job.kwargs, job.meta))
    [stored] = backend.enqueue_many([item])
    found = backend.get(stored.id)  # shards mark the id with its server
    assert found is not None
    for name in NEW_FIELDS:
        if name == "id":
            assert found.id == stored.id
        elif name in ("created_at", "updated_at"):  # the store's clock
            assert getattr(found, name) == stored.created_at
        elif name == "state":
            assert found.state == JobState.SCHEDULED  # due in the future
        else:
            assert getattr(found, name) == getattr(job, name), name


@pytest.mark.parametrize(("keywords", "schema"), [(TaskOptions, TaskDefaults), (JobOptionsKw, JobOptions)])
def test_the_typed_option_keywords_name_every_option(keywords, schema):
    """`@app.task(...)`, `task.options(...)` and `app.enqueue(...)` are typed by these
    TypedDicts: the same names as the option schema, none required."""
    assert list(keywords.__annotations__) == list(options.names(schema))
    assert keywords.__required_keys__ == frozenset()


def test_the_periodic_keywords_name_every_option_a_schedule_may_set():
    """`@app.periodic(...)` is typed by PeriodicOptions: the same names as PERIODIC_OPTIONS,
    each typed as `task.options(...)` types it."""
    assert list(options.PeriodicOptions.__annotations__) == list(options.PERIODIC_OPTIONS)
    assert options.PeriodicOptions.__required_keys__ == frozenset()
    for name in options.PERIODIC_OPTIONS:
        assert options.PeriodicOptions.__annotations__[name] == JobOptionsKw.__annotations__[name], name


def test_the_option_keywords_type_the_public_calls():
    import deferq
    from deferq.task import Task

    hints = [Task.options.__annotations__["options"], deferq.App.enqueue.__annotations__["options"]]
    assert hints == ["Unpack[JobOptionsKw]"] * 2
    assert deferq.App.task.__annotations__["defaults"] == "Unpack[TaskOptions]"


def test_a_stored_job_keeps_what_a_new_job_sets_and_nothing_else():
    job = stamped(sample(), JobState.QUEUED, 1.0, 2.0, 3.0, 4.0)
    for f in fields(Job):
        if f.name in ("state", "run_at", "created_at", "expires_at", "updated_at"):
            continue
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        assert getattr(job, f.name) == (SAMPLE[f.name] if f.name in NEW_FIELDS else default), f.name
    assert (job.state, job.run_at, job.created_at, job.expires_at, job.updated_at) == (JobState.QUEUED, 1, 2, 3, 4)


def test_the_producer_rules_carry_every_job_option():
    """task._Rules, what build_enqueue reads for every job (resolved once per task and
    options), lists its fields by hand: a generic build costs _Rules.of half as much
    again. Each job option reaches it under its own name, or becomes fields of other
    names, or is read from the call itself."""
    from deferq.task import _Rules

    rules = set(_Rules.__dataclass_fields__)
    becomes = {"at": {"run_at"}, "expires": {"expires_at", "within"}}
    from_the_call = {"connection", "after", "after_any_outcome"}
    lost = [f.name for f in fields(JobOptions)
            if f.name not in rules and f.name not in from_the_call and not becomes.get(f.name, set()) & rules]
    assert not lost, f"options build_enqueue never sees: {lost}"
    assert set().union(*becomes.values()) <= rules
