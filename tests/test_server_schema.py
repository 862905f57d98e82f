"""schemathesis against /openapi.json: generated requests (valid and invalid) to every
operation never get a 5xx, and every answer matches the documented schema."""

from __future__ import annotations

import tempfile
import warnings

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

import deferq
from deferq.server import ServerConfig, create_app
from deferq.server import auth as auth_module

with warnings.catch_warnings():  # starlette's test client asks for "httpx2"; not needed
    warnings.simplefilter("ignore")
    import starlette.testclient  # noqa: F401

STORE = f"sqlite:///{tempfile.mkdtemp(prefix='deferq-schema-')}/deferq.db"
APP = deferq.App(STORE)
ADMIN, _ = auth_module.create(APP.backend, "admin")
WEB = create_app(ServerConfig(error_log="off"), APP)
APP.backend.kv_put("topics", "orders", b'{"name": "orders", "url": "http://127.0.0.1:9/", '
                   b'"signing_secret": "whsec_0123456789abcdef"}')
schema = schemathesis.openapi.from_asgi("/openapi.json", WEB)


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_matches_its_openapi_document(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Not checked: "schema-valid data is accepted". Some rules are about the store, not
        # the shape (the named topic must exist, a job names a topic or a task), so such
        # data is rightly a 422; every other check (no 5xx, documented statuses, response
        # schemas, invalid data rejected) runs.
        # A generated token is swapped for a real one; a case that leaves the header out
        # on purpose (invalid data: "missing Authorization") keeps it out and expects 401.
        headers = {"Authorization": f"Bearer {ADMIN}"} if "Authorization" in (case.headers or {}) else {}
        case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])
