"""Prometheus metrics: a worker's counters and histogram after real runs, the store-wide gauges on
memory, SQLite and PostgreSQL, and the HTTP endpoint (each test on its own registry)."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from tether.adapters.clock import FakeClock, SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import PermanentError, StorageUnavailable, ValidationError
from tether.domain.overview import QueueSummary
from tether.domain.retry import RetryPolicy
from tether.domain.snooze import Snooze
from tether.entrypoints.container import connect
from tether.entrypoints.service import Tether
from tether.metrics import StoreCollector, WorkerMetrics, serve, store_gauges

from tests.conftest import wait_for
from tests.postgres_fixtures import schema_name, temporary_app

FAST = RetryPolicy(base_seconds=0.05, cap_seconds=0.1, jitter=0)
#: Every label a Tether metric may carry: never a job id, key or worker id.
ALLOWED_LABELS = {"queue", "job_type", "outcome", "status", "le"}


def make_app() -> Tether:
    repo = InMemoryJobRepository()
    clock = SystemClock()
    return Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock, retry_policy=FAST)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_a_worker_counts_outcomes_and_times_by_queue_and_job_type() -> None:
    app = make_app()
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)

    @app.handler("ok", queue="mail")
    def ok(payload: dict) -> None:
        pass

    @app.handler("flaky", max_attempts=2)
    def flaky(payload: dict) -> None:
        raise ValueError("no")

    @app.handler("doomed")
    def doomed(payload: dict) -> None:
        raise PermanentError("never")

    snoozed: set[int] = set()

    @app.handler("sleepy")
    def sleepy(payload: dict) -> None:
        if payload["n"] not in snoozed:
            snoozed.add(payload["n"])
            raise Snooze(0.05)

    for n in range(3):
        app.enqueue("ok", {"n": n})
    app.enqueue("flaky")
    app.enqueue("doomed")
    app.enqueue("sleepy", {"n": 1})
    app.enqueue("unknown.type", queue="mail")  # no handler here: handed back, counted by the pool
    assert value(registry, "tether_jobs_completed_total", queue="mail", job_type="ok") is None  # nothing yet

    pool = app.worker(reap_interval=0.2, lease_timeout=10.0, concurrency=2, observers=[metrics])
    pool.start()
    try:
        wait_for(lambda: (value(registry, "tether_jobs_completed_total", queue="default", job_type="sleepy") == 1
                          and value(registry, "tether_jobs_failed_total", queue="default", job_type="flaky",
                                    outcome="dead") == 1
                          and value(registry, "tether_jobs_completed_total", queue="mail", job_type="ok") == 3),
                 timeout=30)
        assert value(registry, "tether_worker_jobs_in_flight") is not None
    finally:
        pool.stop()

    assert value(registry, "tether_jobs_failed_total", queue="default", job_type="flaky", outcome="retrying") == 1
    assert value(registry, "tether_jobs_failed_total", queue="default", job_type="doomed", outcome="dead") == 1
    assert value(registry, "tether_jobs_snoozed_total", queue="default", job_type="sleepy") == 1
    assert value(registry, "tether_job_duration_seconds_count", queue="mail", job_type="ok") == 3
    assert value(registry, "tether_job_duration_seconds_count", queue="default", job_type="flaky") == 2
    assert value(registry, "tether_job_duration_seconds_bucket", queue="mail", job_type="ok", le="+Inf") == 3
    assert value(registry, "tether_jobs_no_handler_total") == pool.stats.no_handler >= 1
    for name in ("tether_leases_lost_total", "tether_jobs_reaped_total", "tether_jobs_released_total",
                 "tether_jobs_timed_out_total"):
        assert value(registry, name) == 0
    assert value(registry, "tether_worker_jobs_in_flight") == 0
    for family in registry.collect():
        for sample in family.samples:
            assert set(sample.labels) <= ALLOWED_LABELS, sample


def test_the_pools_counters_are_read_from_their_stats_when_scraped() -> None:
    repo = InMemoryJobRepository()
    clock = FakeClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock)
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    job = app.enqueue("lost").job
    [leased] = repo.lease(queues=None, worker_id="gone", now=clock.now(), lease_timeout=1, limit=1)
    clock.advance(5)  # its lease has expired: the pool's reaper takes it back
    pool = app.worker(reap_interval=0.05, lease_timeout=10.0, observers=[metrics])
    pool.start()
    try:
        wait_for(lambda: value(registry, "tether_jobs_reaped_total") == 1, timeout=10)
    finally:
        pool.stop()
    assert leased.id == job.id


def test_a_second_worker_metrics_on_one_registry_is_refused() -> None:
    registry = CollectorRegistry()
    WorkerMetrics(registry)
    with pytest.raises(ValueError, match="Duplicated"):
        WorkerMetrics(registry)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Tether, FakeClock]]:
    clock = FakeClock()
    if request.param == "memory":
        app = connect("memory://", clock=clock)
    elif request.param == "sqlite":
        app = connect(f"sqlite:///{tmp_path / 'jobs.db'}", clock=clock)
    else:
        with temporary_app(schema_name("metrics_gauges"), clock=clock) as app:
            yield app, clock
        return
    try:
        yield app, clock
    finally:
        app.close()


def test_store_gauges_give_depth_per_status_and_the_oldest_due_jobs_wait(store: tuple[Tether, FakeClock]) -> None:
    app, clock = store
    registry = CollectorRegistry()
    collector = store_gauges(app, registry)
    assert value(registry, "tether_queue_scrape_success") == 1
    assert value(registry, "tether_queue_depth", queue="mail", status="queued") is None  # no live job: no sample

    app.enqueue("send", queue="mail")
    clock.advance(30)
    app.enqueue("send", queue="mail")
    app.enqueue("send", queue="mail", delay=timedelta(hours=1))
    app.enqueue("build", queue="reports")
    app.repository.lease(queues=["reports"], worker_id="w", now=clock.now(), lease_timeout=60, limit=1)
    clock.advance(12)

    assert value(registry, "tether_queue_depth", queue="mail", status="queued") == 3
    assert value(registry, "tether_queue_depth", queue="mail", status="running") == 0
    assert value(registry, "tether_queue_depth", queue="reports", status="running") == 1
    assert value(registry, "tether_queue_latency_seconds", queue="mail") == 42.0
    assert value(registry, "tether_queue_latency_seconds", queue="reports") == 0.0  # nothing due waits there
    registry.unregister(collector)
    assert value(registry, "tether_queue_depth", queue="mail", status="queued") is None


def test_a_store_that_does_not_answer_gives_scrape_success_zero_not_a_failed_scrape() -> None:
    class Down(InMemoryJobRepository):
        def queue_summaries(self, *, now):  # type: ignore[no-untyped-def, override]
            raise StorageUnavailable("the database is down")

    repo = Down()
    clock = FakeClock()
    registry = CollectorRegistry()
    registry.register(StoreCollector(Tether(repo, PollingDispatcher(repo, clock), clock)))
    assert value(registry, "tether_queue_scrape_success") == 0


def test_registering_the_store_gauges_reads_nothing() -> None:
    class Counting(InMemoryJobRepository):
        reads = 0

        def queue_summaries(self, *, now):  # type: ignore[no-untyped-def, override]
            Counting.reads += 1
            return [QueueSummary("q", queued=1)]

    repo = Counting()
    clock = FakeClock()
    registry = CollectorRegistry()  # auto_describe: register() asks the collector to describe itself
    store_gauges(Tether(repo, PollingDispatcher(repo, clock), clock), registry)
    assert Counting.reads == 0
    assert value(registry, "tether_queue_depth", queue="q", status="queued") == 1 and Counting.reads == 1


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_exports_the_registry_over_http_and_names_a_port_in_use() -> None:
    registry = CollectorRegistry()
    WorkerMetrics(registry)
    port = _free_port()
    serve(port, addr="127.0.0.1", registry=registry)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        body = response.read().decode()
    assert "tether_leases_lost_total 0.0" in body
    assert "# TYPE tether_job_duration_seconds histogram" in body
    with pytest.raises(ValidationError) as info:
        serve(port, addr="127.0.0.1", registry=registry)
    assert info.value.field == "metrics_port" and "in use" in info.value.problem
    with pytest.raises(ValidationError, match="metrics_port"):
        serve(70_000, registry=registry)
