"""The embeddable API (tether.Tether) on the in-memory repository with a fake clock.

The dispatcher here records notifications (and can be told to fail), since what is checked is
*when* the API tells it: only after commit, never for a rollback, never failing the enqueue.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
import tether
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.domain.errors import ConfigurationError, InvalidTransition, JobNotFound, PayloadError, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import EnqueueRequest, Tether


class RecordingDispatcher:
    """Records notify() calls; raises from notify when ``broken``."""

    def __init__(self, broken: bool = False) -> None:
        self.notified: list[list[int]] = []
        self.broken = broken
        self.closed = False

    def notify(self, jobs: Sequence[Job]) -> None:
        if self.broken:
            raise ConnectionError("redis is down")
        self.notified.append([j.id for j in jobs])

    def acquire(self, **kwargs):  # pragma: no cover - not used here
        return []

    def maintain(self, now: datetime) -> None:
        pass

    def wake(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def repo() -> InMemoryJobRepository:
    return InMemoryJobRepository()


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def app(repo: InMemoryJobRepository, dispatcher: RecordingDispatcher, clock: FakeClock) -> Tether:
    return Tether(repo, dispatcher, clock)  # type: ignore[arg-type]


def test_tether_is_exported_from_the_package() -> None:
    assert tether.Tether is Tether


# -- handler registration ----------------------------------------------------------------------
def test_decorator_forms_register_by_name_or_function_name(app: Tether) -> None:
    @app.handler("emails.send")
    def send(payload: dict) -> None: ...

    @app.handler()
    def build_report(payload: dict, ctx: JobContext) -> None: ...

    @app.handler
    def bare(payload: dict) -> None: ...

    assert set(app.handlers) == {"emails.send", "build_report", "bare"}
    assert app.handlers["emails.send"].func is send
    assert app.handlers["emails.send"].takes_context is False
    assert app.handlers["build_report"].takes_context is True
    assert app.handlers["bare"].func is bare  # bare decorator returns the function unchanged


def test_context_detection_from_the_signature(app: Tether) -> None:
    def one(p): ...
    def two(p, ctx): ...
    def defaulted(p, ctx=None): ...
    def varargs(*args): ...
    def kw_optional(p, *, flag=False): ...

    class CallableObject:
        def __call__(self, payload, ctx): ...

    for name, func, expected in [
        ("one", one, False), ("two", two, True), ("defaulted", defaulted, True),
        ("varargs", varargs, True), ("kw_optional", kw_optional, False), ("obj", CallableObject(), True),
    ]:
        assert app.register(name, func).takes_context is expected, name


@pytest.mark.parametrize(
    "func",
    [lambda: None, lambda a, b, c: None, lambda p, *, must: None],
    ids=["no-args", "three-required", "required-kwonly"],
)
def test_handlers_with_unusable_signatures_are_rejected(app: Tether, func) -> None:
    with pytest.raises(ValidationError) as info:
        app.register("x", func)
    assert info.value.field == "handler"
    assert "x" not in app.handlers


def test_duplicate_registration_is_a_validation_error(app: Tether) -> None:
    @app.handler("dup")
    def first(p): ...

    with pytest.raises(ValidationError) as info:
        @app.handler("dup")
        def second(p): ...
    assert info.value.field == "job_type"
    assert "already has a handler" in str(info.value)
    assert app.handlers["dup"].func is first


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"name": "bad name!"}, "job_type"),
        ({"name": "ok", "queue": "no spaces"}, "queue"),
        ({"name": "ok", "max_attempts": 0}, "max_attempts"),
        ({"name": "ok", "on_failure": "not callable"}, "on_failure"),
    ],
)
def test_bad_registrations_name_the_field(app: Tether, kwargs: dict, field: str) -> None:
    name = kwargs.pop("name")
    with pytest.raises(ValidationError) as info:
        app.register(name, lambda p: None, **kwargs)
    assert info.value.field == field
    assert not app.handlers


def test_non_callable_handler_is_rejected(app: Tether) -> None:
    with pytest.raises(ValidationError) as info:
        app.register("x", 42)  # type: ignore[arg-type]
    assert info.value.field == "handler"


# -- enqueue ---------------------------------------------------------------------------------
def test_enqueue_uses_handler_defaults_then_app_defaults(app: Tether, clock: FakeClock) -> None:
    @app.handler("reports.build", queue="reports", max_attempts=5)
    def build(p): ...

    registered = app.enqueue("reports.build", {"id": 1}).job
    assert (registered.queue, registered.max_attempts) == ("reports", 5)
    overridden = app.enqueue("reports.build", {"id": 2}, queue="urgent", max_attempts=2).job
    assert (overridden.queue, overridden.max_attempts) == ("urgent", 2)
    unregistered = app.enqueue("elsewhere.handled", {"id": 3}).job  # producers need no handler
    assert (unregistered.queue, unregistered.max_attempts) == ("default", 3)
    assert unregistered.status is JobStatus.QUEUED and unregistered.scheduled_at == clock.now()


def test_app_level_defaults_are_configurable(repo, dispatcher, clock) -> None:
    app = Tether(repo, dispatcher, clock, default_queue="main", default_max_attempts=7)
    job = app.enqueue("t", {}).job
    assert (job.queue, job.max_attempts) == ("main", 7)


def test_enqueue_returns_created_and_notifies_once_per_new_job(app: Tether, dispatcher: RecordingDispatcher) -> None:
    first = app.enqueue("t", {"a": 1}, idempotency_key="k1")
    again = app.enqueue("t", {"a": 2}, idempotency_key="k1")
    assert first.created is True and again.created is False
    assert again.job == first.job
    assert again.job.payload == {"a": 1}
    assert dispatcher.notified == [[first.job.id]]


def test_enqueue_run_at_delay_and_priority(app: Tether, clock: FakeClock) -> None:
    at = clock.now() + timedelta(hours=1)
    assert app.enqueue("t", {}, run_at=at).job.scheduled_at == at
    assert app.enqueue("t", {}, delay=90).job.scheduled_at == clock.now() + timedelta(seconds=90)
    assert app.enqueue("t", {}, delay=timedelta(minutes=2)).job.scheduled_at == clock.now() + timedelta(minutes=2)
    assert app.enqueue("t", {}, priority=9).job.priority == 9


@pytest.mark.parametrize(
    "kwargs, field, error",
    [
        ({"queue": "bad queue"}, "queue", ValidationError),
        ({"max_attempts": 0}, "max_attempts", ValidationError),
        ({"max_attempts": -1}, "max_attempts", ValidationError),
        ({"run_at": datetime(2026, 1, 1)}, "run_at", ValidationError),
        ({"delay": -5}, "delay", ValidationError),
        ({"priority": "high"}, "priority", ValidationError),
        ({"idempotency_key": ""}, "idempotency_key", ValidationError),
    ],
)
def test_bad_enqueue_names_the_field_and_writes_nothing(app, repo, dispatcher, kwargs, field, error) -> None:
    with pytest.raises(error) as info:
        app.enqueue("t", {}, **kwargs)
    assert info.value.field == field
    assert repo.list_jobs() == [] and dispatcher.notified == []


def test_bad_payload_is_a_payload_error_and_writes_nothing(app, repo, dispatcher) -> None:
    with pytest.raises(PayloadError):
        app.enqueue("t", {"x": float("nan")})
    with pytest.raises(PayloadError):
        app.enqueue("t", {"s": {1, 2}})
    assert repo.list_jobs() == [] and dispatcher.notified == []


def test_payload_limit_is_configurable(repo, dispatcher, clock) -> None:
    app = Tether(repo, dispatcher, clock, max_payload_bytes=20)
    app.enqueue("t", {"a": "x" * 10})  # {"a":"xxxxxxxxxx"} is 18 bytes
    with pytest.raises(PayloadError):
        app.enqueue("t", {"a": "x" * 13})  # 21 bytes
    assert len(repo.list_jobs()) == 1


def test_a_failing_notify_never_fails_the_enqueue(repo, clock, caplog) -> None:
    app = Tether(repo, RecordingDispatcher(broken=True), clock)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="tether.service"):
        result = app.enqueue("t", {"a": 1})
    assert result.created and repo.get(result.job.id).status is JobStatus.QUEUED
    assert any("notify failed" in r.getMessage() for r in caplog.records)


# -- transactions ----------------------------------------------------------------------------
def test_enqueue_in_a_transaction_notifies_only_after_commit(app, repo, dispatcher) -> None:
    with app.transaction() as tx:
        job = app.enqueue("t", {"n": 1}, connection=tx).job
        assert dispatcher.notified == []
        with pytest.raises(JobNotFound):
            repo.get(job.id)
    assert dispatcher.notified == [[job.id]]
    assert repo.get(job.id).status is JobStatus.QUEUED


def test_enqueue_in_a_transaction_then_raise_stores_and_notifies_nothing(app, repo, dispatcher) -> None:
    """C09(a) on the API: the caller's block raises after enqueueing; nothing remains or is published."""
    orders: list[str] = []
    with pytest.raises(RuntimeError), app.transaction() as tx:
        orders.append("order-1")
        app.enqueue("orders.ship", {"order": "order-1"}, connection=tx, idempotency_key="order-1")
        app.enqueue_many([EnqueueRequest("orders.mail", {"order": "order-1"})], connection=tx)
        raise RuntimeError("payment declined")
    assert repo.list_jobs() == []
    assert dispatcher.notified == []
    # the key was never taken: a later enqueue creates the job
    assert app.enqueue("orders.ship", {"order": "order-1"}, idempotency_key="order-1").created is True


