"""Hypothesis state machines that drive a job repository through random histories.

:class:`RepositoryStateMachine` runs one repository against the pure model of
:mod:`tether.testing.model` and fails on the first step where they disagree.
:class:`LockstepStateMachine` runs two repositories side by side (say memory and SQLite) and fails
on the first difference between them.  Both use a :class:`~tether.adapters.clock.FakeClock` that
the machine advances, so every time is exact.

The histories mix: enqueue (with and without idempotency keys, priorities, delays; one at a time,
in batches, and in transactions that roll back), leases by several workers (by queue filter and by
id), heartbeats, complete, fail (transient with a ``retry_at``, and permanent), dead letter,
release, writes with stale or foreign lease tokens, the reaper, manual retry of dead jobs, and purge.

Checked after every step: at most one live lease per job; no token handed out twice; a stale-token
write raises LeaseLost and changes nothing; finished jobs stay finished (only retry_dead and purge
move them); attempts never exceed max_attempts; leases come in order priority DESC, scheduled_at
ASC, id ASC; and every job the repository holds equals the model's (status, attempts, times,
lease, error presence, payload).

Use on your own repository (Hypothesis and pytest required)::

    from hypothesis import settings
    from tether.testing.statemachine import DEFAULT_SETTINGS, RepositoryStateMachine

    class MyMachine(RepositoryStateMachine):
        hypothesis_settings = settings(DEFAULT_SETTINGS, max_examples=25)   # slow backend
        def make_repository(self):
            return MyJobRepository(...)        # fresh and empty for every example
        def close_repository(self, repository):
            repository.close()

    TestMyMachine = MyMachine.test_case()
"""

from __future__ import annotations

import unittest
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.domain.errors import InvalidTransition, JobNotFound, LeaseLost, TetherError
from tether.domain.job import Job, JobStatus, NewJob
from tether.domain.validation import prepare_job
from tether.ports.repository import JobRepository
from tether.testing.model import JobModel, ModelInvalid, ModelJob, ModelLeaseLost, ModelNotFound

#: The budget the machines run with unless a subclass sets ``hypothesis_settings``: 100 histories
#: of up to 40 steps.  Lower ``max_examples`` for slow backends.
DEFAULT_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

QUEUES = ("q1", "q2")
QUEUE_FILTERS: tuple[tuple[str, ...] | None, ...] = (None, ("q1",), ("q2",), ("q1", "q2"))
WORKERS = ("w1", "w2", "host-1")
KEYS = ("k1", "k2", "k3")
WRITES = ("complete", "fail", "fail_permanent", "dead_letter", "heartbeat", "release")
#: One lease timeout for leases and heartbeats, so a heartbeat always moves the expiry forward.
LEASE_TIMEOUT = 60.0

queues = st.sampled_from(QUEUES)
priorities = st.sampled_from([-1, 0, 0, 5])
delays = st.one_of(st.none(), st.sampled_from([0, 1, 30, 90]))
max_attempts = st.integers(1, 3)
keys = st.one_of(st.none(), st.sampled_from(KEYS))
steps = st.sampled_from([0.5, 1, 5, 30, 59, 61, 120])
retry_delays = st.sampled_from([0, 1, 2, 30])


class _Rollback(Exception):
    pass


class _MachineBase(RuleBasedStateMachine):
    """Settings plumbing shared by both machines.

    ``hypothesis_settings`` is the budget :meth:`test_case` applies (default
    :data:`DEFAULT_SETTINGS`); a slow backend's subclass lowers ``max_examples`` there.
    """

    hypothesis_settings: ClassVar[settings] = DEFAULT_SETTINGS

    @classmethod
    def test_case(cls) -> type[unittest.TestCase]:
        """``cls.TestCase`` with ``cls.hypothesis_settings`` applied; assign it to a ``Test*`` name."""
        case = cls.TestCase
        case.settings = cls.hypothesis_settings
        return case

    def make_clock(self) -> FakeClock:
        """The fake clock of one history (override to start elsewhere)."""
        return FakeClock()

    def close_repository(self, repository: JobRepository) -> None:
        """Called once at the end of every history."""
        repository.close()

    def new_job(self, serial: int, queue: str, priority: int, delay: float | None, attempts: int, key: str | None) -> NewJob:
        return prepare_job(
            "machine.job", {"serial": serial}, now=self.clock.now(), queue=queue, priority=priority,
            delay=delay, max_attempts=attempts, idempotency_key=key,
        )

    clock: FakeClock
    serial: int = 0


