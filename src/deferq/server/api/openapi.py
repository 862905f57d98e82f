"""The OpenAPI 3.1 document of the API (served at /openapi.json), generated.

Every schema in it comes from the msgspec models that check the requests (models.py,
topics.TopicRequest) and describe the answers, by msgspec.json.schema_components; what
is written here is only the list of operations: their paths, scopes, models and the
statuses each can answer. Every operation lists every status it can answer, and a
request that its schema allows is one the server accepts, so schemathesis can check
both ways (tests/server/test_server_schema.py).
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from ... import options
from ...codec import INT_RANGE, MAX_DEPTH
from ...limits.runtime import NAME_LENGTH
from ...options import QUEUE_NAME
from ..http.fields import ecma_pattern
from ..topics.topic import NAME_PATTERN
from . import models

REF = "#/components/schemas/{name}"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": REF.format(name=name)}


ERRORS = {
    "400": "Malformed JSON", "401": "No valid API token", "403": "The token's scope is too small",
    "404": "Not found", "413": "Body over the size limit", "422": "Invalid request",
    "429": "Too many: a full queue, or a token's waits; retry after Retry-After seconds",
    "503": "Store unreachable",
}


def answer(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def operation(summary: str, scope: str | None, ok: dict[str, dict[str, Any]],
              body: dict[str, Any] | None = None, params: list[dict[str, Any]] | None = None,
              errors: tuple[str, ...] = ("404", "422", "503")) -> dict[str, Any]:
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


def path_param(name: str, pattern: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "minLength": 1}
    if pattern:
        schema["pattern"] = pattern
    return {"name": name, "in": "path", "required": True, "schema": schema}


def query(model: type[msgspec.Struct]) -> list[dict[str, Any]]:
    """The query parameters of an operation: the fields of its query model."""
    (_,), components = msgspec.json.schema_components([model], ref_template=REF)
    properties = components[model.__name__]["properties"]
    return [{"name": name, "in": "query", "required": False, "schema": _ecma(schema)}
            for name, schema in properties.items()]


def _paths() -> dict[str, Any]:
    job_id = [path_param("job_id")]
    queue = [path_param("queue", ecma_pattern(QUEUE_NAME))]
    name = [path_param("name", NAME_PATTERN.pattern)]
    limit = [path_param("name", f"^[^\\x00]{{1,{NAME_LENGTH}}}$")]
    jobs = answer("Jobs", ref("JobList"))
    refused = ("404", "422", "429", "503")  # 404: a topic that does not exist
    shard = [path_param("number", "^[0-9]{1,3}$")]
    shard_changed = {"200": answer("Changed", ref("Shards")),
                     "409": answer("Refused (the message says why)", ref("Error"))}
    return {
        "/v1/jobs": {
            "post": operation("Enqueue a job", "producer",
                              {"201": answer("Stored", ref("Receipt")),
                               "200": answer("A job with this key already waits", ref("Receipt"))},
                              ref("JobRequest"), errors=refused),
            "get": operation("Find jobs: by key, in a state, of a queue", "reader",
                             {"200": jobs}, params=query(models.JobsQuery), errors=("422", "503")),
        },
        "/v1/jobs/batch": {
            "post": operation("Enqueue many jobs at once", "producer",
                              {"201": answer("Stored", ref("Receipts"))}, ref("BatchRequest"), errors=refused),
        },
        "/v1/jobs/cancel-batch": {
            "post": operation("Cancel the waiting jobs named, ask the running ones to stop", "producer",
                              {"200": answer("Cancelled", ref("CancelledBatch"))}, ref("CancelBatchRequest"),
                              errors=("503",)),
        },
        "/v1/jobs/delete-batch": {
            "post": operation("Delete the finished jobs named, for good", "admin",
                              {"200": answer("Deleted", ref("DeletedJobs"))}, ref("IdsRequest"), errors=("503",)),
        },
        "/v1/jobs/{job_id}": {
            "get": operation("A job; with ?wait=N, once it has finished (or after N seconds)", "reader",
                             {"200": answer("The job", ref("Job"))}, params=job_id + query(models.JobQuery),
                             errors=("404", "422", "429", "503")),
            "delete": operation("Cancel a waiting job, or ask a running one to stop", "producer",
                                {"200": answer("Cancelled", ref("JobStateAnswer")),
                                 "202": answer("Running: asked to stop, it ends cancelled", ref("JobStateAnswer")),
                                 "409": answer("Finished", ref("Error"))},
                                params=job_id + query(models.CancelQuery)),
        },
        "/v1/jobs/{job_id}/run-now": {
            "post": operation("Run a scheduled job now (delayed, or waiting for its next retry)", "producer",
                              {"200": answer("Due now", ref("JobStateAnswer")),
                               "409": answer("Not scheduled", ref("Error"))}, params=job_id),
        },
        "/v1/jobs/{job_id}/retry-from": {
            "post": operation("Run a dead, cancelled or succeeded durable job again from one of its steps: the "
                              "checkpoints from it on are dropped, the earlier ones kept", "admin",
                              {"200": answer("Queued again", ref("JobStateAnswer")),
                               "409": answer("Not finished", ref("Error"))}, ref("RetryFromRequest"),
                              params=job_id),
        },
        "/v1/batches/{batch_id}": {
            "get": operation("A batch's counts, callbacks and members", "reader",
                             {"200": answer("The batch", ref("Batch"))},
                             params=[path_param("batch_id"), *query(models.BatchQuery)]),
        },
        "/v1/events": {
            "post": operation("Send an event: wake the jobs waiting for it (job.wait_for), keep it for later ones",
                              "producer", {"200": answer("Sent", ref("EventSent"))}, ref("EventRequest"),
                              errors=("422", "503")),
            "get": operation("The events kept for jobs that wait for them later, newest first", "reader",
                             {"200": answer("Events", ref("EventList"))}, errors=("503",)),
        },
        "/v1/jobs/{job_id}/remark": {
            "put": operation("Set a job's remark (free text; null clears it)", "admin",
                             {"200": answer("Set", ref("Remark"))}, ref("RemarkRequest"), params=job_id),
        },
        "/v1/queues": {
            "get": operation("Counts by state, oldest wait and paused or not, per queue", "reader",
                             {"200": answer("Queues", ref("QueueList"))}),
        },
        "/v1/queues/{queue}/pause": {
            "post": operation("Pause a queue: workers take none of its jobs until it is resumed", "admin",
                              {"200": answer("Paused", ref("QueuePaused"))}, params=queue, errors=("422", "503")),
        },
        "/v1/queues/{queue}/resume": {
            "post": operation("Resume a paused queue", "admin",
                              {"200": answer("Resumed", ref("QueuePaused"))}, params=queue, errors=("422", "503")),
        },
        "/v1/limits": {
            "get": operation("The limits set at run time, and the pauses", "reader",
                             {"200": answer("Limits", ref("LimitList"))}),
        },
        "/v1/limits/{name}": {
            "put": operation("Set a task's, a limit key's or a queue's (queue:NAME) rate and concurrency "
                             "(every worker within a second; a changed rate makes the jobs its turns held due "
                             "at once)",
                             "admin", {"200": answer("Set", ref("LimitSetting"))}, ref("LimitRequest"),
                             params=limit, errors=("422", "503")),
            "delete": operation("Clear a limit set at run time and its pause (the declared one holds again; "
                                "the jobs it held are due at once)", "admin",
                                {"200": answer("Cleared", ref("Deleted"))}, params=limit),
        },
        "/v1/limits/{name}/resume": {
            "post": operation("End a limit's pause now, keeping the limit set on it; the jobs that met it "
                              "are due at once", "admin", {"200": answer("Resumed", ref("LimitSetting"))},
                              params=limit, errors=("404", "422", "503")),
        },
        "/v1/dead": {
            "get": operation("Dead letters, newest first", "admin", {"200": jobs},
                             params=query(models.DeadQuery)),
            "delete": operation("Purge dead letters", "admin", {"200": answer("Purged", ref("Purged"))},
                                params=query(models.PurgeQuery)),
        },
        "/v1/dead/retry": {
            "post": operation("Retry every dead letter (of a queue)", "admin",
                              {"200": answer("Retried", ref("Retried"))}, params=query(models.QueueQuery)),
        },
        "/v1/dead/delete-batch": {
            "post": operation("Delete the dead letters named, for good", "admin",
                              {"200": answer("Deleted", ref("DeletedBatch"))}, ref("IdsRequest"), errors=("503",)),
        },
        "/v1/dead/{job_id}/retry": {
            "post": operation("Retry one dead letter", "admin",
                              {"200": answer("Queued again", ref("JobStateAnswer")),
                               "409": answer("Not dead", ref("Error"))}, params=job_id),
        },
        "/v1/topics": {
            "get": operation("All topics", "admin", {"200": answer("Topics", ref("TopicList"))}),
        },
        "/v1/topics/{name}": {
            "get": operation("A topic", "admin", {"200": answer("The topic", ref("Topic"))}, params=name),
            "put": operation("Create or replace a topic", "admin",
                             {"200": answer("Replaced", ref("Topic")),
                              "201": answer("Created", ref("Topic"))}, ref("TopicRequest"), params=name),
            "delete": operation("Delete a topic", "admin", {"200": answer("Deleted", ref("Deleted"))},
                                params=name),
        },
        "/v1/tokens": {
            "get": operation("API tokens (their ids and scopes)", "admin",
                             {"200": answer("Tokens", ref("TokenList"))}),
            "post": operation("Make an API token (shown once)", "admin",
                              {"201": answer("The token", ref("Token"))}, ref("TokenRequest")),
        },
        "/v1/tokens/{token_id}": {
            "delete": operation("Revoke a token", "admin", {"200": answer("Revoked", ref("Deleted"))},
                                params=[path_param("token_id")]),
        },
        "/v1/settings/alerts": {
            "get": operation("Where dead-callback alerts go", "admin",
                             {"200": answer("Alert settings", ref("Alerts"))}),
            "put": operation("Set where dead-callback alerts go", "admin",
                             {"200": answer("Saved", ref("SavedAlerts"))}, ref("AlertSettings")),
        },
        "/v1/store/parts": {
            "get": operation("Each part of the store (every Redis shard): up or down, ping, version, memory",
                             "reader", {"200": answer("The parts", ref("StoreParts"))}, errors=()),
        },
        "/v1/store/shards": {
            "get": operation("The shards of a redis+shards:// store, their states and who changed them",
                             "reader", {"200": answer("The shards", ref("Shards"))}, errors=("503",)),
            "post": operation("Add a Redis server as a shard: it takes new jobs at once", "admin",
                              {"201": answer("Added", ref("Shards")), "409": answer("Refused", ref("Error"))},
                              ref("ShardRequest"), errors=("422", "503")),
        },
        "/v1/store/shards/{number}": {
            "delete": operation("Remove a drained shard that holds no unfinished job", "admin", shard_changed,
                                params=shard, errors=("503",)),
        },
        "/v1/store/shards/{number}/drain": {
            "post": operation("Drain a shard: no new jobs; its jobs still run", "admin", shard_changed,
                              params=shard, errors=("503",)),
        },
        "/v1/store/shards/{number}/undrain": {
            "post": operation("Let a draining shard take new jobs again", "admin", shard_changed,
                              params=shard, errors=("503",)),
        },
        "/healthz": {"get": operation("The process is alive", None, {
            "200": answer("Alive", ref("Status"))}, errors=())},
        "/readyz": {"get": operation("The store answers", None, {
            "200": answer("Ready", ref("Status"))}, errors=("503",))},
    }


def schemas(more: tuple[type[msgspec.Struct], ...] = ()) -> dict[str, Any]:
    """The components: every model's schema (the API's and `more`: the console's), with
    the rules between fields that a model states in words of JSON Schema
    (models.SCHEMA_RULES), and the job request's two kinds."""
    _, components = msgspec.json.schema_components((*models.MODELS, *more), ref_template=REF)
    for name, extra in models.SCHEMA_RULES.items():
        components[name] = _merged(components[name], extra)
    # Each field also stands at the top, with the schema it has in its kind (the same for
    # both where both take it), so a reader or a client generator sees them in one place.
    fields = {**components["TopicJob"]["properties"], **components["TaskJob"]["properties"]}
    components["JobRequest"] = {"type": "object", "properties": fields, **models.JOB_REQUEST}
    components["ScheduleRequest"] = models.SCHEDULE_REQUEST
    components["JsonValue"] = JSON_VALUE  # requests_kept_exactly names it
    return {name: _ecma(_typed_items(schema)) for name, schema in sorted(components.items())}