# -- enqueue_many ----------------------------------------------------------------------------
def test_enqueue_many_applies_defaults_and_notifies_once(app, dispatcher) -> None:
    @app.handler("a", queue="qa", max_attempts=4)
    def a(p): ...

    results = app.enqueue_many(
        [
            EnqueueRequest("a", {"i": 0}),
            EnqueueRequest("b", {"i": 1}, queue="qb", priority=3),
            EnqueueRequest("a", {"i": 2}, idempotency_key="same"),
            EnqueueRequest("a", {"i": 3}, idempotency_key="same"),
        ]
    )
    assert [(r.job.queue, r.job.max_attempts, r.created) for r in results] == [
        ("qa", 4, True), ("qb", 3, True), ("qa", 4, True), ("qa", 4, False),
    ]
    assert results[1].job.priority == 3
    assert results[3].job.id == results[2].job.id
    assert dispatcher.notified == [[r.job.id for r in results[:3]]]


def test_enqueue_many_validates_everything_before_writing(app, repo, dispatcher) -> None:
    with pytest.raises(ValidationError) as info:
        app.enqueue_many([EnqueueRequest("a", {}), EnqueueRequest("a", {}, queue="bad queue")])
    assert info.value.field == "requests[1].queue"
    with pytest.raises(PayloadError) as pinfo:
        app.enqueue_many([EnqueueRequest("a", {"x": float("inf")})])
    assert pinfo.value.field.startswith("requests[0].")
    with pytest.raises(ValidationError) as tinfo:
        app.enqueue_many([("a", {})])  # type: ignore[list-item]
    assert tinfo.value.field == "requests[0]"
    assert repo.list_jobs() == [] and dispatcher.notified == []
    assert app.enqueue_many([]) == []