def _describe(job: Job) -> str:
    return (f"id={job.id} {job.status.value} attempts={job.attempts}/{job.max_attempts} "
            f"scheduled={job.scheduled_at.isoformat()} lease={job.lease_token and job.lease_token[:8]}")


class RepositoryStateMachine(_MachineBase):
    """One repository against the pure model.  Override :meth:`make_repository` for your adapter."""

    def make_repository(self) -> JobRepository:
        """A fresh, empty repository for one history (default: the in-memory one)."""
        return InMemoryJobRepository()

    def __init__(self) -> None:
        super().__init__()
        self.clock = self.make_clock()
        self.repository = self.make_repository()
        self.model = JobModel()
        self.ids: dict[int, int] = {}  # model ordinal -> repository id
        self.ordinals: dict[int, int] = {}  # repository id -> model ordinal
        self.issued: list[tuple[int, str]] = []  # every lease ever: (ordinal, token)

    def teardown(self) -> None:
        self.close_repository(self.repository)

    # -- bookkeeping -------------------------------------------------------------------------
    def _register(self, ordinal: int, job_id: int) -> None:
        assert job_id not in self.ordinals, f"repository reused id {job_id}"
        assert all(job_id > other for other in self.ordinals), f"id {job_id} is not above every earlier id"
        self.ids[ordinal] = job_id
        self.ordinals[job_id] = ordinal

    def _ordinal(self, job: Job) -> int:
        assert job.id in self.ordinals, f"repository returned unknown job id {job.id}"
        return self.ordinals[job.id]

    def _check(self, job: Job, expected: ModelJob | None = None) -> None:
        """Fail unless the repository's ``job`` equals the model's."""
        model = expected or self.model.jobs[self._ordinal(job)]
        want: dict[str, Any] = {
            "id": self.ids[model.ordinal],
            "queue": model.queue,
            "priority": model.priority,
            "status": model.status,
            "attempts": model.attempts,
            "max_attempts": model.max_attempts,
            "scheduled_at": model.scheduled_at,
            "idempotency_key": model.key,
            "lease_token": model.token,
            "leased_by": model.worker,
            "lease_expires_at": model.lease_expires_at,
            "finished_at": model.finished_at if model.status in ("completed", "dead") else None,
            "payload": model.payload,
        }
        got: dict[str, Any] = {name: getattr(job, name) for name in want if name not in ("status", "payload")}
        got["status"] = job.status.value
        got["payload"] = job.payload
        want["has last_error"] = model.has_error
        got["has last_error"] = job.last_error is not None
        diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
        assert not diff, f"job #{model.ordinal} (repository, model) differ: {diff}"
        assert job.attempts <= job.max_attempts

    # -- enqueue -----------------------------------------------------------------------------
    def _enqueued(self, new: NewJob, created: bool, job: Job) -> None:
        ordinal, expect_created = self.model.enqueue(
            queue=new.queue, priority=new.priority, max_attempts=new.max_attempts,
            scheduled_at=new.scheduled_at, key=new.idempotency_key, payload=new.payload,
        )
        assert created == expect_created, f"created={created}, the model says {expect_created} (key {new.idempotency_key})"
        if created:
            self._register(ordinal, job.id)
        else:
            assert job.id == self.ids[ordinal], "an existing key must return the job that holds it"
        self._check(job)

    @rule(queue=queues, priority=priorities, delay=delays, attempts=max_attempts, key=keys)
    def enqueue(self, queue: str, priority: int, delay: float | None, attempts: int, key: str | None) -> None:
        self.serial += 1
        new = self.new_job(self.serial, queue, priority, delay, attempts, key)
        result = self.repository.enqueue(new, now=self.clock.now())
        self._enqueued(new, result.created, result.job)

    @rule(batch=st.lists(st.tuples(queues, priorities, delays, max_attempts, keys), min_size=1, max_size=3))
    def enqueue_many(self, batch: list[tuple[str, int, float | None, int, str | None]]) -> None:
        news = []
        for queue, priority, delay, attempts, key in batch:
            self.serial += 1
            news.append(self.new_job(self.serial, queue, priority, delay, attempts, key))
        results = self.repository.enqueue_many(news, now=self.clock.now())
        assert len(results) == len(news)
        for new, result in zip(news, results):
            self._enqueued(new, result.created, result.job)

    @rule(queue=queues, key=keys)
    def enqueue_rolled_back(self, queue: str, key: str | None) -> None:
        self.serial += 1
        new = self.new_job(self.serial, queue, 0, None, 3, key)
        try:
            with self.repository.transaction() as tx:
                self.repository.enqueue(new, now=self.clock.now(), connection=tx)
                raise _Rollback
        except _Rollback:
            pass

    # -- time --------------------------------------------------------------------------------
    @rule(seconds=steps)
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- leases ------------------------------------------------------------------------------
    def _leased(self, job: Job, worker: str, now: datetime) -> None:
        assert job.lease_token is not None
        ordinal = self._ordinal(job)
        self.model.record_lease(ordinal, token=job.lease_token, worker=worker, now=now, lease_timeout=LEASE_TIMEOUT)
        self.issued.append((ordinal, job.lease_token))
        self._check(job)

    @rule(worker=st.sampled_from(WORKERS), queue_filter=st.sampled_from(QUEUE_FILTERS), limit=st.integers(1, 3))
    def lease(self, worker: str, queue_filter: tuple[str, ...] | None, limit: int) -> None:
        now = self.clock.now()
        expected = self.model.next_leases(now=now, queues=queue_filter, limit=limit)
        got = self.repository.lease(
            queues=None if queue_filter is None else list(queue_filter), worker_id=worker, now=now,
            lease_timeout=LEASE_TIMEOUT, limit=limit,
        )
        assert [self._ordinal(j) for j in got] == expected, (
            f"leased {[_describe(j) for j in got]}, the model's lease order says ordinals {expected}")
        for job in got:
            self._leased(job, worker, now)

    @precondition(lambda self: self.model.enqueued > 0)
    @rule(data=st.data(), worker=st.sampled_from(WORKERS))
    def lease_job(self, data: st.DataObject, worker: str) -> None:
        ordinal = data.draw(st.integers(1, self.model.enqueued), label="ordinal")
        now = self.clock.now()
        expected = self.model.can_lease(ordinal, now)
        got = self.repository.lease_job(self.ids[ordinal], worker_id=worker, now=now, lease_timeout=LEASE_TIMEOUT)
        assert (got is not None) == expected, f"lease_job(#{ordinal}) gave {got and _describe(got)}, the model says {expected}"
        if got is not None:
            self._leased(got, worker, now)

    # -- holder writes -----------------------------------------------------------------------
    def _write(
        self, action: str, ordinal: int, token: str, retry_delay: float
    ) -> tuple[Callable[[], Job], Callable[[], ModelJob]]:
        """The repository call and the model call of one holder write."""
        repo, model, job_id, now = self.repository, self.model, self.ids[ordinal], self.clock.now()
        retry_at = now + timedelta(seconds=retry_delay)
        if action == "complete":
            return (lambda: repo.complete(job_id, token, now=now)), (lambda: model.complete(ordinal, token, now=now))
        if action == "fail":
            return (
                lambda: repo.fail(job_id, token, now=now, error=f"ValueError: try {ordinal}", retry_at=retry_at),
                lambda: model.fail(ordinal, token, now=now, retry_at=retry_at),
            )
        if action == "fail_permanent":
            return (
                lambda: repo.fail(job_id, token, now=now, error="PermanentError: no", retry_at=None),
                lambda: model.fail(ordinal, token, now=now, retry_at=None),
            )
        if action == "dead_letter":
            return (lambda: repo.dead_letter(job_id, token, now=now, error="dead"),
                    lambda: model.dead_letter(ordinal, token, now=now))
        if action == "heartbeat":
            return (lambda: repo.heartbeat(job_id, token, now=now, lease_timeout=LEASE_TIMEOUT),
                    lambda: model.heartbeat(ordinal, token, now=now, lease_timeout=LEASE_TIMEOUT))
        assert action == "release", action
        return (lambda: repo.release(job_id, token, now=now)), (lambda: model.release(ordinal, token, now=now))

    @precondition(lambda self: bool(self.model.running()))
    @rule(data=st.data(), action=st.sampled_from(WRITES), retry_delay=retry_delays)
    def holder_write(self, data: st.DataObject, action: str, retry_delay: float) -> None:
        job = data.draw(st.sampled_from(sorted(self.model.running(), key=lambda j: j.ordinal)), label="job")
        assert job.token is not None
        repo_call, model_call = self._write(action, job.ordinal, job.token, retry_delay)
        result = repo_call()
        self._check(result, model_call())

    def _snapshot(self, ordinal: int) -> Job | None:
        try:
            return self.repository.get(self.ids[ordinal])
        except JobNotFound:
            return None

    @precondition(lambda self: bool(self.issued))
    @rule(data=st.data(), action=st.sampled_from(WRITES), retry_delay=retry_delays)
    def stale_write(self, data: st.DataObject, action: str, retry_delay: float) -> None:
        """A write with a token that does not hold the job: an old lease of it, or another job's.

        Aimed mostly at running jobs with one of their own earlier tokens, where a weak fence
        (one that checks only the status, or the worker name) would let the write through.
        """
        running = sorted(j.ordinal for j in self.model.running())
        if running and data.draw(st.integers(0, 3), label="aim at a running job") > 0:
            ordinal = data.draw(st.sampled_from(running), label="job")
        else:
            ordinal = data.draw(st.integers(1, self.model.enqueued), label="job")
        current = self.model.jobs[ordinal].token if ordinal in self.model.jobs else None
        own = [token for o, token in self.issued if o == ordinal and token != current]
        foreign = [token for o, token in self.issued if o != ordinal]
        if own and (not foreign or data.draw(st.booleans(), label="own earlier token")):
            token = data.draw(st.sampled_from(own), label="stale token")
        elif foreign:
            token = data.draw(st.sampled_from(foreign), label="foreign token")
        else:
            return
        self._stale_write(action, ordinal, token, retry_delay)

    def _stale_write(self, action: str, ordinal: int, token: str, retry_delay: float) -> None:
        repo_call, model_call = self._write(action, ordinal, token, retry_delay)
        try:
            model_call()
        except ModelLeaseLost:
            pass
        else:  # pragma: no cover - the token was chosen not to hold the job
            raise AssertionError("the model accepted a stale token")
        before = self._snapshot(ordinal)
        try:
            result = repo_call()
        except LeaseLost:
            pass
        else:
            raise AssertionError(f"{action} with a stale token was accepted: {_describe(result)}")
        assert self._snapshot(ordinal) == before, "a refused write changed the job"

    @precondition(lambda self: bool(self.model.running()))
    @rule(data=st.data(), how=st.sampled_from(["expired", "released", "failed"]), worker=st.sampled_from(WORKERS),
          retry_delay=retry_delays)
    def lease_taken_over(self, data: st.DataObject, how: str, worker: str, retry_delay: float) -> None:
        """Case C01 as one step: a holder loses its lease (expiry and reaper, release, or a failure),
        another worker leases the job again, then the old holder tries every write with its old token."""
        job = data.draw(st.sampled_from(sorted(self.model.running(), key=lambda j: j.ordinal)), label="job")
        ordinal, old = job.ordinal, job.token
        assert old is not None and job.lease_expires_at is not None
        if how == "expired":
            if self.clock.now() < job.lease_expires_at:
                self.clock.set(job.lease_expires_at)
            self._reap()
        else:
            action_taken = "release" if how == "released" else "fail"
            repo_call, model_call = self._write(action_taken, ordinal, old, 0)
            self._check(repo_call(), model_call())
        now = self.clock.now()
        if self.model.can_lease(ordinal, now):
            got = self.repository.lease_job(self.ids[ordinal], worker_id=worker, now=now, lease_timeout=LEASE_TIMEOUT)
            assert got is not None, f"job #{ordinal} should be leasable again"
            self._leased(got, worker, now)
        for action in WRITES:
            self._stale_write(action, ordinal, old, retry_delay)

    # -- maintenance -------------------------------------------------------------------------
    @rule()
    def reap(self) -> None:
        self._reap()

    def _reap(self) -> None:
        now = self.clock.now()
        expected = self.model.expired(now)
        got = self.repository.reap(now=now, limit=1_000)
        assert sorted(self._ordinal(j) for j in got) == expected, (
            f"reaped {[_describe(j) for j in got]}, the model expected ordinals {expected}")
        for job in got:
            self._check(job, self.model.reap(self._ordinal(job), now=now))

    @precondition(lambda self: self.model.enqueued > 0)
    @rule(data=st.data())
    def retry_dead(self, data: st.DataObject) -> None:
        ordinal = data.draw(st.integers(1, self.model.enqueued), label="ordinal")
        now = self.clock.now()
        try:
            expected = self.model.retry_dead(ordinal, now=now)
        except (ModelNotFound, ModelInvalid) as verdict:
            error = JobNotFound if isinstance(verdict, ModelNotFound) else InvalidTransition
            before = self._snapshot(ordinal)
            try:
                self.repository.retry_dead(self.ids[ordinal], now=now)
            except error:
                pass
            else:
                raise AssertionError(f"retry_dead(#{ordinal}) should raise {error.__name__}")
            assert self._snapshot(ordinal) == before
            return
        self._check(self.repository.retry_dead(self.ids[ordinal], now=now), expected)

    @rule(age=st.sampled_from([0, 1, 60, 600]))
    def purge(self, age: float) -> None:
        older_than = self.clock.now() - timedelta(seconds=age)
        expected = self.model.purge(older_than=older_than)
        assert self.repository.purge(older_than=older_than) == len(expected)

    # -- invariants --------------------------------------------------------------------------
    @invariant()
    def repository_agrees_with_the_model(self) -> None:
        for ordinal in range(1, self.model.enqueued + 1):
            job = self._snapshot(ordinal)
            if ordinal in self.model.jobs:
                assert job is not None, f"job #{ordinal} vanished"
                self._check(job)
            else:
                assert job is None, f"purged job #{ordinal} is still there: {_describe(job)}"
        counts = self.repository.count_by_status()
        assert {s.value: n for s, n in counts.items()} == self.model.counts()
        listed = [j.id for j in self.repository.list_jobs(limit=10_000)]
        assert listed == sorted(self.ids[o] for o in self.model.jobs)

    @invariant()
    def one_live_lease_per_job(self) -> None:
        running = self.repository.list_jobs(status=JobStatus.RUNNING, limit=10_000)
        tokens = [j.lease_token for j in running]
        assert None not in tokens and len(set(tokens)) == len(tokens)
        assert len(self.model.tokens) == len(self.issued), "a lease token was handed out twice"