# A value deferq keeps exactly (bodies.py): no NUL, no integer beyond 64 bits. JSON Schema
# cannot tell 1e30 from an integer, so whole numbers are the bounded integers; the nesting
# limit is said in words. The document states the rules of the value itself, and those
# of the values inside it in words: client generators (openapi-python-client) cannot
# make a type of a union that names itself. `exact_json_values` gives the document that
# states them at every level (what tests/server/test_server_schema.py holds the server to).
NO_NUL = {"pattern": options.NO_NUL}
JSON_VALUE: dict[str, Any] = {
    "description": "Any JSON value that deferq keeps exactly: no string or object key holding NUL "
                   "(\\u0000), no integer beyond 64 bits (send those as strings), at every level of it, and "
                   f"the request nesting arrays and objects at most {MAX_DEPTH} levels deep (JSON Schema counts "
                   "1e30 an integer: deferq keeps it, as the float it is written as).",
    "anyOf": [{"type": "null"}, {"type": "boolean"}, {"type": "string", **NO_NUL},
              {"type": "integer", "minimum": INT_RANGE[0], "maximum": INT_RANGE[1]},
              {"type": "number", "not": {"type": "integer"}},
              {"type": "array", "items": {}},
              {"type": "object", "additionalProperties": {}, "propertyNames": NO_NUL}],
}


