"""Job timeouts with real threads on the in-memory repository and the polling dispatcher.

Limits and graces are scaled down (tenths of seconds; ``TIMEOUT_GRACE_SECONDS`` patched per test);
waits are bounded, and no assertion is about speed.  Handlers that "ignore cancellation" block on
an Event the test sets at the end, so no thread outlives its test.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import LeaseLost, ValidationError
from tether.domain.job import JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import Tether
from tether.entrypoints.worker import WorkerPool
from tether.entrypoints.worker import timeouts as timeouts_module

from tests.conftest import wait_for

FAST = RetryPolicy(base_seconds=0.05, cap_seconds=0.2, jitter=0)


def make_app() -> Tether:
    repo, clock = InMemoryJobRepository(), SystemClock()
    return Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock, retry_policy=FAST)


def grace(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The hard bound is ``limit + 2 * seconds``."""
    monkeypatch.setattr(timeouts_module, "TIMEOUT_GRACE_SECONDS", seconds)


def worker_threads(pool: WorkerPool) -> list[threading.Thread]:
    """The pool's handler threads still alive (abandoned ones included)."""
    return [thread for thread in pool._runner._threads if thread.is_alive()]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """What stuck handlers wait for; set when the test ends, whatever happened."""
    event = threading.Event()
    yield event
    event.set()


def test_a_handler_that_ignores_cancellation_keeps_its_heartbeated_lease_until_the_hard_bound(
    monkeypatch: pytest.MonkeyPatch, release: threading.Event
) -> None:
    grace(monkeypatch, 2.0)  # hard bound: 0.3 + 4 s
    app = make_app()
    seen: dict[str, object] = {}
    ran_on: list[str] = []

    @app.handler("stuck", timeout=0.3, max_attempts=1)
    def stuck(payload: dict, ctx: JobContext) -> None:
        release.wait(30)  # ignores its cancellation
        seen["cancelled"] = ctx.cancelled

    @app.handler("quick")
    def quick(payload: dict) -> None:
        ran_on.append(threading.current_thread().name)

    job = app.enqueue("stuck").job
    pool = app.worker(concurrency=1, lease_timeout=1.0, heartbeat_interval=0.1, reap_interval=0.05)
    pool.start()
    try:
        wait_for(lambda: pool.stats.timed_out == 1, what="the limit to pass")
        first = app.get(job.id)
        assert first.status is JobStatus.RUNNING and first.leased_at is not None
        # capacity recovers at once: a new thread runs other jobs while the stuck one is still inside
        others = [app.enqueue("quick").job for _ in range(3)]
        wait_for(lambda: all(app.get(o.id).status is JobStatus.COMPLETED for o in others), what="the other jobs")
        assert ran_on == ["tether-worker-1"] * 3 and len(worker_threads(pool)) == 2
        # the timed-out attempt keeps its lease, extended by heartbeats (the reaper runs every 0.05 s)
        well_past_first_lease = first.leased_at.timestamp() + 2.5
        wait_for(lambda: time.time() > well_past_first_lease, what="two and a half lease lengths")
        held = app.get(job.id)
        assert held.status is JobStatus.RUNNING and held.attempts == 1
        assert held.lease_expires_at is not None and held.lease_expires_at.timestamp() > first.leased_at.timestamp() + 2.0
        # at the hard bound, with the handler still inside, the attempt fails with JobTimeout
        wait_for(lambda: app.get(job.id).status is JobStatus.DEAD, what="the hard bound")
        assert not release.is_set() and worker_threads(pool)[0].name == "tether-worker-0"
        final = app.get(job.id)
        assert (final.attempts, final.last_error) == (1, "JobTimeout: timed out after 0.3 s")
    finally:
        release.set()
        stats = pool.stop()
    wait_for(lambda: "cancelled" in seen, what="the stuck handler's return")
    assert seen["cancelled"] is True
    assert app.get(job.id) == final  # its late return changed nothing
    assert (stats.timed_out, stats.dead, stats.completed, stats.reaped) == (1, 1, 3, 0)