# -- reading and administration --------------------------------------------------------------
def test_get_list_and_counts(app: Tether, repo: InMemoryJobRepository, clock: FakeClock) -> None:
    a = app.enqueue("t", {}, queue="qa").job
    b = app.enqueue("t", {}, queue="qb").job
    c = app.enqueue("t", {}, queue="qb").job
    [_leased] = repo.lease(queues=["qa"], worker_id="w", now=clock.now(), lease_timeout=60)
    assert app.get(a.id).status is JobStatus.RUNNING
    assert [j.id for j in app.list()] == [a.id, b.id, c.id]
    assert [j.id for j in app.list(status="queued")] == [b.id, c.id]
    assert [j.id for j in app.list(status=JobStatus.RUNNING)] == [a.id]
    assert [j.id for j in app.list(queue="qb", limit=1, offset=1)] == [c.id]
    counts = app.counts()
    assert counts[JobStatus.QUEUED] == 2 and counts[JobStatus.RUNNING] == 1 and counts[JobStatus.DEAD] == 0
    assert app.counts(queue="qa")[JobStatus.QUEUED] == 0
    with pytest.raises(JobNotFound):
        app.get(999)


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda app: app.list(status="bogus"), "status"),
        (lambda app: app.list(queue="bad queue"), "queue"),
        (lambda app: app.list(limit=-1), "limit"),
        (lambda app: app.list(offset=-1), "offset"),
        (lambda app: app.get("1"), "job_id"),
        (lambda app: app.counts(queue="a b"), "queue"),
        (lambda app: app.retry(0), "job_id"),
        (lambda app: app.purge(5), "older_than"),
        (lambda app: app.purge(timedelta(days=-1)), "older_than"),
        (lambda app: app.purge(datetime(2026, 1, 1)), "older_than"),
    ],
)
def test_bad_arguments_name_the_field(app: Tether, call, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        call(app)
    assert info.value.field == field


def test_manual_retry_of_a_dead_job(app, repo, clock, dispatcher) -> None:
    job = app.enqueue("t", {}, max_attempts=1).job
    [leased] = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
    repo.fail(leased.id, leased.lease_token, now=clock.now(), error="boom", retry_at=None)
    clock.advance(5)
    retried = app.retry(job.id)
    assert (retried.status, retried.attempts, retried.scheduled_at) == (JobStatus.QUEUED, 0, clock.now())
    assert dispatcher.notified[-1] == [job.id]
    with pytest.raises(InvalidTransition):
        app.retry(job.id)  # queued, not dead


def test_cancel_and_retry_of_a_cancelled_job(app, repo, clock, dispatcher) -> None:
    waiting = app.enqueue("t", {}).job
    running = app.enqueue("t", {}, idempotency_key="k-1").job
    leased = repo.lease_job(running.id, worker_id="w", now=clock.now(), lease_timeout=60)
    clock.advance(2)
    assert app.cancel(waiting.id).status is JobStatus.CANCELLED
    asked = app.cancel(leased.id)
    assert (asked.status, asked.cancel_requested_at) == (JobStatus.RUNNING, clock.now())
    assert app.find_by_key("k-1") == asked and app.find_by_key("k-2") is None
    with pytest.raises(InvalidTransition, match=f"job {waiting.id}: cannot cancel a job that is cancelled"):
        app.cancel(waiting.id)
    with pytest.raises(JobNotFound):
        app.cancel(999)
    with pytest.raises(ValidationError) as info:
        app.cancel(0)
    assert info.value.field == "job_id"
    retried = app.retry(waiting.id)
    assert (retried.status, retried.attempts, retried.cancel_requested_at) == (JobStatus.QUEUED, 0, None)
    assert dispatcher.notified[-1] == [waiting.id]
    assert running.id == leased.id


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({}, "filters"), ({"everything": "yes"}, "filters"), ({"statuses": ["dead"]}, "statuses"),
     ({"statuses": ["bogus"]}, "statuses"), ({"queue": "bad queue"}, "queue"), ({"job_type": "no spaces"}, "job_type"),
     ({"queue": "q", "batch_size": 0}, "batch_size")],
)
def test_cancel_matching_refuses_bad_filters_and_writes_nothing(app, repo, kwargs, field) -> None:
    job = app.enqueue("t", {}).job
    with pytest.raises(ValidationError) as info:
        app.cancel_matching(**kwargs)
    assert info.value.field == field
    assert repo.get(job.id) == job


