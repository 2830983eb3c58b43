"""The worker pool with real threads on the in-memory repository and the polling dispatcher.

Lease timeouts and intervals are scaled down (seconds, not minutes); waits are bounded, and no
assertion is about speed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
from tether.adapters.clock import FakeClock, SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import PermanentError, StorageUnavailable
from tether.domain.failure import DEFAULT_MAX_ERROR_CHARS
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import Tether
from tether.ports.clock import Clock

from tests.conftest import wait_for

FAST = RetryPolicy(base_seconds=0.05, cap_seconds=0.2, jitter=0)


def make_app(repo: InMemoryJobRepository | None = None, clock: Clock | None = None, policy: RetryPolicy = FAST) -> Tether:
    repo = repo if repo is not None else InMemoryJobRepository()
    clock = clock if clock is not None else SystemClock()
    return Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock, retry_policy=policy)



def run_until_idle(app: Tether, **kwargs) -> object:
    kwargs.setdefault("reap_interval", 0.2)
    kwargs.setdefault("lease_timeout", 10.0)
    return app.worker(**kwargs).run(stop_when_idle=True, install_signal_handlers=False)


def test_runs_every_job_once_with_payload_and_context() -> None:
    app = make_app()
    seen: dict[int, list[tuple[dict, int, int]]] = {}
    lock = threading.Lock()

    @app.handler("work")
    def work(payload: dict, ctx: JobContext) -> None:
        with lock:
            seen.setdefault(ctx.job.id, []).append((payload, ctx.attempt, ctx.job.status is JobStatus.RUNNING))

    jobs = [app.enqueue("work", {"n": n}).job for n in range(25)]
    stats = run_until_idle(app, concurrency=3)
    assert {j.id: app.get(j.id).status for j in jobs} == {j.id: JobStatus.COMPLETED for j in jobs}
    assert seen == {j.id: [({"n": n}, 1, True)] for n, j in enumerate(jobs)}
    assert stats.completed == 25 and stats.failed == 0 and stats.dead == 0  # type: ignore[attr-defined]


def test_queue_filter_leaves_other_queues_alone() -> None:
    app = make_app()
    ran: list[str] = []

    @app.handler("t")
    def t(payload: dict) -> None:
        ran.append(payload["q"])

    mine = app.enqueue("t", {"q": "a"}, queue="a").job
    other = app.enqueue("t", {"q": "b"}, queue="b").job
    run_until_idle(app, queues=["a"], concurrency=1)
    assert ran == ["a"]
    assert app.get(mine.id).status is JobStatus.COMPLETED
    assert app.get(other.id).status is JobStatus.QUEUED


def test_retries_with_backoff_then_dead_and_stop_when_idle_waits_for_them() -> None:
    """C15(b) scaled: max_attempts=3, always failing: 3 runs, waits >= 0.2 s then >= 0.4 s, dead."""
    app = make_app(policy=RetryPolicy(base_seconds=0.2, cap_seconds=10, jitter=0))
    runs: list[float] = []

    @app.handler("flaky")
    def flaky(payload: dict, ctx: JobContext) -> None:
        runs.append(time.monotonic())
        raise ValueError(f"failure on attempt {ctx.attempt}")

    job = app.enqueue("flaky", {}, max_attempts=3).job
    stats = run_until_idle(app, concurrency=2)
    final = app.get(job.id)
    assert (final.status, final.attempts, final.last_error) == (JobStatus.DEAD, 3, "ValueError: failure on attempt 3")
    assert len(runs) == 3
    assert runs[1] - runs[0] >= 0.2 and runs[2] - runs[1] >= 0.4
    assert (stats.failed, stats.dead) == (2, 1)  # type: ignore[attr-defined]


def test_a_transient_failure_then_success_completes_on_attempt_two() -> None:
    app = make_app()

    @app.handler("once")
    def once(payload: dict, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise ConnectionError("upstream timeout")

    job = app.enqueue("once", {}).job
    stats = run_until_idle(app, concurrency=1)
    final = app.get(job.id)
    assert (final.status, final.attempts, final.last_error) == (JobStatus.COMPLETED, 2, "ConnectionError: upstream timeout")
    assert (stats.completed, stats.failed) == (1, 1)  # type: ignore[attr-defined]


def test_permanent_error_is_dead_at_once() -> None:
    """C15(d): max_attempts=5 and a permanent error on attempt 1: dead, attempts=1."""
    app = make_app()
    calls = []

    @app.handler("perm")
    def perm(payload: dict) -> None:
        calls.append(1)
        raise PermanentError("customer deleted")

    job = app.enqueue("perm", {}, max_attempts=5).job
    run_until_idle(app, concurrency=1)
    final = app.get(job.id)
    assert (final.status, final.attempts, final.last_error) == (JobStatus.DEAD, 1, "PermanentError: customer deleted")
    assert len(calls) == 1


def test_max_attempts_one_and_a_transient_error_is_dead_after_one_run() -> None:
    """C15(a)."""
    app = make_app()
    calls = []

    @app.handler("one")
    def one(payload: dict) -> None:
        calls.append(1)
        raise TimeoutError("slow")

    job = app.enqueue("one", {}, max_attempts=1).job
    run_until_idle(app, concurrency=1)
    assert (app.get(job.id).status, app.get(job.id).attempts, len(calls)) == (JobStatus.DEAD, 1, 1)


def test_unknown_job_type_is_handed_back_never_dead() -> None:
    app = make_app()

    @app.handler("known")
    def known(payload: dict) -> None: ...

    job = app.enqueue("never.registered", {}, max_attempts=1).job
    ok = app.enqueue("known", {}).job
    stats = run_until_idle(app, concurrency=1)
    final = app.get(job.id)
    assert (final.status, final.attempts, final.last_error) == (JobStatus.QUEUED, 0, None)  # its one attempt kept
    assert final.scheduled_at > job.scheduled_at
    assert app.get(ok.id).status is JobStatus.COMPLETED
    assert (stats.dead, stats.completed, stats.no_handler) == (0, 1, 1)  # type: ignore[attr-defined]


def test_c17_a_failure_hook_that_raises_is_logged_and_the_worker_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    app = make_app()
    hook_saw: list[tuple[int, JobStatus, JobStatus, str]] = []

    def hook(job: Job, exc: BaseException) -> None:
        # runs after the failure is persisted: the stored job is already dead
        hook_saw.append((job.id, job.status, app.get(job.id).status, type(exc).__name__))
        raise RuntimeError("hook exploded")

    @app.handler("j", on_failure=hook)
    def j(payload: dict) -> None:
        raise ValueError("bad input 42")

    done = []

    @app.handler("k")
    def k(payload: dict) -> None:
        done.append(payload)

    job_j = app.enqueue("j", {}, max_attempts=1).job
    job_k = app.enqueue("k", {"k": 1}).job
    with caplog.at_level(logging.ERROR, logger="tether.worker"):
        run_until_idle(app, concurrency=1)
    final = app.get(job_j.id)
    assert (final.status, final.attempts, final.last_error) == (JobStatus.DEAD, 1, "ValueError: bad input 42")
    assert hook_saw == [(job_j.id, JobStatus.DEAD, JobStatus.DEAD, "ValueError")]
    hook_logs = [r for r in caplog.records if "on_failure hook" in r.getMessage()]
    assert len(hook_logs) == 1 and hook_logs[0].exc_info is not None
    assert "hook exploded" in str(hook_logs[0].exc_info[1])
    assert app.get(job_k.id).status is JobStatus.COMPLETED and done == [{"k": 1}]


def test_failure_hook_runs_after_every_failed_attempt_with_the_persisted_status() -> None:
    app = make_app()
    statuses: list[tuple[JobStatus, int]] = []

    @app.handler("f", on_failure=lambda job, exc: statuses.append((job.status, job.attempts)))
    def f(payload: dict) -> None:
        raise ValueError("no")

    app.enqueue("f", {}, max_attempts=2)
    run_until_idle(app, concurrency=1)
    assert statuses == [(JobStatus.RETRYING, 1), (JobStatus.DEAD, 2)]


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot print me")


class Huge(Exception):
    pass


class NeedsTwo(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(code, detail)
        self.code = code
        self.detail = detail


def test_c18_exceptions_that_cannot_be_printed_become_bounded_errors() -> None:
    app = make_app(policy=RetryPolicy(base_seconds=300, jitter=0))  # stay retrying during the test
    raisers: dict[str, Callable[[], BaseException]] = {
        "str_raises": lambda: StrRaises(),
        "huge": lambda: Huge("x" * 5_000_000),
        "needs_two": lambda: NeedsTwo(7, "two args"),
        "keyboard": lambda: KeyboardInterrupt(),
    }
    def raising(make: Callable[[], BaseException]) -> Callable[[dict], None]:
        def handler(payload: dict) -> None:
            raise make()
        return handler

    for name, make in raisers.items():
        app.register(name, raising(make))
    healthy: list[int] = []

    @app.handler("healthy")
    def ok(payload: dict) -> None:
        healthy.append(payload["n"])

    ids = {name: app.enqueue(name, {}).job.id for name in raisers}
    after = app.enqueue("healthy", {"n": 1}).job.id
    pool = app.worker(concurrency=1, lease_timeout=10, reap_interval=0.2)
    pool.start()
    try:
        wait_for(lambda: app.get(after).status is JobStatus.COMPLETED, what="the healthy job behind them")
    finally:
        pool.stop()
    errors = {}
    for name, job_id in ids.items():
        job = app.get(job_id)
        assert (job.status, job.attempts) == (JobStatus.RETRYING, 1), name
        assert job.last_error is not None and len(job.last_error) <= DEFAULT_MAX_ERROR_CHARS
        errors[name] = job.last_error
    assert errors["str_raises"].startswith("StrRaises: <unprintable")
    assert errors["huge"].startswith("Huge: xxx") and "truncated" in errors["huge"]
    assert errors["needs_two"] == "NeedsTwo: (7, 'two args')"
    assert errors["keyboard"] == "KeyboardInterrupt"
    assert healthy == [1]
    assert (pool.stats.failed, pool.stats.completed) == (4, 1)


def test_heartbeats_keep_a_long_job_alive_past_its_lease_timeout() -> None:
    app = make_app()
    runs: list[int] = []
    extended: list[float] = []

    @app.handler("long")
    def long_job(payload: dict, ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        assert ctx.sleep(2.5)  # 2.5 lease timeouts; the reaper runs every 0.1 s meanwhile
        stored = app.get(ctx.job.id)
        extended.append((stored.lease_expires_at - stored.leased_at).total_seconds())  # type: ignore[operator]

    job = app.enqueue("long", {}).job
    pool = app.worker(concurrency=1, lease_timeout=1.0, heartbeat_interval=0.2, reap_interval=0.1)
    pool.start()
    try:
        wait_for(lambda: app.get(job.id).status is JobStatus.RUNNING, what="the lease")
        wait_for(lambda: app.get(job.id).status is not JobStatus.RUNNING, what="the long job to end")
    finally:
        stats = pool.stop()
    final = app.get(job.id)
    assert (final.status, final.attempts, runs) == (JobStatus.COMPLETED, 1, [1])
    assert (stats.reaped, stats.lease_lost) == (0, 0)
    # heartbeats moved the expiry well past the first 1 s lease
    assert len(extended) == 1 and extended[0] > 2.0


def test_without_heartbeats_the_reaper_takes_the_job_and_the_late_complete_is_lease_lost() -> None:
    """C01 through the pool: the reaper takes the job back; the old attempt's complete gets
    LeaseLost (counted, logged, no crash); the job is run again and completes under the new lease."""
    clock = FakeClock()
    repo = InMemoryJobRepository()
    app = make_app(repo, clock)
    release_first = threading.Event()
    runs: list[str] = []

    @app.handler("slow")
    def slow(payload: dict, ctx: JobContext) -> None:
        runs.append(ctx.token)
        if len(runs) == 1:
            release_first.wait(20)

    job = app.enqueue("slow", {}).job
    # heartbeats every 600 s of real time: none happens during this test
    pool = app.worker(concurrency=1, lease_timeout=900, heartbeat_interval=600, reap_interval=600)
    pool.start()
    try:
        wait_for(lambda: len(runs) == 1, what="the first attempt")
        clock.advance(minutes=16)
        [reaped] = app.reap()
        assert (reaped.id, reaped.status, reaped.attempts) == (job.id, JobStatus.RETRYING, 1)
        release_first.set()
        wait_for(lambda: app.get(job.id).status is JobStatus.COMPLETED, what="the second attempt")
    finally:
        stats = pool.stop()
    final = app.get(job.id)
    assert (final.status, final.attempts) == (JobStatus.COMPLETED, 2)
    assert len(runs) == 2 and runs[0] != runs[1]
    assert (stats.lease_lost, stats.completed) == (1, 1)


def test_heartbeat_refused_cancels_the_context() -> None:
    clock = FakeClock()
    app = make_app(clock=clock)
    outcome: list[bool] = []

    @app.handler("coop")
    def coop(payload: dict, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            outcome.append(ctx.sleep(30))  # False once cancelled
            outcome.append(ctx.lease_lost)

    job = app.enqueue("coop", {}).job
    pool = app.worker(concurrency=1, lease_timeout=60, heartbeat_interval=0.1, reap_interval=600)
    pool.start()
    try:
        wait_for(lambda: app.get(job.id).status is JobStatus.RUNNING, what="the lease")
        # the reaper takes the job back; the pool's next heartbeat is refused by the fence
        held = app.get(job.id)
        clock.advance(seconds=61)
        app.repository.reap(now=clock.now())
        wait_for(lambda: len(outcome) == 2, what="the handler to see cancellation")
        # the reaped job is due again: the pool runs attempt 2, which completes
        wait_for(lambda: app.get(job.id).status is JobStatus.COMPLETED, what="attempt 2")
    finally:
        stats = pool.stop(drain_timeout=5)
    assert outcome == [False, True]
    assert (stats.lease_lost, stats.completed) == (1, 1)
    assert app.get(job.id).attempts == 2 and held.attempts == 1


def test_ctx_heartbeat_extends_the_lease_and_raises_lease_lost_once_taken() -> None:
    clock = FakeClock()
    app = make_app(clock=clock)
    results: list[object] = []
    go = threading.Event()

    @app.handler("hb")
    def hb(payload: dict, ctx: JobContext) -> None:
        if ctx.attempt > 1:
            return
        before = ctx.job.lease_expires_at
        clock.advance(10)
        ctx.heartbeat()
        results.append(ctx.job.lease_expires_at - before)  # type: ignore[operator]
        go.wait(20)
        try:
            ctx.heartbeat()
        except Exception as exc:  # noqa: BLE001
            results.append(type(exc).__name__)
            results.append(ctx.cancelled)

    job = app.enqueue("hb", {}).job
    pool = app.worker(concurrency=1, lease_timeout=60, heartbeat_interval=59, reap_interval=600)
    pool.start()
    try:
        wait_for(lambda: len(results) == 1, what="the first heartbeat")
        clock.advance(seconds=61)
        app.repository.reap(now=clock.now())
        go.set()
        wait_for(lambda: len(results) == 3, what="the refused heartbeat")
    finally:
        stats = pool.stop(drain_timeout=5)
    assert stats.lease_lost == 1
    assert results[0].total_seconds() == 10  # type: ignore[attr-defined]
    assert results[1:] == ["LeaseLost", True]
    assert app.get(job.id).attempts >= 1


def test_storage_unavailable_on_lease_backs_off_with_bounded_logging(caplog: pytest.LogCaptureFixture) -> None:
    class FlakyRepository(InMemoryJobRepository):
        """Lease queries fail for the first 1.5 s (the memory store cannot really go down)."""

        def __init__(self) -> None:
            super().__init__()
            self.down_until = time.monotonic() + 1.5
            self.failed_calls = 0

        def lease(self, **kwargs):  # type: ignore[override]
            if time.monotonic() < self.down_until:
                self.failed_calls += 1
                raise StorageUnavailable("database is locked")
            return super().lease(**kwargs)

    repo = FlakyRepository()
    app = make_app(repo)
    done: list[int] = []

    @app.handler("t")
    def t(payload: dict) -> None:
        done.append(payload["n"])

    for n in range(5):
        app.enqueue("t", {"n": n})
    with caplog.at_level(logging.WARNING, logger="tether.worker"):
        run_until_idle(app, concurrency=2)
    assert sorted(done) == [0, 1, 2, 3, 4]
    assert repo.failed_calls >= 2
    lines = [r for r in caplog.records if "lease query failed" in r.getMessage()]
    # 1.5 s of failures at most one line a second: 2 lines (3 with scheduling slack)
    assert 1 <= len(lines) <= 3


def test_storage_unavailable_on_complete_is_retried_and_the_job_completes() -> None:
    class FlakyComplete(InMemoryJobRepository):
        def __init__(self) -> None:
            super().__init__()
            self.complete_failures = 0

        def complete(self, job_id, token, *, now):  # type: ignore[override]
            if self.complete_failures < 2:
                self.complete_failures += 1
                raise StorageUnavailable("connection reset")
            return super().complete(job_id, token, now=now)

    repo = FlakyComplete()
    app = make_app(repo)
    calls = []

    @app.handler("t")
    def t(payload: dict) -> None:
        calls.append(1)

    job = app.enqueue("t", {}).job
    run_until_idle(app, concurrency=1)
    assert (app.get(job.id).status, app.get(job.id).attempts, len(calls)) == (JobStatus.COMPLETED, 1, 1)
    assert repo.complete_failures == 2


def test_a_pool_leases_as_many_jobs_as_it_has_free_threads() -> None:
    class Recording(InMemoryJobRepository):
        def __init__(self) -> None:
            super().__init__()
            self.limits: list[int] = []

        def lease(self, **kwargs):  # type: ignore[override]
            self.limits.append(kwargs["limit"])
            return super().lease(**kwargs)

    repo = Recording()
    app = make_app(repo)
    gate = threading.Event()
    started: list[int] = []

    @app.handler("t")
    def t(payload: dict) -> None:
        started.append(payload["n"])
        gate.wait(20)

    for n in range(6):
        app.enqueue("t", {"n": n})
    pool = app.worker(concurrency=4, lease_timeout=30, reap_interval=30)
    pool.start()
    try:
        wait_for(lambda: len(started) == 4, what="four jobs running")
        time.sleep(0.2)
        assert len(started) == 4 and pool.in_flight == 4
        assert repo.limits[0] == 4
        assert all(limit >= 1 for limit in repo.limits)
        gate.set()
        wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 6, what="all six")
    finally:
        pool.stop()


def test_a_pool_runs_once() -> None:
    app = make_app()
    pool = app.worker(concurrency=1, reap_interval=30)
    pool.start()
    try:
        with pytest.raises(RuntimeError):
            pool.start()
    finally:
        pool.stop()
    assert pool.stop() == pool.stats  # idempotent


def test_a_pool_as_a_context_manager_starts_and_stops() -> None:
    app = make_app()
    done = threading.Event()

    @app.handler("t")
    def t(payload: dict) -> None:
        done.set()

    app.enqueue("t", {})
    with app.worker(concurrency=1, reap_interval=30) as pool:
        assert done.wait(20)
    assert pool.stopping
    wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 1, what="the completion")


def test_c02_the_old_holders_failure_changes_nothing_of_the_new_lease() -> None:
    clock = FakeClock()
    repo = InMemoryJobRepository()
    app = make_app(repo, clock)
    go = threading.Event()

    @app.handler("fails_late")
    def fails_late(payload: dict) -> None:
        go.wait(20)
        raise ValueError("transient, but too late")

    job = app.enqueue("fails_late", {}).job
    pool = app.worker(concurrency=1, lease_timeout=900, heartbeat_interval=600, reap_interval=600)
    pool.start()
    try:
        wait_for(lambda: app.get(job.id).status is JobStatus.RUNNING, what="worker A's lease")
        clock.advance(minutes=16)
        app.reap()
        clock.advance(seconds=1)
        [b_lease] = repo.lease(queues=None, worker_id="worker-b", now=clock.now(), lease_timeout=900)
        go.set()
        wait_for(lambda: pool.stats.lease_lost == 1, what="A's refused failure write")
    finally:
        stats = pool.stop()
    after = repo.get(job.id)  # the port: the API hides the lease token
    assert after == b_lease  # scheduled_at, last_error, attempts (2) and lease all unchanged
    assert after.attempts == 2 and after.last_error is not None and after.last_error.startswith("LeaseExpired:")
    assert (stats.failed, stats.dead, stats.lease_lost) == (0, 0, 1)
    assert repo.lease(queues=None, worker_id="worker-c", now=clock.now(), lease_timeout=900) == []


class _RecordingDispatcher(PollingDispatcher):
    """A polling dispatcher that remembers every job it was told about."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.notified: list[Job] = []

    def notify(self, jobs) -> None:  # type: ignore[no-untyped-def]
        self.notified.extend(jobs)
        super().notify(jobs)


def test_a_retrying_job_is_announced_to_the_dispatcher_with_its_retry_time() -> None:
    repo, clock = InMemoryJobRepository(), SystemClock()
    dispatcher = _RecordingDispatcher(repo, clock, poll_interval=0.05)
    app = Tether(repo, dispatcher, clock, retry_policy=FAST)
    attempts: list[int] = []

    @app.handler("flaky")
    def flaky(payload: dict, ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("first try fails")

    job = app.enqueue("flaky", {}).job
    run_until_idle(app, concurrency=1)
    assert attempts == [1, 2]
    retrying = [j for j in dispatcher.notified if j.status is JobStatus.RETRYING]
    assert [(j.id, j.attempts) for j in retrying] == [(job.id, 1)]
    # the announced job carries its backoff: due 0.05 s (FAST, no jitter) after it failed
    assert retrying[0].scheduled_at > job.created_at
    assert app.get(job.id).status is JobStatus.COMPLETED