def test_a_cooperative_handler_stops_at_its_limit_and_fails_with_job_timeout_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    grace(monkeypatch, 30.0)  # the hard bound is a minute away: the failure is written as the handler returns
    app = make_app()
    seen: dict[str, object] = {}

    @app.handler("coop", timeout=0.3)
    def coop(payload: dict, ctx: JobContext) -> None:
        seen["slept"] = ctx.sleep(30)  # returns early once cancelled
        seen["cancelled"] = ctx.cancelled

    @app.handler("coop_raises", timeout=0.3)
    def coop_raises(payload: dict, ctx: JobContext) -> None:
        while not ctx.cancelled:
            time.sleep(0.01)
        raise RuntimeError("stopped as asked")  # still the attempt's timeout, not this error

    a = app.enqueue("coop", max_attempts=1).job
    b = app.enqueue("coop_raises", max_attempts=2).job
    started = time.monotonic()
    stats = app.worker(concurrency=2, reap_interval=0.2).run(stop_when_idle=True, install_signal_handlers=False)
    assert time.monotonic() - started < 30  # written when the handlers returned, long before the hard bound
    assert seen == {"slept": False, "cancelled": True}
    assert (app.get(a.id).status, app.get(a.id).last_error) == (JobStatus.DEAD, "JobTimeout: timed out after 0.3 s")
    assert (app.get(b.id).status, app.get(b.id).attempts, app.get(b.id).last_error) == (
        JobStatus.DEAD, 2, "JobTimeout: timed out after 0.3 s"
    )
    assert (stats.timed_out, stats.failed, stats.dead, stats.completed) == (3, 1, 2, 0)


def test_a_timed_out_attempt_is_never_overlapped_by_its_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    grace(monkeypatch, 1.5)  # hard bound: 0.2 + 3 s; attempt 1 returns well before it
    app = make_app()
    runs: list[tuple[int, float, float]] = []

    @app.handler("slow_once", timeout=0.2, max_attempts=3)
    def slow_once(payload: dict, ctx: JobContext) -> None:
        begun = time.monotonic()
        if ctx.attempt == 1:
            time.sleep(0.8)  # ignores cancellation, then returns a result that comes too late
        runs.append((ctx.attempt, begun, time.monotonic()))

    job = app.enqueue("slow_once").job
    stats = app.worker(concurrency=4, reap_interval=0.2).run(stop_when_idle=True, install_signal_handlers=False)
    first, second = sorted(runs)
    assert (first[0], second[0]) == (1, 2)
    assert second[1] >= first[2]  # the retry began only after the timed-out attempt's handler returned
    final = app.get(job.id)
    assert (final.status, final.attempts, final.last_error) == (JobStatus.COMPLETED, 2, "JobTimeout: timed out after 0.2 s")
    assert (stats.timed_out, stats.failed, stats.completed) == (1, 1, 1)
    # the history tells the timed-out attempt from the one that completed, on one worker
    assert [(a.number, a.outcome.value, a.error) for a in final.history] == [
        (1, "timed_out", "JobTimeout: timed out after 0.2 s"), (2, "completed", None)]
    assert final.history[0].ended_at <= final.history[1].started_at  # never overlapped, per the store too