def test_cancel_matching_in_batches(app, repo, clock) -> None:
    jobs = [app.enqueue("t" if n % 3 else "u", {"n": n}, queue="a" if n < 7 else "b").job for n in range(10)]
    assert app.cancel_matching(queue="a", job_type="t", batch_size=2) == 4  # n = 1, 2, 4, 5
    assert app.cancel_matching(queue="a", job_type="t") == 0
    assert app.cancel_matching(everything=True, batch_size=3) == 6
    assert {repo.get(j.id).status for j in jobs} == {JobStatus.CANCELLED}


def test_purge_by_datetime_or_timedelta(app, repo, clock) -> None:
    old = app.enqueue("t", {}, idempotency_key="old").job
    [leased] = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
    repo.complete(leased.id, leased.lease_token, now=clock.now())  # finished at t0
    clock.advance(hours=2)
    recent = app.enqueue("t", {}).job
    [leased] = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
    repo.complete(leased.id, leased.lease_token, now=clock.now())  # finished at t0+2h
    pending = app.enqueue("t", {}).job
    assert app.purge(timedelta(hours=3)) == 0
    assert app.purge(timedelta(hours=1)) == 1
    with pytest.raises(JobNotFound):
        app.get(old.id)
    assert app.enqueue("t", {}, idempotency_key="old").created is True  # key freed
    assert app.purge(clock.now() + timedelta(seconds=1)) == 1
    assert app.get(pending.id).status is JobStatus.QUEUED
    with pytest.raises(JobNotFound):
        app.get(recent.id)