def exact_json_values(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with JsonValue's rules stated at every level (a value inside an array or an
    object is a JsonValue too): what the server holds requests to, for checkers that read
    a schema that names itself (schemathesis)."""
    value = JSON_VALUE["anyOf"]
    exact = {**JSON_VALUE, "anyOf": [*value[:5], {**value[5], "items": ref("JsonValue")},
                                     {**value[6], "additionalProperties": ref("JsonValue")}]}
    schemas = {**doc["components"]["schemas"], "JsonValue": _ecma(exact)}
    return {**doc, "components": {**doc["components"], "schemas": schemas}}


def _typed_items(schema: Any) -> Any:
    """`schema` with each array's items stated ({} where msgspec leaves them out, for
    list[Any]): client generators refuse an array without items."""
    if isinstance(schema, list):
        return [_typed_items(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _typed_items(value) for key, value in schema.items()}
    if out.get("type") == "array" and not out.keys() & {"items", "prefixItems"}:
        out["items"] = {}
    return out


def requests_kept_exactly(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with every request's schemas (bodies, and the components they name; query and
    path parameters) saying what bodies.py and the NUL check of URLs refuse."""
    schemas = doc["components"]["schemas"]
    operations = [op for ops in doc["paths"].values() for op in ops.values()]
    found = [op["requestBody"]["content"]["application/json"]["schema"]
             for op in operations if "requestBody" in op]
    names: set[str] = set()
    while found:
        item = found.pop()
        if isinstance(item, dict):
            name = item.get("$ref", "").rpartition("/")[2]
            if name and name not in names:
                names.add(name)
                found.append(schemas[name])
            found.extend(item.values())
        elif isinstance(item, list):
            found.extend(item)
    names.discard("JsonValue")
    schemas = {**schemas, **{name: kept_exactly(schemas[name]) for name in names}}
    paths = {path: {method: {**op, "parameters": [{**p, "schema": kept_exactly(p["schema"])}
                                                  for p in op["parameters"]]} if "parameters" in op else op
                    for method, op in ops.items()} for path, ops in doc["paths"].items()}
    return {**doc, "paths": paths, "components": {**doc["components"], "schemas": schemas}}