def test_a_late_completion_of_an_abandoned_thread_is_refused(
    monkeypatch: pytest.MonkeyPatch, release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    grace(monkeypatch, 0.25)  # hard bound: 0.2 + 0.5 s
    app = make_app()
    tokens: dict[int, str] = {}

    @app.handler("late", timeout=0.2, max_attempts=2)
    def late(payload: dict, ctx: JobContext) -> None:
        tokens[ctx.attempt] = ctx.token
        if ctx.attempt == 1:
            release.wait(30)  # returns, successfully, only long after the hard bound

    job = app.enqueue("late").job
    pool = app.worker(concurrency=1, lease_timeout=1.0, heartbeat_interval=0.1, reap_interval=0.05)
    pool.start()
    caplog.set_level(logging.INFO, logger="tether.worker")
    try:
        # past the hard bound the attempt failed; its retry ran on the new thread meanwhile
        wait_for(lambda: app.get(job.id).status is JobStatus.COMPLETED, what="the retry's completion")
        done = app.repository.get(job.id)
        assert (done.attempts, done.last_error) == (2, "JobTimeout: timed out after 0.2 s")
        abandoned = next(t for t in worker_threads(pool) if t.name == "tether-worker-0")
        release.set()
        abandoned.join(10)
        assert not abandoned.is_alive()  # it ended instead of taking another job
        assert app.repository.get(job.id) == done  # its successful return changed nothing
        with pytest.raises(LeaseLost):  # and had it tried, the fence refuses its token
            app.repository.complete(job.id, tokens[1], now=app.clock.now())
    finally:
        release.set()
        stats = pool.stop()
    assert "returned past the hard bound of its 0.2 s limit" in caplog.text
    assert (stats.timed_out, stats.failed, stats.completed, stats.lease_lost) == (1, 1, 1, 0)


def test_at_most_concurrency_abandoned_threads_then_leasing_stops_until_one_returns(
    monkeypatch: pytest.MonkeyPatch, release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    grace(monkeypatch, 0.1)  # hard bound: 0.2 + 0.2 s
    app = make_app()

    @app.handler("hang", timeout=0.2, max_attempts=1)
    def hang(payload: dict) -> None:
        release.wait(30)

    @app.handler("quick")
    def quick(payload: dict) -> None:
        pass

    hung = [app.enqueue("hang", priority=1).job for _ in range(2)]
    after = app.enqueue("quick").job
    pool = app.worker(concurrency=1, reap_interval=0.05)
    pool.start()
    try:
        wait_for(lambda: all(app.get(h.id).status is JobStatus.DEAD for h in hung), what="both hung jobs timed out")
        wait_for(lambda: "no new thread" in caplog.text, what="the error about the cap")
        # one thread abandoned (the cap for concurrency 1), one stuck in its slot: no third thread
        assert pool._runner.abandoned() == 1 and len(worker_threads(pool)) == 2
        time.sleep(0.5)  # ten poll intervals: the pool leases nothing while its threads are stuck
        assert app.get(after.id).status is JobStatus.QUEUED
        release.set()
        wait_for(lambda: app.get(after.id).status is JobStatus.COMPLETED, what="leasing to resume")
        wait_for(lambda: len(worker_threads(pool)) == 1, what="the stuck threads to end")
    finally:
        release.set()
        stats = pool.stop()
    assert [record.levelno for record in caplog.records if "no new thread" in record.message] == [logging.ERROR]
    assert (stats.timed_out, stats.dead, stats.completed) == (2, 2, 1)


def test_the_pools_job_timeout_applies_to_handlers_without_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    grace(monkeypatch, 30.0)
    app = make_app()

    @app.handler("default_limit", max_attempts=1)
    def default_limit(payload: dict, ctx: JobContext) -> None:
        ctx.sleep(30)

    @app.handler("own_limit", timeout=30)
    def own_limit(payload: dict, ctx: JobContext) -> None:
        assert ctx.sleep(0.5)  # longer than the pool's limit, within its own

    a = app.enqueue("default_limit").job
    b = app.enqueue("own_limit").job
    pool = app.worker(concurrency=2, job_timeout=0.2, reap_interval=0.2)
    assert pool.job_timeout == 0.2 and app.worker().job_timeout is None
    stats = pool.run(stop_when_idle=True, install_signal_handlers=False)
    assert (app.get(a.id).status, app.get(a.id).last_error) == (JobStatus.DEAD, "JobTimeout: timed out after 0.2 s")
    assert app.get(b.id).status is JobStatus.COMPLETED
    assert (stats.timed_out, stats.completed) == (1, 1)


def test_at_shutdown_a_timed_out_job_is_written_as_timed_out_not_released(
    monkeypatch: pytest.MonkeyPatch, release: threading.Event
) -> None:
    grace(monkeypatch, 30.0)  # the hard bound is far away: the drain deadline comes first
    app = make_app()

    @app.handler("stuck", timeout=0.2, max_attempts=3)
    def stuck(payload: dict) -> None:
        release.wait(30)

    job = app.enqueue("stuck").job
    pool = app.worker(concurrency=1, reap_interval=0.2)
    pool.start()
    try:
        wait_for(lambda: pool.stats.timed_out == 1, what="the limit to pass")
    finally:
        stats = pool.stop(drain_timeout=0.2)
    final = app.get(job.id)
    assert (final.status, final.attempts, final.last_error) == (JobStatus.RETRYING, 1, "JobTimeout: timed out after 0.2 s")
    assert (stats.released, stats.failed) == (0, 1)
    assert [a.outcome.value for a in final.history] == ["timed_out"]


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5", True])
def test_a_bad_limit_is_a_validation_error_naming_the_field_and_registers_nothing(bad: object) -> None:
    app = make_app()
    with pytest.raises(ValidationError) as info:

        @app.handler("limited", timeout=bad)  # type: ignore[arg-type]
        def limited(payload: dict) -> None:  # pragma: no cover - never registered
            pass

    assert info.value.field == "timeout" and "limited" not in app.handlers
    with pytest.raises(ValidationError) as info:
        app.worker(job_timeout=bad)  # type: ignore[arg-type]
    assert info.value.field == "job_timeout"
