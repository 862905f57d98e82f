"""The OpenAPI 3.0 document of the API, written by hand as one dict (served at /openapi.json).

Every operation lists every status it can answer, so schemathesis can check that the
server says nothing undocumented (tests/test_server_schema.py).
"""

from __future__ import annotations

import functools
from typing import Any

from ..options import HTTP_OPTIONS
from .auth import SCOPES
from .topics import BACKOFF_KINDS, METHODS

NUMBER = {"type": "number"}
INTEGER = {"type": "integer"}
STRING = {"type": "string"}
ANY: dict[str, Any] = {}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


def obj(properties: dict[str, Any], required: tuple[str, ...] = (), extra: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if not extra:
        schema["additionalProperties"] = False
    return schema


def request_obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A request body: no unknown fields; an optional field may be null (= left out)."""
    return obj({name: schema if name in required else nullable(schema)
                for name, schema in properties.items()}, required, extra=False)  # fmt: skip


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


PRIORITY = {"type": "string", "enum": ["high", "normal", "low"]}
STATE = {"type": "string", "enum": ["scheduled", "queued", "active", "succeeded", "dead", "cancelled"]}

TOPIC_FIELDS: dict[str, Any] = {
    "url": {**STRING, "description": "http(s) URL the job's body is sent to."},
    "method": {"type": "string", "enum": list(METHODS)},
    "headers": {"type": "object", "additionalProperties": STRING},
    "delay_ms": {**INTEGER, "minimum": 0},
    "ttr": {**NUMBER, "exclusiveMinimum": True, "minimum": 0, "maximum": 86400},
    "max_attempts": {**INTEGER, "minimum": 1, "maximum": 1000},
    "backoff": obj({"kind": {"type": "string", "enum": list(BACKOFF_KINDS)}}, ("kind",)),
    "retry_condition": nullable({**STRING, "description": "e.g. {res.code}!=200"}),
    "priority": PRIORITY,
    "queue": STRING,
    "signing_secret": {**STRING, "minLength": 16},
    "max_answer_bytes": {**INTEGER, "minimum": 1, "maximum": 64 * 1024 * 1024},
}

SCHEMAS: dict[str, Any] = {
    "Error": obj({"error": obj({"code": STRING, "message": STRING}, ("code", "message"))},
                 ("error",)),  # fmt: skip
    "JobRequest": request_obj({
        "topic": {**STRING, "description": "Deliver `body` to this topic's callback URL."},
        "task": {**STRING, "description": "Or: run this Python task with args/kwargs."},
        "body": {"description": "Any JSON value, POSTed to the topic's URL."},
        "args": {"type": "array", "items": ANY},
        "kwargs": {"type": "object"},
        **{name: {"description": spec.help, **spec.openapi} for name, (_, spec) in HTTP_OPTIONS.items()},
    }),  # fmt: skip
    "Receipt": obj({"id": STRING, "state": STATE, "run_at": NUMBER}, ("id", "state", "run_at")),
    "Job": obj({
        "id": STRING, "state": STATE, "queue": STRING, "topic": nullable(STRING),
        "body": ANY, "task": nullable(STRING), "args": nullable({"type": "array", "items": ANY}),
        "kwargs": nullable({"type": "object"}), "priority": PRIORITY, "attempts": INTEGER,
        "max_attempts": INTEGER, "ttr": nullable(NUMBER), "key": nullable(STRING),
        "run_at": NUMBER, "created_at": NUMBER, "finished_at": nullable(NUMBER),
        "error": nullable(STRING), "result": ANY,
    }, ("id", "state", "queue", "attempts", "max_attempts", "run_at")),  # fmt: skip
    "JobList": obj({"jobs": {"type": "array", "items": ref("Job")}}, ("jobs",)),
    "QueueStats": obj({**{s: INTEGER for s in STATE["enum"]}, "oldest_wait": NUMBER}),
    "TopicRequest": request_obj(TOPIC_FIELDS, ("url",)),
    "Topic": obj({**TOPIC_FIELDS, "name": STRING, "updated_at": NUMBER}, ("name", "url")),
    "Token": obj({"id": STRING, "scope": {"type": "string", "enum": list(SCOPES)},
                  "note": STRING, "created_at": NUMBER,
                  "token": {**STRING, "description": "Shown only when created."}},
                 ("id", "scope")),  # fmt: skip
}

ERRORS = {
    "400": "Malformed JSON", "401": "No valid API token", "403": "The token's scope is too small",
    "404": "Not found", "413": "Body over the size limit", "422": "Invalid request",
    "429": "Queue full: retry after Retry-After seconds", "503": "Store unreachable",
}  # fmt: skip


def answer(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def operation(summary: str, scope: str | None, ok: dict[str, dict[str, Any]],
              body: dict[str, Any] | None = None, params: list[dict[str, Any]] | None = None,
              errors: tuple[str, ...] = ("404", "422", "503")) -> dict[str, Any]:  # fmt: skip
    codes = list(errors)
    if scope:
        codes += ["401", "403"]
    if body is not None:
        codes += ["400", "413", "422"]
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {**ok, **{c: answer(ERRORS[c], ref("Error")) for c in sorted(set(codes))}},
    }
    if scope:
        op["security"] = [{"bearer": []}]
        op["description"] = f"Needs a token with the {scope} scope."
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = params
    return op


def path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": STRING}


def query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


LIMIT = query("limit", {**INTEGER, "minimum": 1, "maximum": 1000})


def _paths() -> dict[str, Any]:
    job_id, name = [path_param("job_id")], [path_param("name")]
    jobs = answer("Jobs", ref("JobList"))
    return {
        "/v1/jobs": {
            "post": operation("Enqueue a job", "producer",
                              {"201": answer("Stored", ref("Receipt")),
                               "200": answer("A job with this key already waits", ref("Receipt"))},
                              ref("JobRequest"), errors=("422", "429", "503")),
            "get": operation("Find jobs by key, or list jobs in a state", "reader",
                             {"200": jobs}, params=[query("key", STRING), query("state", STATE),
                                                    query("queue", STRING), LIMIT]),
        },
        "/v1/jobs/batch": {
            "post": operation("Enqueue many jobs at once", "producer",
                              {"201": answer("Stored", obj({"jobs": {
                                  "type": "array", "items": ref("Receipt")}}, ("jobs",)))},
                              obj({"jobs": {"type": "array", "items": ref("JobRequest")}},
                                  ("jobs",)), errors=("422", "429", "503")),
        },
        "/v1/jobs/{job_id}": {
            "get": operation("A job", "reader", {"200": answer("The job", ref("Job"))},
                             params=job_id),
            "delete": operation("Cancel a waiting job", "producer",
                                {"200": answer("Cancelled", obj({"id": STRING, "state": STATE})),
                                 "409": answer("Not waiting", ref("Error"))}, params=job_id),
        },
        "/v1/queues": {
            "get": operation("Counts by state and oldest wait, per queue", "reader",
                             {"200": answer("Queues", obj({"queues": {
                                 "type": "object", "additionalProperties": ref("QueueStats")}}))}),
        },
        "/v1/dead": {
            "get": operation("Dead letters, newest first", "admin", {"200": jobs},
                             params=[query("queue", STRING), LIMIT]),
            "delete": operation("Purge dead letters", "admin",
                                {"200": answer("Purged", obj({"purged": INTEGER}))},
                                params=[query("older_than", {**INTEGER, "minimum": 0})]),
        },
        "/v1/dead/retry": {
            "post": operation("Retry every dead letter (of a queue)", "admin",
                              {"200": answer("Retried", obj({"retried": INTEGER}))},
                              params=[query("queue", STRING)]),
        },
        "/v1/dead/{job_id}/retry": {
            "post": operation("Retry one dead letter", "admin",
                              {"200": answer("Queued again", obj({"id": STRING, "state": STATE})),
                               "409": answer("Not dead", ref("Error"))}, params=job_id),
        },
        "/v1/topics": {
            "get": operation("All topics", "admin", {"200": answer("Topics", obj({
                "topics": {"type": "array", "items": ref("Topic")}}))}),
        },
        "/v1/topics/{name}": {
            "get": operation("A topic", "admin", {"200": answer("The topic", ref("Topic"))},
                             params=name),
            "put": operation("Create or replace a topic", "admin",
                             {"200": answer("Replaced", ref("Topic")),
                              "201": answer("Created", ref("Topic"))}, ref("TopicRequest"), params=name),
            "delete": operation("Delete a topic", "admin",
                                {"200": answer("Deleted", obj({"deleted": STRING}))}, params=name),
        },
        "/v1/tokens": {
            "get": operation("API tokens (their ids and scopes)", "admin", {"200": answer(
                "Tokens", obj({"tokens": {"type": "array", "items": ref("Token")}}))}),
            "post": operation("Make an API token (shown once)", "admin",
                              {"201": answer("The token", ref("Token"))},
                              request_obj({"scope": {"type": "string", "enum": list(SCOPES)},
                                           "note": STRING}, ("scope",))),
        },
        "/v1/tokens/{token_id}": {
            "delete": operation("Revoke a token", "admin",
                                {"200": answer("Revoked", obj({"deleted": STRING}))},
                                params=[path_param("token_id")]),
        },
        "/v1/settings/alerts": {
            "get": operation("Where dead-callback alerts go", "admin",
                             {"200": answer("Alert settings", obj({"alerts": nullable(
                                 {"type": "object"})}))}),
            "put": operation("Set where dead-callback alerts go", "admin",
                             {"200": answer("Saved", obj({"alerts": {"type": "object"}}))},
                             {"type": "object"}),
        },
        "/healthz": {"get": operation("The process is alive", None, {
            "200": answer("Alive", obj({"status": STRING}))}, errors=())},
        "/readyz": {"get": operation("The store answers", None, {
            "200": answer("Ready", obj({"status": STRING}))}, errors=("503",))},
    }  # fmt: skip


@functools.cache
def document() -> dict[str, Any]:
    from .console_api import paths as console_paths  # imports this module: not at the top

    return {
        "openapi": "3.0.3",
        "info": {"title": "deferq", "version": "1",
                 "description": "Delayed jobs and signed callbacks over HTTP. See docs/http.md."},
        "paths": {**_paths(), **console_paths()},
        "components": {"schemas": SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }  # fmt: skip
