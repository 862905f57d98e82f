"""OpenTelemetry: a producer span at enqueue, its context carried in the job, and a
consumer span on run linked to it, with the task's own spans as its children."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from deferq.contrib.otel import Tracing
from deferq.worker import Worker, WorkerConfig


@pytest.mark.parametrize("store_url", ["memory", "sqlite", "redis", "postgres"], indirect=True)
def test_enqueue_and_run_are_linked_spans(app):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app.add_middleware(Tracing(provider))
    tracer = provider.get_tracer("user-code")

    @app.task(max_attempts=1)
    def work(n: int) -> int:
        with tracer.start_as_current_span("inside the task"):
            if n < 0:
                raise ValueError("negative")
            return n

    ok, bad = work.enqueue(1), work.enqueue(-1)
    assert Worker(app, WorkerConfig(burst=True, concurrency=1)).run() == 0
    spans = {(s.name, s.attributes.get("messaging.message.id")): s for s in exporter.get_finished_spans()}
    for job in (ok, bad):
        producer = spans[("work publish", job.id)]
        consumer = spans[("work process", job.id)]
        assert producer.kind == trace.SpanKind.PRODUCER and consumer.kind == trace.SpanKind.CONSUMER
        assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]
        assert consumer.attributes["messaging.destination.name"] == "default"
    inner = [s for s in exporter.get_finished_spans() if s.name == "inside the task"]
    consumers = {s.context.span_id for (name, _), s in spans.items() if name == "work process"}
    assert len(inner) == 2 and {s.parent.span_id for s in inner} == consumers
    failed = spans[("work process", bad.id)]
    assert failed.status.status_code == trace.StatusCode.ERROR and failed.events[0].name == "exception"
    assert app.get(ok.id).result == 1 and app.get(ok.id).meta["otel"]["traceparent"]
