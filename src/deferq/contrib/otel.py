"""OpenTelemetry tracing as a middleware (`pip install 'deferq[otel]'`).

    app.add_middleware(deferq.contrib.otel.Tracing())

Enqueueing a job makes a PRODUCER span and carries its context inside the job (in
`job.meta`, W3C trace-context headers); running it makes a CONSUMER span linked to that
producer span, current while the task runs, so spans the task makes are its children.
Attributes follow OpenTelemetry's messaging conventions (system "deferq", destination
the queue, message id the job id). A failed attempt records its exception and sets the
span's status to error.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import MissingExtra
from ..job import encode_payload
from ..middleware import Middleware

try:
    from opentelemetry import context, propagate, trace
except ImportError:  # pragma: no cover - the extra is missing
    raise MissingExtra("otel", "opentelemetry-api") from None

if TYPE_CHECKING:
    from ..backends.base import Enqueue, Outcome
    from ..job import Job

META_KEY = "otel"  # job.meta[META_KEY]: the carrier of the producer's context


def _attributes(job: Job) -> dict[str, Any]:
    return {"messaging.system": "deferq", "messaging.destination.name": job.queue,
            "messaging.message.id": job.id, "deferq.task": job.task}


class Tracing(Middleware):
    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("deferq", tracer_provider=tracer_provider)
        self._running: dict[str, tuple[trace.Span, object]] = {}
        self._lock = threading.Lock()

    def before_enqueue(self, items: list[Enqueue]) -> list[Enqueue]:
        traced = []
        for item in items:
            job = item.job
            with self.tracer.start_as_current_span(
                f"{job.task} publish", kind=trace.SpanKind.PRODUCER, attributes=_attributes(job)
            ):
                carrier: dict[str, str] = {}
                propagate.inject(carrier)
            meta = {**job.meta, META_KEY: carrier}
            payload = encode_payload(job.task, job.args, job.kwargs, meta)
            traced.append(replace(item, job=job.evolve(meta=meta), payload=payload))
        return traced

    def before_run(self, job: Job) -> None:
        producer = trace.get_current_span(propagate.extract(job.meta.get(META_KEY) or {}))
        links = [trace.Link(producer.get_span_context())] if producer.get_span_context().is_valid else []
        attributes = {**_attributes(job), "deferq.attempt": job.attempts}
        span = self.tracer.start_span(f"{job.task} process", kind=trace.SpanKind.CONSUMER,
                                      attributes=attributes, links=links)
        token = context.attach(trace.set_span_in_context(span))
        with self._lock:
            self._running[job.id] = (span, token)

    def after_run(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        with self._lock:
            span, token = self._running.pop(job.id, (None, None))
        if span is None:
            return
        span.set_attribute("deferq.outcome", str(outcome.kind))
        if exc is not None:
            span.record_exception(exc)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)[:200]))
        span.end()
        context.detach(token)  # type: ignore[arg-type]  # the token attach() gave
