"""Microseconds per job of each observing part, in one process, without a database: where the
drain's cost of metrics and tracing goes.

    .venv/bin/python bench/observer_cost.py                 # 20,000 jobs a part, best of 5
    .venv/bin/python bench/observer_cost.py --jobs 50000 --repeat 7

Each part calls what a worker pool calls for one job (``job_started``, ``handler_returned``,
``job_finished``, through the pool's :class:`~tether.entrypoints.worker.observers.Observers`) on
jobs enqueued on the memory store: Prometheus metrics; tracing through a no-op tracer provider
(Tether's own work: names, attributes, the link cache, the context); tracing through the SDK with
a batch processor and an exporter that drops the spans, with no job sampled, one in ten, and every
one; and the same with jobs enqueued one by one (each carries its own trace context, so each
process span parses its headers for its link) rather than in batches of 1,000 (one context per
batch, parsed once).  The best of ``--repeat`` runs is quoted (the machine is shared).  A figure,
not a test; compare with the workers' CPU per job of ``bench/observability_cost.py``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import tether
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import NoOpTracerProvider
from prometheus_client import CollectorRegistry
from tether.entrypoints.execution import Execution, Outcome
from tether.entrypoints.service import EnqueueRequest
from tether.entrypoints.worker.observers import combine
from tether.metrics import WorkerMetrics
from tether.tracing import instrument

BATCH = 1_000


class Dropping(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def provider(sample: float) -> TracerProvider:
    sdk = TracerProvider(sampler=ParentBased(TraceIdRatioBased(sample)))
    sdk.add_span_processor(BatchSpanProcessor(Dropping(), max_queue_size=100_000))
    return sdk


def part(what: str, sample: float, *, one_by_one: bool, jobs: int, repeat: int) -> float:
    """Best microseconds per job of ``what`` (``metrics``, ``noop``, ``sdk``) over ``repeat`` runs."""
    app = tether.connect("memory://")
    observers: list[Any] = []
    if what == "metrics":
        observers.append(WorkerMetrics(CollectorRegistry()))
    else:
        observers.append(instrument(app, tracer_provider=NoOpTracerProvider() if what == "noop" else provider(sample)))
    if one_by_one:
        held = [app.enqueue("bench.noop", {"i": i}).job for i in range(BATCH)]
    else:
        held = [r.job for r in app.enqueue_many([EnqueueRequest("bench.noop", {"i": i}) for i in range(BATCH)])]
    pool_observer = combine(observers)
    assert pool_observer is not None
    executions = [Execution(job, Outcome.COMPLETED) for job in held]
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for k in range(jobs):
            job = held[k % BATCH]
            state = pool_observer.job_started(job, "bench-worker")
            pool_observer.handler_returned(job, state, executions[k % BATCH])
            pool_observer.job_finished(job, Outcome.COMPLETED, 0.001)
        best = min(best, (time.perf_counter() - started) / jobs * 1e6)
    app.close()
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rows = [
        ("metrics (Prometheus counters and histogram)", "metrics", 1.0, False),
        ("tracing, no-op provider (Tether's own work)", "noop", 1.0, False),
        ("tracing, SDK, no job sampled", "sdk", 0.0, False),
        ("tracing, SDK, 1 job in 10 sampled", "sdk", 0.1, False),
        ("tracing, SDK, every job sampled", "sdk", 1.0, False),
        ("tracing, SDK, none sampled, enqueued one by one", "sdk", 0.0, True),
        ("tracing, SDK, 1 in 10, enqueued one by one", "sdk", 0.1, True),
    ]
    for label, what, sample, one_by_one in rows:
        cost = part(what, sample, one_by_one=one_by_one, jobs=args.jobs, repeat=args.repeat)
        print(f"  {label:50} {cost:6.1f} us/job", flush=True)


if __name__ == "__main__":
    main()