# -- two repositories in lockstep ----------------------------------------------------------
Outcome = tuple[str, Any]


class LockstepStateMachine(_MachineBase):
    """Two repositories driven by the same random history; fails on the first difference.

    Override :meth:`make_left` and :meth:`make_right` (or use :func:`lockstep_machine`).  Jobs are
    compared by enqueue order (ids may differ between stores), with status, attempts, max_attempts,
    priority, queue, scheduled_at, finished_at, lease expiry, lease holder, payload and whether
    ``last_error`` is set; every call must give the same result or raise the same error.
    """

    def make_left(self) -> JobRepository:
        return InMemoryJobRepository()

    def make_right(self) -> JobRepository:
        return InMemoryJobRepository()

    def __init__(self) -> None:
        super().__init__()
        self.clock = self.make_clock()
        self.sides: tuple[JobRepository, JobRepository] = (self.make_left(), self.make_right())
        self.ids: list[tuple[int, int]] = []  # enqueue order -> (left id, right id)
        self.ordinal_of: tuple[dict[int, int], dict[int, int]] = ({}, {})
        self.leases: list[tuple[int, str, str]] = []  # (ordinal, left token, right token)
        self.current: dict[int, int] = {}  # ordinal -> index into self.leases of its latest lease

    def teardown(self) -> None:
        for repository in self.sides:
            self.close_repository(repository)

    def _norm(self, side: int, job: Job) -> tuple[Any, ...]:
        return (
            self.ordinal_of[side].get(job.id, f"unknown id {job.id}"), job.status.value, job.attempts,
            job.max_attempts, job.priority, job.queue, job.scheduled_at, job.finished_at, job.lease_expires_at,
            job.leased_by, job.last_error is not None, job.payload_json, job.idempotency_key, job.lease_token is not None,
        )

    def _both(self, label: str, call: Callable[[JobRepository, int], Any],
              normalize: Callable[[int, Any], Any]) -> tuple[Outcome, Any, Any]:
        raw: list[Any] = [None, None]
        outcomes = []
        for side, repository in enumerate(self.sides):
            try:
                raw[side] = call(repository, side)
                outcomes.append(("ok", normalize(side, raw[side])))
            except TetherError as exc:
                outcomes.append(("raised", type(exc).__name__))
        assert outcomes[0] == outcomes[1], f"{label}: left {outcomes[0]} != right {outcomes[1]}"
        return outcomes[0], raw[0], raw[1]

    def _job(self, side: int, job: Any) -> Any:
        return None if job is None else self._norm(side, job)

    def _jobs(self, side: int, jobs: Any) -> Any:
        return [self._norm(side, j) for j in jobs]

    # -- enqueue -----------------------------------------------------------------------------
    def _register(self, left: Job, right: Job) -> None:
        self.ids.append((left.id, right.id))
        self.ordinal_of[0][left.id] = self.ordinal_of[1][right.id] = len(self.ids)

    @rule(queue=queues, priority=priorities, delay=delays, attempts=max_attempts, key=keys)
    def enqueue(self, queue: str, priority: int, delay: float | None, attempts: int, key: str | None) -> None:
        self.serial += 1
        new = self.new_job(self.serial, queue, priority, delay, attempts, key)
        results = [r.enqueue(new, now=self.clock.now()) for r in self.sides]
        assert results[0].created == results[1].created, "created differs"
        if results[0].created:
            self._register(results[0].job, results[1].job)
        assert self._norm(0, results[0].job) == self._norm(1, results[1].job)

    @rule(batch=st.lists(st.tuples(queues, priorities, delays, max_attempts, keys), min_size=1, max_size=3))
    def enqueue_many(self, batch: list[tuple[str, int, float | None, int, str | None]]) -> None:
        news = []
        for queue, priority, delay, attempts, key in batch:
            self.serial += 1
            news.append(self.new_job(self.serial, queue, priority, delay, attempts, key))
        left, right = (r.enqueue_many(news, now=self.clock.now()) for r in self.sides)
        assert [x.created for x in left] == [x.created for x in right], "created flags differ"
        for a, b in zip(left, right):
            if a.created:
                self._register(a.job, b.job)
            assert self._norm(0, a.job) == self._norm(1, b.job)

    @rule(queue=queues, key=keys)
    def enqueue_rolled_back(self, queue: str, key: str | None) -> None:
        self.serial += 1
        new = self.new_job(self.serial, queue, 0, None, 3, key)
        for repository in self.sides:
            try:
                with repository.transaction() as tx:
                    repository.enqueue(new, now=self.clock.now(), connection=tx)
                    raise _Rollback
            except _Rollback:
                pass

    @rule(seconds=steps)
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- leases and writes -------------------------------------------------------------------
    def _record_leases(self, left: list[Job], right: list[Job]) -> None:
        for a, b in zip(left, right):
            assert a.lease_token is not None and b.lease_token is not None
            ordinal = self.ordinal_of[0][a.id]
            self.leases.append((ordinal, a.lease_token, b.lease_token))
            self.current[ordinal] = len(self.leases) - 1

    @rule(worker=st.sampled_from(WORKERS), queue_filter=st.sampled_from(QUEUE_FILTERS), limit=st.integers(1, 3))
    def lease(self, worker: str, queue_filter: tuple[str, ...] | None, limit: int) -> None:
        now = self.clock.now()
        _, left, right = self._both(
            "lease",
            lambda r, side: r.lease(queues=None if queue_filter is None else list(queue_filter), worker_id=worker,
                                    now=now, lease_timeout=LEASE_TIMEOUT, limit=limit),
            self._jobs,
        )
        self._record_leases(left, right)

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data(), worker=st.sampled_from(WORKERS))
    def lease_job(self, data: st.DataObject, worker: str) -> None:
        ordinal = data.draw(st.integers(1, len(self.ids)), label="ordinal")
        now = self.clock.now()
        _, left, right = self._both(
            f"lease_job(#{ordinal})",
            lambda r, side: r.lease_job(self.ids[ordinal - 1][side], worker_id=worker, now=now, lease_timeout=LEASE_TIMEOUT),
            self._job,
        )
        if left is not None:
            self._record_leases([left], [right])

    def _apply(self, action: str, ordinal: int, tokens: tuple[str, str], retry_delay: float) -> None:
        now = self.clock.now()
        retry_at = now + timedelta(seconds=retry_delay)

        def call(r: JobRepository, side: int) -> Job:
            job_id, token = self.ids[ordinal - 1][side], tokens[side]
            if action == "complete":
                return r.complete(job_id, token, now=now)
            if action == "fail":
                return r.fail(job_id, token, now=now, error="ValueError: again", retry_at=retry_at)
            if action == "fail_permanent":
                return r.fail(job_id, token, now=now, error="PermanentError: no", retry_at=None)
            if action == "dead_letter":
                return r.dead_letter(job_id, token, now=now, error="dead")
            if action == "heartbeat":
                return r.heartbeat(job_id, token, now=now, lease_timeout=LEASE_TIMEOUT)
            return r.release(job_id, token, now=now)

        self._both(f"{action}(#{ordinal})", call, self._job)

    @precondition(lambda self: bool(self.current))
    @rule(data=st.data(), action=st.sampled_from(WRITES), retry_delay=retry_delays)
    def holder_write(self, data: st.DataObject, action: str, retry_delay: float) -> None:
        ordinal = data.draw(st.sampled_from(sorted(self.current)), label="ordinal")
        _, left_token, right_token = self.leases[self.current[ordinal]]
        self._apply(action, ordinal, (left_token, right_token), retry_delay)

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data(), action=st.sampled_from(WRITES), retry_delay=retry_delays)
    def any_token_write(self, data: st.DataObject, action: str, retry_delay: float) -> None:
        """A write with any token ever handed out, on any job: stale, foreign or current."""
        ordinal = data.draw(st.integers(1, len(self.ids)), label="ordinal")
        _, left_token, right_token = data.draw(st.sampled_from(self.leases), label="lease")
        self._apply(action, ordinal, (left_token, right_token), retry_delay)

    @rule()
    def reap(self) -> None:
        now = self.clock.now()
        self._both("reap", lambda r, side: r.reap(now=now, limit=1_000),
                   lambda side, jobs: sorted(self._jobs(side, jobs), key=repr))

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data())
    def retry_dead(self, data: st.DataObject) -> None:
        ordinal = data.draw(st.integers(1, len(self.ids)), label="ordinal")
        now = self.clock.now()
        self._both(f"retry_dead(#{ordinal})", lambda r, side: r.retry_dead(self.ids[ordinal - 1][side], now=now), self._job)

    @rule(age=st.sampled_from([0, 1, 60, 600]))
    def purge(self, age: float) -> None:
        older_than = self.clock.now() - timedelta(seconds=age)
        self._both("purge", lambda r, side: r.purge(older_than=older_than), lambda side, n: n)

    @invariant()
    def both_hold_the_same_jobs(self) -> None:
        listed = [self._jobs(side, r.list_jobs(limit=10_000)) for side, r in enumerate(self.sides)]
        assert listed[0] == listed[1], f"stores differ:\nleft  {listed[0]}\nright {listed[1]}"
        counts = [r.count_by_status() for r in self.sides]
        assert counts[0] == counts[1], f"counts differ: {counts}"
        for job in listed[0]:
            assert job[2] <= job[3], f"attempts above max_attempts: {job}"


def lockstep_machine(
    left: Callable[[], JobRepository],
    right: Callable[[], JobRepository],
    *,
    name: str = "Lockstep",
    hypothesis_settings: settings | None = None,
) -> type[LockstepStateMachine]:
    """A :class:`LockstepStateMachine` over two repository factories (each called once per history).

    Example: ``TestMemoryVsSqlite = lockstep_machine(InMemoryJobRepository, make_sqlite).test_case()``.
    """
    attributes: dict[str, Any] = {
        "make_left": lambda self: left(),
        "make_right": lambda self: right(),
        "hypothesis_settings": hypothesis_settings or DEFAULT_SETTINGS,
    }
    return type(name, (LockstepStateMachine,), attributes)


__all__ = [
    "DEFAULT_SETTINGS",
    "LEASE_TIMEOUT",
    "LockstepStateMachine",
    "RepositoryStateMachine",
    "lockstep_machine",
]
