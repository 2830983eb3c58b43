"""``async def`` handlers are watched exactly like thread-run ones: each job's observers hear
``job_started`` before its handler runs, ``handler_returned`` once its outcome is decided, then
``job_finished``; the OpenTelemetry ``process {queue}`` span is current inside the coroutine (its
own spans nest under it, each job's under its own span while many run at once on the loop); the
``--log-jobs`` start line is logged and the handler's log records carry the job's fields.

Real threads and the pool's real event loop, on the in-memory store and on PostgreSQL; the SDK's
in-memory span exporter.  Waits are bounded; nothing is timed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.domain.snooze import Snooze
from tether.entrypoints.container import connect
from tether.entrypoints.execution import Execution, Outcome
from tether.entrypoints.job_logs import JobFieldsFilter, JobLogObserver
from tether.entrypoints.service import Tether
from tether.tracing import instrument

from tests.postgres_fixtures import schema_name, temporary_app

FAST = RetryPolicy(base_seconds=0.05, cap_seconds=0.1, jitter=0)


@pytest.fixture(params=["memory", pytest.param("postgresql", marks=pytest.mark.postgres)])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tether]:
    if request.param == "postgresql":
        with temporary_app(schema_name("async_obs"), retry_policy=FAST) as pg_app:
            yield pg_app
        return
    memory_app = connect("memory://", retry_policy=FAST)
    try:
        yield memory_app
    finally:
        memory_app.close()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def run_until_idle(app: Tether, **options: object) -> None:
    app.worker(reap_interval=0.2, lease_timeout=10.0, max_wait=0.05, worker_id="w-async", **options).run(  # type: ignore[arg-type]
        stop_when_idle=True, install_signal_handlers=False)


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


class Recorder:
    """An observer that writes down each call, with the thread it came on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, object]] = []
        self.lock = threading.Lock()

    def pool_started(self, pool: object) -> None:
        return None

    def job_started(self, job: Job, worker_id: str) -> object:
        with self.lock:
            self.calls.append(("started", job.id, worker_id))
        return ("state", job.id)

    def handler_returned(self, job: Job, state: object, execution: Execution | None) -> None:
        with self.lock:
            self.calls.append(("returned", job.id, (state, None if execution is None else execution.outcome)))

    def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
        with self.lock:
            self.calls.append(("finished", job.id, outcome))

    def of(self, job_id: int) -> list[tuple[str, object]]:
        return [(name, detail) for name, jid, detail in self.calls if jid == job_id]


def test_each_async_job_is_started_returned_and_finished_in_order_whatever_its_outcome(app: Tether) -> None:
    recorder = Recorder()
    snoozed: list[int] = []

    @app.handler("ok")
    async def ok(payload: dict) -> None:
        await asyncio.sleep(0)

    @app.handler("broken", max_attempts=1)
    async def broken(payload: dict) -> None:
        await asyncio.sleep(0)
        raise ValueError("no")

    @app.handler("later")
    async def later(payload: dict) -> None:
        if not snoozed:
            snoozed.append(1)
            raise Snooze(0.05)

    @app.handler("slow", max_attempts=1, timeout=0.1)
    async def slow(payload: dict) -> None:
        await asyncio.sleep(30)

    done, dead, snooze = app.enqueue("ok").job, app.enqueue("broken").job, app.enqueue("later").job
    timed_out = app.enqueue("slow").job
    run_until_idle(app, observers=[recorder])

    assert app.get(done.id).status is JobStatus.COMPLETED and app.get(dead.id).status is JobStatus.DEAD
    assert recorder.of(done.id) == [
        ("started", "w-async"), ("returned", (("state", done.id), Outcome.COMPLETED)), ("finished", Outcome.COMPLETED)]
    assert recorder.of(dead.id) == [
        ("started", "w-async"), ("returned", (("state", dead.id), Outcome.DEAD)), ("finished", Outcome.DEAD)]
    assert recorder.of(snooze.id) == [
        ("started", "w-async"), ("returned", (("state", snooze.id), Outcome.SNOOZED)), ("finished", Outcome.SNOOZED),
        ("started", "w-async"), ("returned", (("state", snooze.id), Outcome.COMPLETED)), ("finished", Outcome.COMPLETED)]
    assert recorder.of(timed_out.id) == [  # its task was cancelled at its limit
        ("started", "w-async"), ("returned", (("state", timed_out.id), Outcome.DEAD)), ("finished", Outcome.DEAD)]


