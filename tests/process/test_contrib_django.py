"""deferq.contrib.django, on the example project in examples/django: tasks.py discovery,
`manage.py deferq`, and enqueue_on_commit on PostgreSQL and MySQL (the job written in
Django's own transaction) and on SQLite (the enqueue waits for the commit).

Django's settings are global to a process, so the project runs in subprocesses, as a
user runs it: `manage.py migrate`, `manage.py shell -c`, `manage.py deferq worker`."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import deferq

pytest.importorskip("django")

from deferq.contrib.django.transactions import shared_connection, shares_database  # noqa: E402
from tests.support.supervisor_harness import TREE_PATH  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django"

# Run in `manage.py shell -c`: a rollback, a commit, a view; how many jobs a worker
# could take after each step (read on deferq's own connections, not Django's).
SCENARIO = """
import json, sys
from deferq.contrib.django import app
report = {"discovered": sorted(app.tasks), "tasks_module": "shop.tasks" in sys.modules}

from django.db import transaction
from django.test import Client
from deferq.contrib.django import enqueue_on_commit
from shop.models import Order
from shop.tasks import send_receipt

def queued():
    return len(app.list_jobs("queued"))

class Rollback(Exception):
    pass

try:
    with transaction.atomic():
        lost = enqueue_on_commit(send_receipt, Order.objects.create(item="never").pk)
        raise Rollback
except Rollback:
    pass
report["after_rollback"] = queued()
with transaction.atomic():
    kept = enqueue_on_commit(send_receipt, Order.objects.create(item="tea").pk)
    report["inside"] = queued()
report["after_commit"] = queued()
report["view"] = Client().post("/orders/", {"item": "book"}).json()
report["after_view"] = queued()
report["lost"], report["kept"] = lost and lost.id, kept and kept.id
if "MySQLdb" in sys.modules:
    import pymysql
    report["one_pymysql_err"] = pymysql.err is sys.modules["pymysql.err"]
print(json.dumps(report))
"""

# After the worker: what it did, seen through Django and through `call_command`.
CHECK = """
import io, json
from contextlib import redirect_stdout
from django.core.management import call_command
from django.core.management.base import CommandError
from deferq.contrib.django import app
from shop.models import Order

out = io.StringIO()
with redirect_stdout(out):
    call_command("deferq", "dead", "list")
try:
    call_command("deferq", "job", "no-such-job")
    error = None
except CommandError as exc:
    error = str(exc)
print(json.dumps({
    "sent": sorted(Order.objects.filter(receipt_sent=True).values_list("item", flat=True)),
    "results": sorted(job.result for job in app.list_jobs("succeeded")),
    "dead_list": out.getvalue().strip(),
    "error": error,
}))
"""


def project_env(database_url: str, deferq_url: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DEFERQ_APP")}
    # this tree's deferq, not an installed one: the project runs in examples/django
    return {**env, "DATABASE_URL": database_url, "DEFERQ_URL": deferq_url, "PYTHONPATH": TREE_PATH}


def run(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def check_project(database_url: str, deferq_url: str, *, transactional: bool, worker: list[str]) -> None:
    env = project_env(database_url, deferq_url)
    run(env, "manage.py", "migrate", "--noinput", "-v0")
    report = last_json(run(env, "manage.py", "shell", "-c", SCENARIO))

    assert report["discovered"] == ["send_receipt"] and report["tasks_module"]
    assert report["after_rollback"] == 0, "a rolled-back transaction left a job"
    assert report["inside"] == 0, "the job was visible before its transaction committed"
    assert report["after_commit"] == 1 and report["after_view"] == 2
    assert report.get("one_pymysql_err", True)
    store = deferq.App(deferq_url or database_url)
    try:
        if transactional:  # written on Django's connection: the job existed, then did not
            assert report["lost"] and store.get(report["lost"]) is None
            assert report["kept"] and report["view"]["job"]
        else:  # waited for the commit: no job to show yet
            assert report["lost"] is None and report["kept"] is None and report["view"]["job"] is None

        run({**env, "DJANGO_SETTINGS_MODULE": "shopsite.settings"}, *worker)
        done = last_json(run(env, "manage.py", "shell", "-c", CHECK))
        assert done["sent"] == ["book", "tea"]
        assert sorted(result.rsplit(" (", 1)[1] for result in done["results"]) == ["book)", "tea)"]
        assert done["dead_list"] == "no dead jobs"
        assert "no job no-such-job" in done["error"]
        if transactional:
            assert store.get(report["kept"]).state == "succeeded"
            assert store.get(report["view"]["job"]).state == "succeeded"
        assert store.stats()["email"]["succeeded"] == 2
    finally:
        store.close()


def test_postgres_enqueue_in_djangos_transaction(postgres_url):
    # Django's tables go in the session's schema too (search_path), beside deferq's.
    check_project(postgres_url, "", transactional=True, worker=["manage.py", "deferq", "worker", "--burst"])


def test_mysql_enqueue_in_djangos_transaction(mysql_url):
    check_project(mysql_url, "", transactional=True, worker=["manage.py", "deferq", "worker", "--burst"])


def test_another_store_waits_for_the_commit(tmp_path):
    """Django on SQLite, jobs in another file: on_commit. The worker is the plain
    `deferq` command naming the settings' App, which sets Django up by itself (as the
    workers `deferq run` starts do)."""
    database, jobs = f"sqlite:///{tmp_path / 'shop.sqlite3'}", f"sqlite:///{tmp_path / 'jobs.db'}"
    worker = ["-m", "deferq", "worker", "--app", "deferq.contrib.django:app", "--burst"]
    check_project(database, jobs, transactional=False, worker=worker)


# A plain enqueue inside atomic(): warned once; none for enqueue_on_commit, outside a
# transaction, or inside the atomic block Django's TestCase wraps a test in.
PLAIN_ENQUEUE = """
import json
from django.db import transaction
from deferq.contrib.django import enqueue_on_commit
from shop.models import Order
from shop.tasks import send_receipt

