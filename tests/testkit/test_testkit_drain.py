"""drain(): due jobs run inline through the worker pool's own execution step, the fake clock
jumping to each retry; the report says what ran."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tether
from tether.adapters.clock import FakeClock, SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import PermanentError, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.context import JobContext
from tether.entrypoints.execution import Outcome
from tether.entrypoints.service import Tether
from tether.testing import DrainLimitExceeded, DrainReport, drain, fake_app

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def seconds(n: float) -> datetime:
    return T0 + timedelta(seconds=n)


def flaky(app: Tether, job_type: str, failures: int, calls: list[Any], **options: Any) -> None:
    """Register a handler of ``job_type`` that raises ``failures`` times, then succeeds."""

    @app.handler(job_type, **options)
    def handler(payload: Any) -> None:
        calls.append(payload)
        if len(calls) <= failures:
            raise ConnectionError(f"refused #{len(calls)}")


def test_retries_run_at_their_exact_backoff_times_then_complete() -> None:
    app = fake_app()
    calls: list[Any] = []
    flaky(app, "emails.send", 2, calls)
    job = app.enqueue("emails.send", {"to": "a@b.c"}).job

    report = drain(app)

    assert [(r.attempt, r.outcome, r.ran_at, r.retry_at) for r in report] == [
        (1, "retrying", seconds(0), seconds(1)),   # backoff 1 s
        (2, "retrying", seconds(1), seconds(3)),   # then 2 s
        (3, "completed", seconds(3), None),
    ]
    assert report.clock_moves == (seconds(1), seconds(3))
    assert app.clock.now() == seconds(3)
    assert [r.error.splitlines()[0] for r in report.retrying if r.error] == [
        "ConnectionError: refused #1", "ConnectionError: refused #2"]
    assert calls == [{"to": "a@b.c"}] * 3
    stored = app.get(job.id)
    assert (stored.status, stored.attempts, stored.finished_at) == (JobStatus.COMPLETED, 3, seconds(3))
    assert [r.job_id for r in report.completed] == [job.id]
    assert report.pending == ()


def test_used_up_attempts_end_dead_with_the_last_error() -> None:
    app = fake_app(retry_policy=RetryPolicy(base_seconds=10, cap_seconds=15, jitter=0))
    calls: list[Any] = []
    flaky(app, "emails.send", 99, calls, max_attempts=4)
    job = app.enqueue("emails.send", {}).job

    report = drain(app)

    assert [r.outcome for r in report] == ["retrying", "retrying", "retrying", "dead"]
    assert [r.ran_at for r in report] == [seconds(0), seconds(10), seconds(25), seconds(40)]  # 10, 15 (cap), 15
    assert len(report.dead) == 1 and report.dead[0].attempt == 4
    assert report.dead[0].error is not None and report.dead[0].error.startswith("ConnectionError: refused #4")
    stored = app.get(job.id)
    assert (stored.status, stored.attempts, stored.finished_at) == (JobStatus.DEAD, 4, seconds(40))
    assert stored.last_error == report.dead[0].error


def test_a_permanent_error_is_dead_at_once_and_the_clock_stays() -> None:
    app = fake_app()

    @app.handler("charge.card")
    def charge(payload: Any) -> None:
        raise PermanentError("card declined")

    job = app.enqueue("charge.card", {"amount": 5}, max_attempts=5).job
    report = drain(app)
    assert [(r.job_id, r.outcome, r.attempt) for r in report] == [(job.id, "dead", 1)]
    assert report.dead[0].error is not None and "card declined" in report.dead[0].error
    assert report.clock_moves == ()
    assert app.clock.now() == T0
    assert app.get(job.id).status is JobStatus.DEAD


def test_a_job_type_without_a_handler_is_left_pending_untouched() -> None:
    app = fake_app()
    app.register("emails.send", lambda payload: None)
    foreign = app.enqueue("nobody.handles.this", {"x": 1}, priority=5).job  # at the head of the queue
    later = app.enqueue("nobody.handles.this", {"x": 2}, delay=3600).job  # would make the clock move
    ours = app.enqueue("emails.send", {"to": "a"}).job
    report = drain(app)
    assert [(r.job_id, r.outcome) for r in report] == [(ours.id, "completed")]
    assert [j.id for j in report.pending] == [foreign.id, later.id]
    assert report.clock_moves == () and app.clock.now() == T0  # never advanced for jobs it cannot run
    assert app.get(foreign.id) == foreign and app.get(later.id) == later  # left exactly as they were
    assert drain(app).runs == ()  # and a second drain does not loop on them either
    assert "left pending: #1 nobody.handles.this" in str(drain(app))


def test_a_snooze_is_run_again_at_its_time_without_using_an_attempt() -> None:
    app = fake_app()
    calls: list[int] = []

    @app.handler("poll.api", max_attempts=1)
    def poll(payload: Any, ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        if len(calls) < 3:
            raise tether.Snooze(timedelta(minutes=1))

    job = app.enqueue("poll.api", {}).job
    report = drain(app)
    assert [(r.outcome, r.attempt, r.retry_at) for r in report] == [
        ("snoozed", 1, seconds(60)), ("snoozed", 1, seconds(120)), ("completed", 1, None)]
    assert report.clock_moves == (seconds(60), seconds(120)) and len(report.snoozed) == 2
    final = app.get(job.id)
    assert (final.status, final.attempts, final.last_error) == (JobStatus.COMPLETED, 1, None)
    assert "2 snoozed, 0 cancelled" in str(report).splitlines()[0]


def test_a_job_cancelled_while_its_handler_runs_is_recorded_cancelled() -> None:
    app = fake_app()
    seen: list[bool] = []

    @app.handler("long.task")
    def long_task(payload: Any, ctx: JobContext) -> None:
        app.cancel(ctx.job.id)  # an operator, meanwhile
        ctx.heartbeat()  # the heartbeat's answer carries the request
        seen.append(ctx.cancelled)

    job = app.enqueue("long.task", {}).job
    report = drain(app)
    assert seen == [True]
    assert [(r.job_id, r.outcome) for r in report] == [(job.id, "cancelled")] and len(report.cancelled) == 1
    assert app.get(job.id).status is JobStatus.CANCELLED and report.pending == ()


def test_without_advance_clock_retries_are_left_pending() -> None:
    app = fake_app()
    flaky(app, "emails.send", 1, [])
    job = app.enqueue("emails.send", {}).job

    first = drain(app, advance_clock=False)
    assert [r.outcome for r in first] == ["retrying"]
    assert app.clock.now() == T0
    assert [(j.id, j.status, j.scheduled_at) for j in first.pending] == [(job.id, JobStatus.RETRYING, seconds(1))]

    assert len(drain(app, advance_clock=False)) == 0  # still not due
    app.clock.advance(1)
    second = drain(app, advance_clock=False)
    assert [(r.attempt, r.outcome, r.ran_at) for r in second] == [(2, "completed", seconds(1))]
    assert second.pending == ()


def test_delayed_jobs_run_when_the_clock_gets_there_and_until_caps_it() -> None:
    app = fake_app()
    ran: list[str] = []
    app.register("remind", lambda payload: ran.append(payload["what"]))
    app.enqueue("remind", {"what": "soon"}, delay=60)
    late = app.enqueue("remind", {"what": "tomorrow"}, delay=timedelta(days=1)).job

    report = drain(app, until=timedelta(hours=1))
    assert ran == ["soon"]
    assert report.clock_moves == (seconds(60),)
    assert [j.id for j in report.pending] == [late.id]

    report = drain(app, until=seconds(86_400))
    assert ran == ["soon", "tomorrow"]
    assert report.clock_moves == (seconds(86_400),)


def test_jobs_run_in_lease_order_and_follow_ups_run_in_the_same_drain() -> None:
    app = fake_app()
    order: list[str] = []

    @app.handler("step")
    def step(payload: dict) -> None:
        order.append(payload["name"])
        if payload["name"] == "high":
            app.enqueue("step", {"name": "follow-up"})

    app.enqueue("step", {"name": "low-1"}, priority=0)
    app.enqueue("step", {"name": "high"}, priority=10)
    app.enqueue("step", {"name": "low-2"}, priority=0)
    report = drain(app)
    assert order == ["high", "low-1", "low-2", "follow-up"]
    assert report.job_types == ["step"] * 4
    assert len(report.completed) == 4


def test_queues_limit_what_runs() -> None:
    app = fake_app()
    ran: list[str] = []
    app.register("q", lambda payload: ran.append(payload))
    app.enqueue("q", "a", queue="mail")
    app.enqueue("q", "b", queue="reports")
    report = drain(app, queues=["reports"])
    assert ran == ["b"]
    assert [j.queue for j in report.pending] == []  # pending is about the drained queues only
    assert app.counts(queue="mail")[JobStatus.QUEUED] == 1


def test_a_handler_that_enqueues_forever_hits_max_jobs() -> None:
    app = fake_app()

    @app.handler("again")
    def again(payload: int) -> None:
        app.enqueue("again", payload + 1)

    app.enqueue("again", 0)
    with pytest.raises(DrainLimitExceeded) as raised:
        drain(app, max_jobs=25)
    assert len(raised.value.report) == 25
    assert [r.payload for r in raised.value.report] == list(range(25))
    assert "max_jobs=25" in str(raised.value)


def test_exactly_max_jobs_of_work_is_not_an_error() -> None:
    app = fake_app()
    app.register("one", lambda payload: None)
    for _ in range(3):
        app.enqueue("one", None)
    assert len(drain(app, max_jobs=3).completed) == 3


def test_failure_hooks_and_contexts_work_as_in_a_worker() -> None:
    app = fake_app()
    hooked: list[tuple[JobStatus, int, str]] = []
    contexts: list[tuple[int, str]] = []

    def hook(job: Job, exc: BaseException) -> None:
        hooked.append((job.status, job.attempts, type(exc).__name__))

    @app.handler("ctx.job", max_attempts=2, on_failure=hook)
    def with_context(payload: Any, ctx: JobContext) -> None:
        contexts.append((ctx.attempt, ctx.job.status.value))
        ctx.heartbeat()
        raise KeyError("missing")

    app.enqueue("ctx.job", {})
    drain(app)
    assert contexts == [(1, "running"), (2, "running")]
    assert hooked == [(JobStatus.RETRYING, 1, "KeyError"), (JobStatus.DEAD, 2, "KeyError")]


def test_jitter_is_zero_by_default_and_can_be_supplied() -> None:
    app = fake_app()
    flaky(app, "j", 1, [])
    app.enqueue("j", {})
    report = drain(app, jitter=lambda: 0.5)  # default policy: 1 s * (1 + 0.25 * 0.5)
    assert report.retrying[0].retry_at == seconds(1.125)
    assert report.completed[0].ran_at == seconds(1.125)


def test_drain_matches_a_real_worker_pool_outcome_for_outcome() -> None:
    """The same jobs through drain() and through WorkerPool end identically (one execution path)."""

    def build(app: Tether) -> None:
        app.register("ok", lambda payload: None)

        def boom(payload: Any) -> None:
            raise ValueError(f"bad {payload}")

        def permanent(payload: Any) -> None:
            raise PermanentError("never")

        app.register("boom", boom, max_attempts=1)
        app.register("permanent", permanent)
        for job_type in ("ok", "boom", "permanent", "unknown.type"):
            app.enqueue(job_type, {"n": 1})

    def outcomes(app: Tether) -> list[tuple[str, str, int, str | None]]:
        return [
            (j.job_type, j.status.value, j.attempts, j.last_error and j.last_error.replace(worker, "W").splitlines()[0])
            for j in app.list()
            for worker in ["tether-testing-drain" if app is drained else "pool-1"]
        ]

    drained, pooled = fake_app(), fake_app()
    build(drained)
    build(pooled)
    drain(drained)
    stats = pooled.worker(concurrency=1, worker_id="pool-1").run(stop_when_idle=True, install_signal_handlers=False)
    assert outcomes(drained) == outcomes(pooled)  # the job without a handler: queued, no attempt used, in both
    assert (stats.completed, stats.dead) == (1, 2) and stats.no_handler <= 1
    pooled.close()


def test_report_helpers() -> None:
    app = fake_app()
    flaky(app, "a", 1, [])
    app.register("b", lambda payload: None)
    a = app.enqueue("a", {}).job
    b = app.enqueue("b", {}).job
    report = drain(app)
    assert isinstance(report, DrainReport)
    assert report.job_types == ["a", "b", "a"]
    assert [r.attempt for r in report.for_job(a.id)] == [1, 2]
    assert [r.job_id for r in report.of_type("b")] == [b.id]
    assert [r.job_id for r in report.failed] == [a.id]
    assert report.runs[0].outcome is Outcome.RETRYING and report.runs[0].outcome == "retrying"
    text = str(report)
    assert text.splitlines()[0] == "drain ran 3 attempt(s): 2 completed, 1 retrying, 0 dead"
    assert f"#{a.id} a attempt 1 at 2026-01-01T00:00:00+00:00 -> retrying (next at 2026-01-01T00:00:01+00:00): ConnectionError: refused #1" in text


def test_bad_arguments() -> None:
    app = fake_app()
    for kwargs, field in [
        ({"max_jobs": 0}, "max_jobs"),
        ({"lease_timeout": 0}, "lease_timeout"),
        ({"queues": "mail"}, "queues"),
        ({"queues": ["bad queue!"]}, "queues[0]"),
        ({"until": datetime(2026, 1, 2)}, "until"),
        ({"jitter": 0.5}, "jitter"),
    ]:
        with pytest.raises(ValidationError) as raised:
            drain(app, **kwargs)
        assert raised.value.field == field, kwargs
    with pytest.raises(ValidationError) as raised:
        drain("not an app")  # type: ignore[arg-type]
    assert raised.value.field == "app"


def test_a_real_clock_needs_advance_clock_false() -> None:
    repository = InMemoryJobRepository()
    clock = SystemClock()
    app = Tether(repository, PollingDispatcher(repository, clock), clock)
    app.register("ok", lambda payload: None)
    app.enqueue("ok", {})
    with pytest.raises(ValidationError) as raised:
        drain(app)
    assert raised.value.field == "advance_clock"
    assert app.counts()[JobStatus.QUEUED] == 1  # nothing ran
    assert [r.outcome for r in drain(app, advance_clock=False)] == ["completed"]


def test_the_waits_double_up_to_the_cap_less_its_jitter_then_stay_under_the_cap() -> None:
    """Default policy (jitter 0.25): 1, 2, 4 ... 128 s, then m = 300 / 1.25 = 240 s; each wait is
    m * (1 + 0.25 * r), so with r near 1 the longest is just under the 300 s cap."""
    for r, factor in ((0.0, 1.0), (0.999999, 1.24999975)):
        app = fake_app()
        flaky(app, "j", 10, [], max_attempts=11)
        app.enqueue("j", {})
        report = drain(app, jitter=lambda r=r: r)
        waits = [(run.retry_at - run.ran_at).total_seconds() for run in report.retrying if run.retry_at is not None]
        shortest = [1, 2, 4, 8, 16, 32, 64, 128, 240, 240]
        assert waits == pytest.approx([m * factor for m in shortest], rel=0, abs=1e-6)
        assert max(waits) < 300 and [run.outcome for run in report][-1] == "completed"


def test_production_jitter_spreads_retries_but_never_below_the_backoff() -> None:
    app = fake_app()
    flaky(app, "j", 1, [])
    app.enqueue("j", {})
    report = drain(app, jitter=random.Random(3).random)
    retry_at = report.retrying[0].retry_at
    assert retry_at is not None and seconds(1) <= retry_at < seconds(1.25)


def test_drain_works_on_an_app_from_connect_on_sqlite(tmp_path: Path) -> None:
    """drain() needs only a Tether and a FakeClock: here a SQLite file built by tether.connect."""
    clock = FakeClock()
    with tether.connect(f"sqlite:///{tmp_path / 'jobs.db'}", clock=clock) as app:
        calls: list[Any] = []
        flaky(app, "emails.send", 1, calls)
        job = app.enqueue("emails.send", {"to": "a@b.c"}).job
        report = drain(app)
        assert [(r.outcome, r.ran_at) for r in report] == [("retrying", seconds(0)), ("completed", seconds(1))]
        stored = app.get(job.id)
        assert (stored.status, stored.attempts, stored.finished_at) == (JobStatus.COMPLETED, 2, seconds(1))


def test_jobs_of_a_paused_queue_are_pending_and_do_not_stop_later_jobs() -> None:
    app = fake_app()
    ran: list[Any] = []
    app.register("mail.send", lambda payload: ran.append(("mail", payload)), queue="mail")
    app.register("report.build", lambda payload: ran.append(("report", payload)))
    held = app.enqueue("mail.send", {"n": 1}).job
    app.enqueue("report.build", {"n": 2}, delay=30)  # due later: the clock must still move to it
    app.pause_queue("mail")

    report = drain(app)

    assert ran == [("report", {"n": 2})]
    assert [job.id for job in report.pending] == [held.id]
    assert app.get(held.id).status is JobStatus.QUEUED
    app.resume_queue("mail")
    assert [r.job.id for r in drain(app)] == [held.id]