@pytest.mark.parametrize("older_than", [timedelta.max, timedelta(days=800_000)])
def test_purge_before_the_year_1_is_a_validation_error(app, repo, clock, older_than: timedelta) -> None:
    app.enqueue("t", {})
    with pytest.raises(ValidationError) as info:
        app.purge(older_than)
    assert info.value.field == "older_than" and "before the year 1" in info.value.problem
    assert app.purge(timedelta(days=36_525)) == 0


def test_reap_takes_back_expired_leases_and_notifies(app, repo, clock, dispatcher) -> None:
    job = app.enqueue("t", {}).job
    repo.lease(queues=None, worker_id="gone", now=clock.now(), lease_timeout=15 * 60)
    clock.advance(minutes=15)
    reaped = app.reap()
    assert [(j.id, j.status, j.attempts, j.lease_token) for j in reaped] == [(job.id, JobStatus.RETRYING, 1, None)]
    assert "expired" in (reaped[0].last_error or "")
    assert dispatcher.notified[-1] == [job.id]
    assert app.reap() == []


def test_close_closes_dispatcher_and_repository_once(repo, clock, monkeypatch) -> None:
    dispatcher = RecordingDispatcher()
    closes: list[str] = []
    real_repo_close = repo.close
    monkeypatch.setattr(dispatcher, "close", lambda: closes.append("dispatcher"))
    monkeypatch.setattr(repo, "close", lambda: (closes.append("repository"), real_repo_close()))
    with Tether(repo, dispatcher, clock) as app:  # type: ignore[arg-type]
        app.enqueue("t", {})
    app.close()  # idempotent: nothing is closed twice
    assert closes == ["dispatcher", "repository"]


def test_a_closed_app_refuses_to_build_a_worker(repo, clock) -> None:
    app = Tether(repo, RecordingDispatcher(), clock)  # type: ignore[arg-type]
    app.close()
    with pytest.raises(ConfigurationError, match="was closed"):
        app.worker()


