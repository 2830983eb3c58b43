"""Job control in a running worker pool, with real threads: cancellation, snooze, jobs without a handler.

On the in-memory repository with the polling dispatcher, and on PostgreSQL (whose completions go
through ``complete_and_lease``, one statement).  Intervals are scaled down (a heartbeat every
0.1 s); waits are bounded, and no assertion is about speed.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import InvalidTransition
from tether.domain.job import JobStatus
from tether.domain.retry import RetryPolicy
from tether.domain.snooze import Snooze
from tether.entrypoints import execution
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import Tether

from tests.conftest import wait_for
from tests.postgres_fixtures import schema_name, temporary_repository

_schemas = itertools.count()
FAST = RetryPolicy(base_seconds=0.05, cap_seconds=0.2, jitter=0)
POOL: dict[str, Any] = {"lease_timeout": 2.0, "heartbeat_interval": 0.1, "reap_interval": 0.2, "max_wait": 0.1}


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
def app(request: pytest.FixtureRequest) -> Iterator[Tether]:
    clock = SystemClock()
    if request.param == "memory":
        repo = InMemoryJobRepository()
        application = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock, retry_policy=FAST)
        yield application
        application.close()
        return
    with temporary_repository(schema_name(f"wjc{next(_schemas)}")) as pg:
        application = Tether(pg, PollingDispatcher(pg, clock, poll_interval=0.05), clock, retry_policy=FAST)
        yield application
        application.dispatcher.close()  # the repository is closed (and its schema dropped) by temporary_repository


def started(app: Tether, job_type: str, body: Callable[[JobContext], None]) -> tuple[threading.Event, list[Any]]:
    """Register ``job_type`` running ``body(ctx)``; returns (set once a handler started, what it noted)."""
    began = threading.Event()
    notes: list[Any] = []

    def handler(payload: Any, ctx: JobContext) -> None:
        began.set()
        body(ctx)

    app.register(job_type, handler)
    return began, notes


def test_a_running_handler_sees_ctx_cancelled_and_the_job_ends_cancelled(app: Tether) -> None:
    notes: list[Any] = []

    def body(ctx: JobContext) -> None:
        notes.append(ctx.sleep(30))  # returns early (False) once the cancel is seen
        notes.append((ctx.cancelled, ctx.cancel_requested, ctx.lease_lost))

    began, _ = started(app, "long", body)
    job = app.enqueue("long", {}).job
    with app.worker(concurrency=2, **POOL) as pool:
        assert began.wait(20)
        asked = app.cancel(job.id)
        assert asked.status is JobStatus.RUNNING and asked.cancel_requested_at is not None
        wait_for(lambda: len(notes) == 2, what="the handler to see the cancel")  # one heartbeat interval, bounded
        wait_for(lambda: app.get(job.id).status is JobStatus.CANCELLED, what="the job to end cancelled")
        wait_for(lambda: pool.stats.cancelled == 1, what="the cancel to be counted")
    assert notes == [False, (True, True, False)]
    final = app.get(job.id)
    assert final.finished_at is not None and final.attempts == 1 and final.lease_token is None
    stats = pool.stats
    assert (stats.completed, stats.failed, stats.dead, stats.lease_lost) == (0, 0, 0, 0)
    with pytest.raises(InvalidTransition, match="cannot cancel a job that is cancelled"):
        app.cancel(job.id)


@pytest.mark.parametrize("how", ["returns", "raises"])
def test_a_handler_that_ignores_the_cancel_ends_cancelled_at_its_outcome_write(app: Tether, how: str) -> None:
    release = threading.Event()

    def body(ctx: JobContext) -> None:
        release.wait(20)  # deaf to ctx.cancelled: finishes its work anyway
        if how == "raises":
            raise ValueError("failed anyway")

    began, _ = started(app, "stubborn", body)
    job = app.enqueue("stubborn", {}, max_attempts=3).job
    other = app.enqueue("quick", {}).job
    app.register("quick", lambda payload: None)
    with app.worker(concurrency=2, **POOL) as pool:
        assert began.wait(20)
        app.cancel(job.id)
        wait_for(lambda: app.get(other.id).status is JobStatus.COMPLETED, what="the other job")
        time.sleep(0.3)  # a few heartbeats: the request is known to the pool, the handler still runs
        assert app.get(job.id).status is JobStatus.RUNNING
        release.set()
        wait_for(lambda: app.get(job.id).status is JobStatus.CANCELLED, what="the job to end cancelled")
        wait_for(lambda: pool.stats.cancelled == 1, what="the cancel to be counted")
    final = app.get(job.id)
    assert final.attempts == 1 and final.last_error == ("ValueError: failed anyway" if how == "raises" else None)
    assert [(a.number, a.outcome.value, a.error) for a in final.history] == [(1, "cancelled", final.last_error)]
    stats = pool.stats
    assert (stats.completed, stats.failed, stats.dead, stats.cancelled) == (1, 0, 0, 1)


def test_a_job_cancelled_while_queued_is_never_run(app: Tether) -> None:
    ran: list[int] = []
    app.register("never", lambda payload: ran.append(payload["n"]))
    app.register("marker", lambda payload: None)
    doomed = [app.enqueue("never", {"n": n}).job for n in range(5)]
    kept = app.enqueue("never", {"n": 99}).job
    assert app.cancel_matching(job_type="never", queue="default", statuses=["queued"], batch_size=2) == 6
    app.retry(kept.id)  # a cancelled job can be retried: it runs like a new one
    marker = app.enqueue("marker", {}).job
    stats = app.worker(concurrency=2, **POOL).run(stop_when_idle=True, install_signal_handlers=False)
    assert ran == [99] and stats.completed == 2
    assert app.get(marker.id).status is JobStatus.COMPLETED
    assert {app.get(j.id).status for j in doomed} == {JobStatus.CANCELLED}


def test_snooze_gives_the_job_back_without_using_an_attempt(app: Tether) -> None:
    seen: list[tuple[int, float]] = []

    def handler(payload: Any, ctx: JobContext) -> None:
        seen.append((ctx.attempt, time.monotonic()))
        if len(seen) < 3:
            raise Snooze(0.2)

    app.register("later", handler, max_attempts=1)  # one attempt only: snoozes must not spend it
    job = app.enqueue("later", {}).job
    stats = app.worker(concurrency=1, **POOL).run(stop_when_idle=True, install_signal_handlers=False)
    final = app.get(job.id)
    assert (final.status, final.attempts, final.last_error) == (JobStatus.COMPLETED, 1, None)
    assert [attempt for attempt, _ in seen] == [1, 1, 1]
    assert [(a.number, a.outcome.value) for a in final.history] == [(1, "snoozed"), (1, "snoozed"), (1, "completed")]
    assert all(b - a >= 0.15 for (_, a), (_, b) in itertools.pairwise(seen))  # due only after its delay
    assert (stats.snoozed, stats.completed, stats.failed) == (2, 1, 0)


def test_a_job_without_a_handler_is_handed_back_never_dead(
    app: Tether, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(execution, "UNKNOWN_TYPE_SNOOZE", 30.0)
    app.register("known", lambda payload: None)
    foreign = app.enqueue("elsewhere.handled", {}, max_attempts=1, priority=9).job
    ok = app.enqueue("known", {}).job
    with caplog.at_level(logging.INFO, logger="tether.worker"):
        stats = app.worker(concurrency=1, **POOL).run(stop_when_idle=True, install_signal_handlers=False)
    final = app.get(foreign.id)
    assert (final.status, final.attempts, final.last_error, final.finished_at) == (JobStatus.QUEUED, 0, None, None)
    assert final.scheduled_at > foreign.scheduled_at  # due again later, for a worker that has the handler
    assert app.get(ok.id).status is JobStatus.COMPLETED
    assert (stats.no_handler, stats.completed, stats.dead) == (1, 1, 0)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "no handler for job type" in r.getMessage()]
    assert len(warnings) == 1 and "'elsewhere.handled'" in warnings[0].getMessage()


def test_until_idle_does_not_wait_for_jobs_it_cannot_run(app: Tether) -> None:
    app.register("known", lambda payload: None)
    for n in range(3):
        app.enqueue("elsewhere.handled", {"n": n}, delay=3600)  # not due: never even leased
    app.enqueue("known", {})
    stats = app.worker(concurrency=1, **POOL).run(stop_when_idle=True, install_signal_handlers=False)
    assert stats.completed == 1 and stats.no_handler == 0
    assert app.counts()[JobStatus.QUEUED] == 3