def kept_exactly(schema: Any) -> Any:
    """A request's schema saying what bodies.py refuses: each free string without NUL,
    each free value (args, kwargs, body) a JsonValue."""
    if isinstance(schema, list):
        return [kept_exactly(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if not schema.keys() - {"description", "default", "title"}:  # Any: a value of the caller's
        return {**schema, **ref("JsonValue")}
    out = {key: kept_exactly(value) if key not in ("default", "const", "enum") else value
           for key, value in schema.items()}
    kind = out.get("type")
    if kind == "string" and not out.keys() & {"pattern", "format", "enum", "const"}:
        out.update(NO_NUL)
    elif kind == "array" and "items" not in out:
        out["items"] = ref("JsonValue")
    elif kind == "object" and not out.keys() & {"properties", "additionalProperties", "$ref"}:
        out.update(additionalProperties=ref("JsonValue"), propertyNames=NO_NUL)
    elif kind == "object" and out.get("additionalProperties", False) is not False and "propertyNames" not in out:
        out["propertyNames"] = NO_NUL
    return out


def _merged(schema: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(schema)
    for key, value in extra.items():
        both = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merged(merged[key], value) if both else value
    return merged


def _ecma(schema: Any) -> Any:
    """`schema` with each pattern in JSON Schema's words (fields.matching)."""
    if isinstance(schema, dict):
        return {k: ecma_pattern(v) if k == "pattern" and isinstance(v, str) else _ecma(v)
                for k, v in schema.items()}
    if isinstance(schema, list):
        return [_ecma(item) for item in schema]
    return schema


@functools.cache
def document(more: tuple[type[msgspec.Struct], ...] = ()) -> dict[str, Any]:
    """The API's document; `more`: models of other routes (the console's) to add."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "deferq", "version": "1",
                 "description": "Delayed jobs and signed callbacks over HTTP. See docs/http.md.\n\n"
                                "Formats that no JSON Schema keyword states:\n\n" + "\n".join(
                                    f"- `{name}`: {says}" for name, says in models.FORMATS.items())},
        "paths": _paths(),  # server/app.py adds the console's (console/routes.py paths)
        "components": {"schemas": schemas(more),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