def test_close_gets_to_the_repository_when_the_dispatcher_fails_to_close(repo, clock, monkeypatch, caplog) -> None:
    dispatcher = RecordingDispatcher()
    closes: list[str] = []

    def broken() -> None:
        raise RuntimeError("socket already gone")

    monkeypatch.setattr(dispatcher, "close", broken)
    monkeypatch.setattr(repo, "close", lambda: closes.append("repository"))
    Tether(repo, dispatcher, clock).close()  # type: ignore[arg-type]
    assert closes == ["repository"]
    assert "error while closing" in caplog.text and "socket already gone" in caplog.text


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"default_queue": "bad queue"}, "default_queue"),
        ({"default_max_attempts": 0}, "default_max_attempts"),
        ({"max_payload_bytes": 0}, "max_payload_bytes"),
        ({"retry_policy": "fast"}, "retry_policy"),
    ],
)
def test_bad_settings_are_rejected(repo, dispatcher, clock, kwargs, field) -> None:
    with pytest.raises(ValidationError) as info:
        Tether(repo, dispatcher, clock, **kwargs)
    assert info.value.field == field


def test_worker_arguments_are_validated(app: Tether) -> None:
    for kwargs, field in [
        ({"concurrency": 0}, "concurrency"),
        ({"queues": "default"}, "queues"),
        ({"queues": ["ok", "bad queue"]}, "queues[1]"),
        ({"lease_timeout": 0}, "lease_timeout"),
        ({"lease_timeout": 10, "heartbeat_interval": 10}, "heartbeat_interval"),
        ({"reap_interval": -1}, "reap_interval"),
        ({"drain_timeout": -1}, "drain_timeout"),
        ({"worker_id": ""}, "worker_id"),
        ({"max_wait": float("inf")}, "max_wait"),
    ]:
        with pytest.raises(ValidationError) as info:
            app.worker(**kwargs)
        assert info.value.field == field, kwargs


def test_worker_defaults(app: Tether) -> None:
    pool = app.worker(lease_timeout=90)
    assert pool.heartbeat_interval == 15  # a sixth of the lease
    assert pool.concurrency == 4 and pool.queues is None and pool.drain_timeout == 30
    other = app.worker()
    # a crashed worker's job comes back within lease + reap interval (75 s), heartbeats every 10 s
    assert (other.lease_timeout, other.heartbeat_interval, other.reap_interval) == (60, 10, 15)
    # hostname-pid-random: the suffix differs per start (C03)
    assert pool.worker_id != other.worker_id
    assert pool.worker_id.rsplit("-", 2)[:-1] == other.worker_id.rsplit("-", 2)[:-1]
    assert len(pool.worker_id.rsplit("-", 1)[1]) == 6


def test_retry_policy_reaches_the_worker(repo, dispatcher, clock) -> None:
    policy = RetryPolicy(base_seconds=0.5, cap_seconds=2, jitter=0)
    app = Tether(repo, dispatcher, clock, retry_policy=policy)
    assert app.worker().retry_policy is policy


def test_naive_utc_check_on_run_at_is_stated(app: Tether) -> None:
    with pytest.raises(ValidationError) as info:
        app.enqueue("t", {}, run_at=datetime(2026, 1, 1, tzinfo=UTC), delay=5)
    assert info.value.field == "run_at"


def test_rollback_on_sqlite_stores_and_notifies_nothing(tmp_path, clock: FakeClock) -> None:
    """C09(a) through the API on a SQLite file: the same outcome as on memory."""
    from tether.adapters.sqlalchemy import open_repository

    repo = open_repository(f"sqlite:///{tmp_path / 'jobs.db'}")
    dispatcher = RecordingDispatcher()
    app = Tether(repo, dispatcher, clock)  # type: ignore[arg-type]
    try:
        with pytest.raises(RuntimeError), app.transaction() as tx:
            app.enqueue("orders.ship", {"order": 1}, connection=tx, idempotency_key="order-1")
            raise RuntimeError("payment declined")
        assert repo.list_jobs() == [] and dispatcher.notified == []
        with app.transaction() as tx:
            job = app.enqueue("orders.ship", {"order": 1}, connection=tx, idempotency_key="order-1").job
            assert dispatcher.notified == []
        assert dispatcher.notified == [[job.id]]
        assert app.get(job.id).status is JobStatus.QUEUED
    finally:
        app.close()