def test_the_process_span_is_current_in_the_coroutine_and_ends_with_its_outcome(
    app: Tether, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    instrument(app, tracer_provider=provider)
    tracer = provider.get_tracer("test")

    @app.handler("fetch", queue="net")
    async def fetch(payload: dict) -> None:
        await asyncio.sleep(0.01)
        with tracer.start_as_current_span("download"):
            await asyncio.sleep(0.01)

    @app.handler("flaky", queue="net", max_attempts=2)
    async def flaky(payload: dict) -> None:
        await asyncio.sleep(0)
        raise ValueError("the line is down")

    with tracer.start_as_current_span("POST /sync"):
        job = app.enqueue("fetch").job
    app.enqueue("flaky")
    run_until_idle(app)

    [send] = [span for span in spans(exporter, "send net") if span.attributes["tether.job.type"] == "fetch"]
    processes = spans(exporter, "process net")
    by_type: dict[str, list[ReadableSpan]] = {}
    for span in processes:
        assert span.attributes is not None
        by_type.setdefault(str(span.attributes["tether.job.type"]), []).append(span)
    [process] = by_type["fetch"]
    [download] = spans(exporter, "download")
    assert process.kind is SpanKind.CONSUMER and process.attributes is not None
    assert process.attributes["messaging.message.id"] == str(job.id)
    assert process.attributes["messaging.client.id"] == "w-async"
    assert process.attributes["tether.job.outcome"] == "completed"
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert download.parent is not None and download.parent.span_id == process.context.span_id
    assert process.status.status_code is StatusCode.UNSET
    outcomes = sorted(str(span.attributes["tether.job.outcome"]) for span in by_type["flaky"])  # type: ignore[index]
    assert outcomes == ["dead", "retrying"]
    assert all(span.status.status_code is StatusCode.ERROR and [e.name for e in span.events] == ["exception"]
               for span in by_type["flaky"])


def test_concurrent_coroutines_each_nest_their_spans_under_their_own_process_span(
    app: Tether, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    instrument(app, tracer_provider=provider)
    tracer = provider.get_tracer("test")
    inside = {"now": 0, "most": 0}

    @app.handler("crawl")
    async def crawl(payload: dict) -> None:
        inside["now"] += 1
        inside["most"] = max(inside["most"], inside["now"])
        await asyncio.sleep(0.05)  # every job of the batch is on the loop at once here
        with tracer.start_as_current_span("page", attributes={"n": payload["n"]}):
            await asyncio.sleep(0.01)
        inside["now"] -= 1

    jobs = [app.enqueue("crawl", {"n": n}).job for n in range(8)]
    run_until_idle(app, concurrency=1, async_concurrency=8, prefetch=8)

    assert inside["most"] > 1  # they did overlap on the loop
    process_of = {span.attributes["messaging.message.id"]: span for span in spans(exporter, "process default")}  # type: ignore[index]
    assert len(process_of) == len(jobs)
    for page in spans(exporter, "page"):
        assert page.attributes is not None and page.parent is not None
        job = jobs[int(page.attributes["n"])]  # type: ignore[arg-type]
        assert page.parent.span_id == process_of[str(job.id)].context.span_id


def test_the_log_jobs_start_line_and_the_handlers_own_records_carry_the_job(
    app: Tether, caplog: pytest.LogCaptureFixture
) -> None:
    handler_logger = logging.getLogger("tests.async_handler")

    @app.handler("send")
    async def send(payload: dict) -> None:
        await asyncio.sleep(0)
        handler_logger.info("sending %s", payload["to"])

    job = app.enqueue("send", {"to": "ada"}).job
    caplog.handler.addFilter(JobFieldsFilter())
    with caplog.at_level(logging.INFO):
        run_until_idle(app, observers=[JobLogObserver()])

    lines = [r for r in caplog.records if r.name == "tether.jobs" and getattr(r, "job_id", None) == job.id]
    assert len(lines) == 2
    assert lines[0].getMessage() == f"job {job.id} (send) started, attempt 1/{job.max_attempts}"
    assert lines[-1].getMessage().startswith(f"job {job.id} (send) completed in ")
    [own] = [r for r in caplog.records if r.name == "tests.async_handler"]
    assert own.getMessage() == "sending ada"
    assert (getattr(own, "job_id", None), getattr(own, "job_type", None), getattr(own, "worker_id", None)) == (
        job.id, "send", "w-async")
