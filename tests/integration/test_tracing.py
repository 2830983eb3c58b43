"""OpenTelemetry tracing with the SDK's in-memory exporter, on memory, SQLite and PostgreSQL: the
send span at enqueue, the process span around each handler linked to it through the job's
headers, their messaging attributes, failures, and nothing injected without instrumentation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.propagators.textmap import default_getter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
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


def test_a_sampler_decides_on_the_messaging_attributes_and_an_unsampled_job_is_still_run_under_its_span(
    app: Tether, exporter: InMemorySpanExporter
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

    seen: list[dict[str, object]] = []

    class OnlyReports(Sampler):
        """Records the process spans of the ``reports`` queue only, deciding on the span's opening attributes."""

        def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):  # type: ignore[no-untyped-def]
            if kind is SpanKind.CONSUMER:
                seen.append(dict(attributes or {}))
            keep = kind is not SpanKind.CONSUMER or (attributes or {}).get("messaging.destination.name") == "reports"
            return SamplingResult(Decision.RECORD_AND_SAMPLE if keep else Decision.DROP, attributes)

        def get_description(self) -> str:
            return "OnlyReports"

    provider = TracerProvider(sampler=OnlyReports())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument(app, tracer_provider=provider)
    current: list[bool] = []

    @app.handler("job")
    def job(payload: dict) -> None:
        current.append(trace.get_current_span().get_span_context().is_valid)

    first = app.enqueue("job", queue="mail").job
    second = app.enqueue("job", queue="reports").job
    app.worker(queues=["mail", "reports"], reap_interval=0.2, max_wait=0.05, worker_id="w-trace").run(
        stop_when_idle=True, install_signal_handlers=False)
    opening = {"messaging.system": "tether", "messaging.operation.type": "process", "messaging.operation.name": "process"}
    assert sorted(seen, key=str) == sorted([{**opening, "messaging.destination.name": "mail"},
                                            {**opening, "messaging.destination.name": "reports"}], key=str)
    assert current == [True, True]  # the unsampled job's handler ran under its (non-recording) span too
    [process] = spans(exporter, "process reports")
    assert process.attributes is not None and process.attributes["messaging.message.id"] == str(second.id)
    assert process.attributes["tether.job.attempt"] == 1 and process.attributes["messaging.client.id"] == "w-trace"
    assert not spans(exporter, "process mail") and app.get(first.id).status is JobStatus.COMPLETED


def test_an_unsampled_job_never_parses_its_headers(app: Tether, exporter: InMemorySpanExporter) -> None:
    from opentelemetry import propagate
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    class Counting(TraceContextTextMapPropagator):
        extracted = 0

        def extract(self, carrier, context=None, getter=default_getter):  # type: ignore[no-untyped-def]
            Counting.extracted += 1
            return super().extract(carrier, context, getter)

    sending = TracerProvider(sampler=ALWAYS_ON)
    sending.add_span_processor(SimpleSpanProcessor(exporter))
    instrument(app, tracer_provider=sending)
    jobs = [app.enqueue("noop", {"n": n}).job for n in range(3)]
    assert all("traceparent" in job.headers for job in jobs)
    app.handler("noop")(lambda payload: None)
    previous = propagate.get_global_textmap()
    propagate.set_global_textmap(Counting())
    try:
        instrument(app, tracer_provider=TracerProvider(sampler=ALWAYS_OFF))
        run_until_idle(app)
        assert Counting.extracted == 0 and all(app.get(j.id).status is JobStatus.COMPLETED for j in jobs)
        instrument(app, tracer_provider=sending)
        again = app.enqueue("noop", {"n": 3}).job
        run_until_idle(app)
        assert Counting.extracted == 1
    finally:
        propagate.set_global_textmap(previous)
    [process] = spans(exporter, "process default")
    [send] = [s for s in spans(exporter, "send default") if s.attributes and s.attributes["messaging.message.id"] == str(again.id)]
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
