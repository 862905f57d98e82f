"""A client generated from /openapi.json works: the document validates
(openapi-spec-validator), openapi-typescript and openapi-python-client make a client with
every operation from it (no warning, no response type left out), and the generated
Python client enqueues, sends an event, waits for the job and reads a schedule against a
running `deferq serve` with a worker. The TypeScript generator comes from the npm registry
through tests/support/openapi_clients/package.json and its lock (npm ci, once per lock)."""

from __future__ import annotations

import hashlib
import importlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

import deferq
from deferq.server.http import auth
from tests.conftest import need_service
from tests.support.server_helpers import _env, _stop, running_server

pytestmark = pytest.mark.xdist_group("openapi_clients")  # one server, one document, one npm ci

NPM_DIR = Path(__file__).parents[1] / "support" / "openapi_clients"
PACKAGE = "deferq_api_client"  # the generated Python client's package name
METHODS = ("get", "put", "post", "delete", "patch")


def operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, ops in doc["paths"].items() for method in ops if method in METHODS}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, dict[str, Any], Path]]:
    """A `deferq serve` and a worker on one SQLite store: (base URL, admin token, the
    document it serves, a directory for the clients)."""
    where = tmp_path_factory.mktemp("openapi-clients")
    url = f"sqlite:///{where}/api.db"
    app = deferq.App(url)
    token, _ = auth.create(app.backend, "admin")
    app.close()
    worker = subprocess.Popen([sys.executable, "-m", "deferq", "worker",
                               "--app", "tests.support.openapi_world:app",
                               "--url", url, "--concurrency", "2", "--grace", "2"],
                              env=_env(), stdout=subprocess.DEVNULL)
    try:
        with running_server(url, "--no-schedules") as base:
            answer = httpx.get(base + "/openapi.json", timeout=10, trust_env=False)
            (where / "openapi.json").write_text(answer.text)
            doc = answer.json()
            yield base, token, doc, where
    finally:
        _stop(worker)


def test_the_document_validates(served) -> None:
    _, _, doc, _ = served
    try:
        validate(doc)
    except Exception as exc:  # noqa: BLE001 - its message names what is wrong (a $ref to nowhere, say)
        pytest.fail(f"/openapi.json is not valid OpenAPI: {str(exc)[:300]}")


def npm_ci() -> None:
    """tests/support/openapi_clients/node_modules as its lock says, installed again only when the
    lock changed."""
    if shutil.which("npm") is None:
        need_service("npm", "node and npm are not on PATH")
    lock = hashlib.sha256((NPM_DIR / "package-lock.json").read_bytes()).hexdigest()
    stamp = NPM_DIR / "node_modules" / ".deferq-lock"
    if stamp.exists() and stamp.read_text() == lock:
        return
    done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NPM_DIR, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    stamp.write_text(lock)


def test_openapi_typescript_makes_a_client_with_every_operation_that_compiles(served) -> None:
    _, _, doc, where = served
    npm_ci()
    out = where / "schema.d.ts"
    bin_dir = NPM_DIR / "node_modules" / ".bin"
    made = subprocess.run([bin_dir / "openapi-typescript", where / "openapi.json", "-o", out],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0 and out.exists(), made.stdout + made.stderr
    text = out.read_text()
    blocks = dict(re.findall(r'\n    "(/[^"]*)": \{\n(.*?)\n    \};', text, re.S))
    found = {(method, path) for path, block in blocks.items()
             for method in re.findall(r"^        (\w+): (?!never)", block, re.M) if method in METHODS}
    assert found == operations(doc)
    compiled = subprocess.run([bin_dir / "tsc", "--noEmit", "--strict", out], capture_output=True, text=True,
                              timeout=120)
    assert compiled.returncode == 0, compiled.stdout[-2000:]


@pytest.fixture(scope="module")
def python_client(served) -> Iterator[Any]:
    """The package openapi-python-client makes from the document, imported."""
    _, _, doc, where = served
    (where / "config.yml").write_text("post_hooks: []\n")  # no formatter run on the code it writes
    made = subprocess.run([Path(sys.executable).parent / "openapi-python-client", "generate", "--path",
                           where / "openapi.json", "--output-path", where / PACKAGE, "--meta", "none",
                           "--config", where / "config.yml"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0 and "Warning" not in made.stdout + made.stderr, made.stdout + made.stderr
    modules = {p.stem for p in (where / PACKAGE / "api" / "default").glob("*.py")} - {"__init__"}
    assert len(modules) == len(operations(doc))  # one module per operation: none left out
    sys.path.insert(0, str(where))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(where))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


class Endpoints:
    """The generated client's operations by module name: `api.post_v1_jobs.sync(...)`."""

    def __getattr__(self, name: str) -> Any:
        return importlib.import_module(f"{PACKAGE}.api.default.{name}")


def test_the_generated_python_client_enqueues_sends_an_event_waits_and_reads_a_schedule(served, python_client):
    base, token, _, _ = served
    api = Endpoints()
    models = importlib.import_module(f"{PACKAGE}.models")
    client = python_client.AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)
    with client:
        receipt = api.post_v1_jobs.sync(client=client, body=models.TaskJob(task="openapi.checkout", args=[7]))
        assert isinstance(receipt, models.Receipt)
        sent = api.post_v1_events.sync(client=client, body=models.EventRequest(
            event="payment", key="order:7", data={"amount": 10}))
        assert isinstance(sent, models.EventSent) and sent.key == "order:7"
        done = api.get_v1_jobs_job_id.sync(client=client, job_id=receipt.id, wait=20)
        assert isinstance(done, models.Job)
        assert (done.state.value, done.result) == ("succeeded", {"order": 7, "paid": {"amount": 10}})
        assert [step.name for step in done.steps] == ["paid"]
        put = api.put_v1_schedules_name.sync(client=client, name="nightly", body=models.EverySchedule(
            task="openapi.checkout", every=3600, args=[1]))
        assert isinstance(put, models.Schedule)
        read = api.get_v1_schedules_name.sync(client=client, name="nightly")
        assert isinstance(read, models.Schedule)
        assert (read.task, read.every, read.args) == ("openapi.checkout", 3600, [1])
        assert len(read.to_dict()["next"]) == 5  # `next` is `next_` in Python
        missing = api.get_v1_jobs_job_id.sync_detailed(client=client, job_id="nosuchjob")
        assert missing.status_code == 404 and isinstance(missing.parsed, models.Error)