send_receipt.enqueue(0)
with transaction.atomic():
    enqueue_on_commit(send_receipt, Order.objects.create(item="tea").pk)
testcase = transaction.atomic()
testcase._from_testcase = True
with testcase:
    send_receipt.enqueue(1)
    print("STEP inside a test case's block", flush=True)
    with transaction.atomic():
        send_receipt.enqueue(Order.objects.create(item="book").pk)
        send_receipt.enqueue(2)
print("STEP done", flush=True)
"""


def test_a_plain_enqueue_inside_atomic_warns_once_naming_enqueue_on_commit(tmp_path):
    env = project_env(f"sqlite:///{tmp_path / 'shop.sqlite3'}", f"sqlite:///{tmp_path / 'jobs.db'}")
    run(env, "manage.py", "migrate", "--noinput", "-v0")
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", PLAIN_ENQUEUE], cwd=EXAMPLE, env=env,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert "STEP inside a test case's block" in done.stdout and "Traceback" not in done.stderr
    warned = [line for line in done.stderr.splitlines() if "inside transaction.atomic()" in line]
    assert warned == ["send_receipt.enqueue() inside transaction.atomic() (database 'default') is not part of "
                      "the transaction: the job is stored now, kept if the transaction rolls back, and may run "
                      "before it commits. Use deferq.contrib.django.enqueue_on_commit(task, ...) to enqueue "
                      "with the commit (said once per process)"]


@pytest.mark.parametrize(
    ("url", "vendor", "settings", "same"),
    [
        ("postgresql://u@127.0.0.1/shop", "postgresql", {"HOST": "localhost", "NAME": "shop"}, True),
        ("postgres://u:p@db:5432/shop?schema=q", "postgresql", {"HOST": "db", "PORT": "5432", "NAME": "shop"},
         True),
        ("postgresql:///shop", "postgresql", {"HOST": "", "PORT": "", "NAME": "shop"}, True),
        ("postgresql://db/shop", "postgresql", {"HOST": "db", "PORT": 5433, "NAME": "shop"}, False),
        ("postgresql://db/shop", "postgresql", {"HOST": "db", "NAME": "test_shop"}, False),  # Django's test DB
        ("postgresql://db/shop", "postgresql", {"HOST": "other", "NAME": "shop"}, False),
        ("mariadb://root@[::1]:3306/shop", "mysql", {"HOST": "127.0.0.1", "NAME": "shop"}, True),
        ("mysql://root@db/shop", "postgresql", {"HOST": "db", "NAME": "shop"}, False),
        ("sqlite:///shop.db", "sqlite", {"NAME": "shop.db"}, False),
        ("redis://db/0", "postgresql", {"HOST": "db", "NAME": "0"}, False),
    ],
)
def test_shares_database(url, vendor, settings, same):
    assert shares_database(url, vendor, settings) is same


class FakeConnection:
    """What shared_connection reads of a Django connection wrapper."""

    alias, vendor = "default", "mysql"
    settings_dict = {"HOST": "db", "NAME": "shop"}
    connection = object()  # mysqlclient, say: not a PyMySQL connection

    def ensure_connection(self) -> None:
        pass


def test_a_driver_deferq_cannot_write_on_waits_for_the_commit(caplog, monkeypatch):
    monkeypatch.setattr("deferq.contrib.django.transactions._warned", set())
    app = deferq.App("mysql://root@db/shop")  # never opened: nothing is written
    with caplog.at_level(logging.WARNING, logger="deferq.django"):
        assert shared_connection(app, FakeConnection()) is None
        assert shared_connection(app, FakeConnection()) is None
    assert [r.message for r in caplog.records if "not PyMySQL" in r.message] != []
    assert len(caplog.records) == 1, "said once per database"


def test_the_settings_app_is_built_on_first_use(monkeypatch):
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    if settings.configured:
        pytest.skip("Django's settings are configured in this process")
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    from deferq.contrib.django import app

    assert isinstance(app, deferq.App)  # what `deferq --app deferq.contrib.django:app` requires
    assert "not built yet" in repr(app)
    with pytest.raises(ImproperlyConfigured):
        app.tasks  # needs the settings
    assert "not built yet" in repr(app), "a failed build is tried again on the next use"
