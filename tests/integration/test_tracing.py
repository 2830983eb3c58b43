"""OpenTelemetry tracing with the SDK's in-memory exporter, on memory, SQLite and PostgreSQL: the
send span at enqueue, the process span around each handler linked to it through the job's
headers, their messaging attributes, failures, and nothing injected without instrumentation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tether.domain.errors import PermanentError
from tether.domain.job import JobStatus
from tether.domain.retry import RetryPolicy
from tether.domain.snooze import Snooze
from tether.entrypoints.container import connect
from tether.entrypoints.service import EnqueueRequest, Tether
from tether.tracing import instrument, uninstrument

from tests.postgres_fixtures import schema_name, temporary_app

FAST = RetryPolicy(base_seconds=0.05, cap_seconds=0.1, jitter=0)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tether]:
    if request.param == "postgresql":
        with temporary_app(schema_name("tracing"), retry_policy=FAST) as pg_app:
            yield pg_app
        return
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'jobs.db'}"
    tether_app = connect(url, retry_policy=FAST)
    try:
        yield tether_app
    finally:
        tether_app.close()


def run_until_idle(app: Tether) -> None:
    app.worker(reap_interval=0.2, lease_timeout=10.0, max_wait=0.05, worker_id="w-trace").run(
        stop_when_idle=True, install_signal_handlers=False)


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def test_the_process_span_links_to_the_send_span_of_the_request_that_enqueued_the_job(
    app: Tether, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    instrument(app, tracer_provider=provider)
    tracer = provider.get_tracer("test")
    seen: list[str] = []

    @app.handler("mail", queue="outbox")
    def mail(payload: dict) -> None:
        with tracer.start_as_current_span("render"):
            seen.append(payload["to"])

    with tracer.start_as_current_span("POST /signup") as request_span:
        job = app.enqueue("mail", {"to": "ada@example.org"}).job
    assert job.headers_json is not None and "traceparent" in job.headers
    run_until_idle(app)
    assert seen == ["ada@example.org"] and app.get(job.id).status is JobStatus.COMPLETED

    [send] = spans(exporter, "send outbox")
    [process] = spans(exporter, "process outbox")
    [render] = spans(exporter, "render")
    assert send.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    assert send.parent is not None and send.parent.span_id == request_span.get_span_context().span_id
    assert send.attributes is not None and dict(send.attributes) == {
        "messaging.system": "tether", "messaging.destination.name": "outbox", "messaging.operation.type": "send",
        "messaging.operation.name": "send", "messaging.message.id": str(job.id), "tether.job.type": "mail"}
    assert process.attributes is not None and dict(process.attributes) == {
        "messaging.system": "tether", "messaging.destination.name": "outbox", "messaging.operation.type": "process",
        "messaging.operation.name": "process", "messaging.message.id": str(job.id), "messaging.client.id": "w-trace",
        "tether.job.type": "mail", "tether.job.attempt": 1, "tether.job.outcome": "completed"}
    assert [link.context.span_id for link in process.links] == [send.context.span_id]  # a link, not the parent
    assert process.parent is None and process.context.trace_id != send.context.trace_id
    assert render.parent is not None and render.parent.span_id == process.context.span_id  # the handler's spans nest
    assert process.status.status_code is StatusCode.UNSET


def test_a_failing_attempt_records_its_exception_and_a_snooze_is_no_error(
    app: Tether, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    instrument(app, tracer_provider=provider)
    snoozed: list[int] = []

    @app.handler("flaky", max_attempts=2)
    def flaky(payload: dict) -> None:
        raise ValueError("the printer is on fire")

    @app.handler("doomed")
    def doomed(payload: dict) -> None:
        raise PermanentError("never")

    @app.handler("sleepy")
    def sleepy(payload: dict) -> None:
        if not snoozed:
            snoozed.append(1)
            raise Snooze(0.05)

    app.enqueue("flaky")
    app.enqueue("doomed")
    app.enqueue("sleepy")
    run_until_idle(app)

    by_outcome = {}
    for span in spans(exporter, "process default"):
        assert span.attributes is not None
        by_outcome.setdefault(span.attributes["tether.job.outcome"], []).append(span)
    assert sorted((k, len(v)) for k, v in by_outcome.items()) == [
        ("completed", 1), ("dead", 2), ("retrying", 1), ("snoozed", 1)]
    [retrying] = by_outcome["retrying"]
    assert retrying.status.status_code is StatusCode.ERROR and "the printer is on fire" in (retrying.status.description or "")
    assert retrying.attributes is not None and retrying.attributes["error.type"] == "ValueError"
    assert [event.name for event in retrying.events] == ["exception"]
    assert all(span.status.status_code is StatusCode.ERROR for span in by_outcome["dead"])
    [snooze] = by_outcome["snoozed"]
    assert snooze.status.status_code is StatusCode.UNSET and not snooze.events


def test_a_batch_is_one_send_span_whose_context_every_job_carries(
    app: Tether, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    instrument(app, tracer_provider=provider)
    results = app.enqueue_many([EnqueueRequest("noop", {"n": n}, queue="bulk") for n in range(3)])
    [send] = spans(exporter, "send bulk")
    assert send.attributes is not None and send.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in send.attributes
    parents = {result.job.headers["traceparent"] for result in results}
    assert len(parents) == 1 and f"{send.context.span_id:016x}" in parents.pop()
    assert all(app.get(result.job.id).headers_json == result.job.headers_json for result in results)


def test_nothing_is_injected_or_traced_without_instrumentation(
    app: Tether, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    ran: list[int] = []

    @app.handler("plain")
    def plain(payload: dict) -> None:
        ran.append(1)

    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("request"):
        job = app.enqueue("plain").job
    assert job.headers_json is None and app.get(job.id).headers_json is None
    instrument(app, tracer_provider=provider)
    uninstrument(app)
    assert app.enqueue("plain").job.headers_json is None
    run_until_idle(app)
    assert ran == [1, 1]
    assert [span.name for span in exporter.get_finished_spans()] == ["request"]


def test_baggage_too_large_for_the_headers_leaves_only_the_trace_context(
    app: Tether, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    from opentelemetry import baggage
    from opentelemetry import context as otel_context

    instrument(app, tracer_provider=provider)
    token = otel_context.attach(baggage.set_baggage("big", "x" * 5000))
    try:
        job = app.enqueue("noop").job
    finally:
        otel_context.detach(token)
    assert set(job.headers) == {"traceparent"}  # the enqueue went through, with its link kept
