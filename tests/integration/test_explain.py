"""``app.explain`` on the memory, SQLite and PostgreSQL stores: every verdict with its exact text.

A fake clock at 2026-01-01T00:00:00Z drives every time; the worker registry is written directly
(``app.registry.record_worker``), so no thread runs and every text is exact.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import tether
from tether.adapters.clock import FakeClock
from tether.domain.errors import JobNotFound
from tether.domain.job import JobStatus
from tether.entrypoints.service import EnqueueRequest, Tether
from tether.testing.contract.worker_registry import entry

from tests.postgres_fixtures import schema_name, temporary_app

_schemas = itertools.count()


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Tether, FakeClock]]:
    clock = FakeClock()
    if request.param == "postgres":
        with temporary_app(schema_name(f"explain{next(_schemas)}"), clock=clock) as app:
            yield app, clock
        return
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'jobs.db'}"
    with tether.connect(url, clock=clock) as app:
        yield app, clock


def live_worker(app: Tether, clock: FakeClock, worker_id: str = "w-1", **changes: object) -> None:
    assert app.registry is not None
    fields: dict[str, object] = {"queues": ("default",), "job_types": ("reports.build",), **changes}
    app.registry.record_worker(entry(clock, worker_id, **fields))


def why(app: Tether, job_id: int) -> str:
    return app.explain(job_id).verdict


def test_scheduled_for_later_and_no_live_worker(setup: tuple[Tether, FakeClock]) -> None:
    app, clock = setup
    later = app.enqueue("reports.build", delay=5400).job
    due = app.enqueue("reports.build").job
    assert why(app, later.id) == "scheduled for later: due at 2026-01-01 01:30:00 UTC, in 1 h 30 min"
    assert why(app, due.id) == "no live worker handles job type reports.build on queue default"
    live_worker(app, clock, "w-emails", job_types=("emails.send",))  # alive, on the queue, without the type
    live_worker(app, clock, "w-old", heartbeat_interval=1.0)
    clock.advance(6)  # w-old missed its refreshes (gone after 5 s)
    assert why(app, due.id) == "no live worker handles job type reports.build on queue default"
    assert app.explain(due.id).reason == "no_worker"


def test_next_in_line_then_waiting_behind_the_jobs_that_go_first(setup: tuple[Tether, FakeClock]) -> None:
    app, clock = setup
    live_worker(app, clock)
    first = app.enqueue("reports.build").job
    assert why(app, first.id) == (
        "due since 2026-01-01 00:00:00 UTC and first in line on queue default: the next lease there takes it")
    app.enqueue("reports.build", priority=5)  # goes first
    app.enqueue("reports.build", queue="other", priority=9)  # another queue: not ahead
    assert why(app, first.id) == "waiting behind 1 due job of queue default that goes first"
    third = app.enqueue("reports.build").job
    assert why(app, third.id) == "waiting behind 2 due jobs of queue default that go first"
    explanation = app.explain(third.id)
    assert (explanation.fact("due_ahead"), explanation.fact("due_ahead_capped")) == (2, False)
    assert explanation.fact("live_workers") == ("w-1",)


def test_waiting_for_its_concurrency_key_then_next_when_the_key_frees(setup: tuple[Tether, FakeClock]) -> None:
    app, clock = setup
    live_worker(app, clock)
    app.limit_queue("default", max_running_per_key=1)
    first, second = (app.enqueue("reports.build", concurrency_key="customer-42").job for _ in range(2))
    [running] = app.repository.lease(queues=["default"], worker_id="w-1", now=clock.now(), lease_timeout=60, limit=5)
    assert running.id == first.id
    assert why(app, second.id) == (
        "waiting: 1 job of concurrency key customer-42 already running, the queue's per-key limit (at most 1 per key)")
    assert app.explain(second.id).fact("key_running") == 1
    clock.advance(61)  # the lease expired, nobody reaped it: the key's slot is free
    live_worker(app, clock)
    assert app.explain(second.id).reason == "next"


def test_waiting_behind_ten_thousand_or_more(setup: tuple[Tether, FakeClock]) -> None:
    app, clock = setup
    live_worker(app, clock)
    app.enqueue_many([EnqueueRequest("reports.build", priority=1) for _ in range(10_001)])
    last = app.enqueue("reports.build").job
    assert why(app, last.id) == "waiting behind 10,000+ due jobs of queue default that go first"
    assert app.explain(last.id).fact("due_ahead_capped") is True


def test_running_with_the_worker_alive_then_gone_then_the_lease_expired(setup: tuple[Tether, FakeClock]) -> None:
    app, clock = setup
    live_worker(app, clock, heartbeat_interval=10.0)  # gone 30 s after its last refresh
    job = app.enqueue("reports.build").job
    clock.advance(2)
    [leased] = app.repository.lease(queues=None, worker_id="w-1", now=clock.now(), lease_timeout=60)
    assert leased.id == job.id and leased.lease_token
    clock.advance(3)
    running = app.explain(job.id)
    assert running.verdict == (
        "running on worker w-1 since 2026-01-01 00:00:02 UTC, lease until 2026-01-01 00:01:02 UTC "
        "(worker w-1 is alive, last seen 5 s ago)")
    assert (running.reason, running.status, running.fact("worker_status")) == ("running", JobStatus.RUNNING, "alive")
    assert leased.lease_token not in repr(running)
    clock.advance(30)
    assert why(app, job.id) == (
        "running on worker w-1 since 2026-01-01 00:00:02 UTC, lease until 2026-01-01 00:01:02 UTC "
        "(worker w-1 is gone, last seen 35 s ago)")
    clock.advance(30)
    assert why(app, job.id) == (
        "running on worker w-1 since 2026-01-01 00:00:02 UTC; its lease expired at 2026-01-01 00:01:02 UTC, so the "
        "reaper takes it back at its next pass (worker w-1 is gone, last seen 1 min 5 s ago)")
    assert app.registry is not None and app.registry.remove_worker("w-1")
    assert why(app, job.id).endswith("(worker w-1 is not in the worker registry)")
    assert app.explain(job.id).fact("worker_status") == "unknown"


def test_retrying_dead_and_completed(setup: tuple[Tether, FakeClock]) -> None:
    app, clock = setup
    flaky = app.enqueue("reports.build", max_attempts=2).job
    done = app.enqueue("reports.build").job
    repo = app.repository
    first, second = repo.lease(queues=None, worker_id="w-1", now=clock.now(), lease_timeout=60, limit=2)
    assert (first.id, second.id) == (flaky.id, done.id)
    clock.advance(1)
    repo.fail(first.id, first.lease_token or "", now=clock.now(), error="ValueError: boom\nTraceback ...",
              retry_at=clock.now() + timedelta(seconds=30))
    repo.complete(second.id, second.lease_token or "", now=clock.now())
    assert why(app, flaky.id) == "retrying at 2026-01-01 00:00:31 UTC (in 30 s) after attempt 1 failed with ValueError: boom"
    assert why(app, done.id) == "completed at 2026-01-01 00:00:01 UTC after 1 attempt"
    clock.advance(30)
    assert why(app, flaky.id) == "no live worker handles job type reports.build on queue default"  # due again
    [again] = repo.lease(queues=None, worker_id="w-1", now=clock.now(), lease_timeout=60)
    repo.fail(again.id, again.lease_token or "", now=clock.now(), error="KeyError: 'x'", retry_at=clock.now())
    assert why(app, flaky.id) == "dead after 2 attempts; last error: KeyError: 'x'"
    assert app.explain(flaky.id).fact("finished_at") == clock.now()


def test_an_unknown_job_is_not_found(setup: tuple[Tether, FakeClock]) -> None:
    app, _ = setup
    with pytest.raises(JobNotFound):
        app.explain(987_654)
