"""The repository state machine: one repository driven through random histories, each step checked
against the pure model of :mod:`tether.testing.model`.

Steps: enqueue (one at a time, in batches, in transactions that roll back), leases (by queue
filter, by job type and by id), the holder's writes (complete, for every other job as a worker's
flush writes it, ``complete_and_lease`` with the next lease of that worker's job types; fail,
permanent failure, dead letter, heartbeat, release, snooze), running limits set and cleared with a lease, writes with stale or foreign tokens, a lease taken over (case C01 as one step),
an operator's cancel (one job, or a batch by queue), the reaper, manual retry of dead and
cancelled jobs, purge, clock steps, and on a repository that is a schedule store too, schedule
declarations and periodic ticks (the mark's compare-and-set, overlap on and off).  Invariants
after every step: the repository holds exactly the model's jobs (and schedules' marks and last
jobs), at most one live lease per job, and no token was handed out twice.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from tether.adapters.memory import InMemoryJobRepository
from tether.domain.errors import InvalidTransition, JobNotFound, LeaseLost
from tether.domain.job import Job, JobStatus, NewJob
from tether.ports.overview import queue_summaries_of
from tether.ports.repository import JobRepository
from tether.testing.model import FINISHED, JobModel, ModelInvalid, ModelJob, ModelLeaseLost, ModelNotFound
from tether.testing.statemachine.base import (
    LEASE_TIMEOUT,
    QUEUE_FILTERS,
    QUEUES,
    TIMEOUT_ERROR,
    WORKER_JOB_TYPES,
    WORKERS,
    WRITES,
    MachineBase,
    Rollback,
    delays,
    describe,
    keys,
    max_attempts,
    priorities,
    queues,
    retry_delays,
    running_limits,
    steps,
)
from tether.testing.statemachine.flush_steps import FlushSteps
from tether.testing.statemachine.queue_control_steps import QueueControlSteps
from tether.testing.statemachine.schedule_rules import ScheduleRules


class RepositoryStateMachine(ScheduleRules, QueueControlSteps, FlushSteps, MachineBase):
    """One repository against the pure model.  Override :meth:`make_repository` for your adapter."""

    #: The job types each worker's leases ask for (a worker not named asks for every type).
    worker_job_types: ClassVar[dict[str, tuple[str, ...]]] = WORKER_JOB_TYPES

    #: Whether the store leases the jobs of a queue with a running limit after every other
    #: queue's in one lease (SQLite and PostgreSQL do; the in-memory store keeps lease order
    #: across queues).  Set it on a subclass for such a store.
    limited_queues_last: ClassVar[bool] = False

    def make_repository(self) -> JobRepository:
        """A fresh, empty repository for one history (default: the in-memory one)."""
        return InMemoryJobRepository()

    def __init__(self) -> None:
        super().__init__()
        self.clock = self.make_clock()
        self.started_at = self.clock.now()
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
            "job_type": model.job_type,
            "queue": model.queue,
            "priority": model.priority,
            "status": model.status,
            "attempts": model.attempts,
            "max_attempts": model.max_attempts,
            "scheduled_at": model.scheduled_at,
            "idempotency_key": model.key,
            "concurrency_key": model.limit_key,
            "lease_token": model.token,
            "leased_by": model.worker,
            "lease_expires_at": model.lease_expires_at,
            "leased_at": model.leased_at,
            "finished_at": model.finished_at if model.status in FINISHED else None,
            "cancel_requested_at": model.cancel_requested_at,
            "payload": model.payload,
        }
        got: dict[str, Any] = {name: getattr(job, name) for name in want if name not in ("status", "payload")}
        got["status"] = job.status.value
        got["payload"] = job.payload
        want["has last_error"] = model.has_error
        got["has last_error"] = job.last_error is not None
        want["history"] = model.history
        got["history"] = [
            (a.number, a.worker_id, a.started_at, a.ended_at, a.outcome.value, a.error is not None) for a in job.history
        ]
        diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
        assert not diff, f"job #{model.ordinal} (repository, model) differ: {diff}"
        assert job.attempts <= job.max_attempts

    # -- enqueue -----------------------------------------------------------------------------
    def _enqueued(self, new: NewJob, created: bool, job: Job) -> None:
        ordinal, expect_created = self.model.enqueue(
            queue=new.queue, priority=new.priority, max_attempts=new.max_attempts,
            scheduled_at=new.scheduled_at, key=new.idempotency_key, payload=new.payload,
            limit_key=new.concurrency_key, job_type=new.job_type,
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
                raise Rollback
        except Rollback:
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

    @rule(worker=st.sampled_from(WORKERS), queue_filter=st.sampled_from(QUEUE_FILTERS), limit=st.integers(1, 3),
          listed_order=st.booleans(), paused=st.sampled_from((None, *QUEUES)), running_limit=running_limits)
    def lease(
        self, worker: str, queue_filter: tuple[str, ...] | None, limit: int, listed_order: bool = False,
        paused: str | None = None, running_limit: int | str | tuple[int, float] | tuple[str, int] | None = None,
    ) -> None:
        """A lease, in the model's order (``listed_order``: queue by queue as listed); with
        ``paused``, that queue is paused for it (nothing of it may come back, nor be listed by
        ``due_jobs``) and resumed afterwards.  With ``running_limit`` the lease's first queue
        (``q1`` for every queue) first gets a running limit (1 to 3), a rate limit
        (``(starts, per)``), a per-key running limit (``("per_key", 1)``) or none (``"clear"``),
        which stays for later leases: a lease takes no more of a queue than its free slots
        (running jobs under unexpired leases count) and its window's remaining starts, cut in
        lease order, and passes over jobs whose concurrency key is at its limit.  Like
        pause it rides on the lease rather than on a rule of its own, so the number of rules
        (and the default budget's reach) stays as it was.  A worker of :data:`WORKER_JOB_TYPES`
        asks only for its job types (``JobRepository.lease(job_types=...)``), the others for all.
        """
        if running_limit is not None:
            self._control((queue_filter or QUEUES)[0], running_limit)
        if paused is not None:
            assert self.repository.set_queue_paused(paused, True, now=self.clock.now()).paused
            self.model.pause(paused)
        try:
            self._lease(worker, queue_filter, limit, listed_order, self.worker_job_types.get(worker))
        finally:
            if paused is not None:
                assert not self.repository.set_queue_paused(paused, False, now=self.clock.now()).paused
                self.model.resume(paused)

    def _lease(
        self, worker: str, queue_filter: tuple[str, ...] | None, limit: int, listed_order: bool,
        job_types: tuple[str, ...] | None = None,
    ) -> None:
        now = self.clock.now()
        if not listed_order:
            expected = self.model.next_leases(now=now, queues=queue_filter, limit=limit, limits=False)
            listed = self.repository.due_jobs(now=now, queues=None if queue_filter is None else list(queue_filter), limit=limit)
            assert [self._ordinal(j) for j in listed] == expected, (
                f"due_jobs gave {[describe(j) for j in listed]}, the model's lease order says ordinals {expected}")
        expected = self.model.next_leases(
            now=now, queues=queue_filter, limit=limit, listed_order=listed_order,
            limited_last=self.limited_queues_last, job_types=job_types,
        )
        got = self.repository.lease(
            queues=None if queue_filter is None else list(queue_filter), worker_id=worker, now=now,
            lease_timeout=LEASE_TIMEOUT, limit=limit, listed_order=listed_order,
            **({} if job_types is None else {"job_types": list(job_types)}),
        )
        leased = [self._ordinal(j) for j in got]
        if self.limited_queues_last and any(self.model.limited(q) for q in QUEUES):
            leased, expected = sorted(leased), sorted(expected)  # the model picks the jobs; the list's order is the store's
        assert leased == expected, (
            f"leased {[describe(j) for j in got]}, the model's lease order says ordinals {expected}")
        for job in got:
            self._leased(job, worker, now)

    @precondition(lambda self: self.model.enqueued > 0)
    @rule(data=st.data(), worker=st.sampled_from(WORKERS))
    def lease_job(self, data: st.DataObject, worker: str) -> None:
        ordinal = data.draw(st.integers(1, self.model.enqueued), label="ordinal")
        now = self.clock.now()
        expected = self.model.can_lease(ordinal, now)
        got = self.repository.lease_job(self.ids[ordinal], worker_id=worker, now=now, lease_timeout=LEASE_TIMEOUT)
        assert (got is not None) == expected, f"lease_job(#{ordinal}) gave {got and describe(got)}, the model says {expected}"
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
        if action == "time_out":
            return (
                lambda: repo.fail(job_id, token, now=now, error=TIMEOUT_ERROR, retry_at=retry_at),
                lambda: model.fail(ordinal, token, now=now, retry_at=retry_at, timed_out=True),
            )
        if action == "dead_letter":
            return (lambda: repo.dead_letter(job_id, token, now=now, error="dead"),
                    lambda: model.dead_letter(ordinal, token, now=now))
        if action == "heartbeat":
            return (lambda: repo.heartbeat(job_id, token, now=now, lease_timeout=LEASE_TIMEOUT),
                    lambda: model.heartbeat(ordinal, token, now=now, lease_timeout=LEASE_TIMEOUT))
        if action == "snooze":
            return (lambda: repo.snooze(job_id, token, now=now, until=retry_at),
                    lambda: model.snooze(ordinal, token, now=now, until=retry_at))
        assert action == "release", action
        return (lambda: repo.release(job_id, token, now=now)), (lambda: model.release(ordinal, token, now=now))

    @precondition(lambda self: bool(self.model.running()))
    @rule(data=st.data(), action=st.sampled_from(WRITES), retry_delay=retry_delays)
    def holder_write(self, data: st.DataObject, action: str, retry_delay: float) -> None:
        job = data.draw(st.sampled_from(sorted(self.model.running(), key=lambda j: j.ordinal)), label="job")
        assert job.token is not None
        if action == "complete" and job.ordinal % 2 == 1:  # no draw of its own: the histories' reach stays
            self._complete_and_lease(job.ordinal, job.token, job.worker)
            return
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
            raise AssertionError(f"{action} with a stale token was accepted: {describe(result)}")
        assert self._snapshot(ordinal) == before, "a refused write changed the job"

    @precondition(lambda self: bool(self.model.running()))
    @rule(data=st.data(), how=st.sampled_from(["expired", "released", "failed", "cancelled and expired"]),
          worker=st.sampled_from(WORKERS), retry_delay=retry_delays)
    def lease_taken_over(self, data: st.DataObject, how: str, worker: str, retry_delay: float) -> None:
        """Case C01 as one step: a holder loses its lease (expiry and reaper, release, a failure, or
        an operator's cancel and then expiry and reaper: the job must end cancelled, not come back),
        another worker leases the job again if it can, then the old holder tries every write with
        its old token."""
        job = data.draw(st.sampled_from(sorted(self.model.running(), key=lambda j: j.ordinal)), label="job")
        ordinal, old = job.ordinal, job.token
        assert old is not None and job.lease_expires_at is not None
        if how == "cancelled and expired":
            now = self.clock.now()
            self._check(self.repository.cancel(self.ids[ordinal], now=now), self.model.cancel(ordinal, now=now))
        if how in ("expired", "cancelled and expired"):
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
            f"reaped {[describe(j) for j in got]}, the model expected ordinals {expected}")
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

    @precondition(lambda self: self.model.enqueued > 0)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        """An operator's cancel of any job: waiting, running (a request), finished (refused) or purged."""
        running = sorted(j.ordinal for j in self.model.running())
        if running and data.draw(st.integers(0, 1), label="aim at a running job") > 0:
            ordinal = data.draw(st.sampled_from(running), label="ordinal")
        else:
            ordinal = data.draw(st.integers(1, self.model.enqueued), label="ordinal")
        now = self.clock.now()
        try:
            expected = self.model.cancel(ordinal, now=now)
        except (ModelNotFound, ModelInvalid) as verdict:
            error = JobNotFound if isinstance(verdict, ModelNotFound) else InvalidTransition
            before = self._snapshot(ordinal)
            try:
                self.repository.cancel(self.ids[ordinal], now=now)
            except error:
                pass
            else:
                raise AssertionError(f"cancel(#{ordinal}) should raise {error.__name__}")
            assert self._snapshot(ordinal) == before, "a refused cancel changed the job"
            return
        self._check(self.repository.cancel(self.ids[ordinal], now=now), expected)

    @rule(queue_filter=st.sampled_from(QUEUE_FILTERS), limit=st.integers(1, 3))
    def cancel_many(self, queue_filter: tuple[str, ...] | None, limit: int) -> None:
        now = self.clock.now()
        expected = self.model.cancel_many(now=now, queues=queue_filter, limit=limit)
        got = self.repository.cancel_many(
            now=now, queues=None if queue_filter is None else list(queue_filter), limit=limit
        )
        assert [self._ordinal(j) for j in got] == [j.ordinal for j in expected], (
            f"cancel_many wrote {[describe(j) for j in got]}, the model says ordinals {[j.ordinal for j in expected]}")
        for job, model in zip(got, expected):
            self._check(job, model)

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
                assert job is None, f"purged job #{ordinal} is still there: {describe(job)}"
        counts = self.repository.count_by_status()
        assert {s.value: n for s, n in counts.items()} == self.model.counts()
        listed = [j.id for j in self.repository.list_jobs(limit=10_000)]
        assert listed == sorted(self.ids[o] for o in self.model.jobs)
        now = self.clock.now()
        summaries = [(s.queue, s.queued, s.running, s.retrying, s.due, s.oldest_due_at)
                     for s in queue_summaries_of(self.repository, now=now)]  # the overview port's, where the store has it
        assert summaries == self.model.queue_summaries(now)

    @invariant()
    def one_live_lease_per_job(self) -> None:
        running = self.repository.list_jobs(status=JobStatus.RUNNING, limit=10_000)
        tokens = [j.lease_token for j in running]
        assert None not in tokens and len(set(tokens)) == len(tokens)
        assert len(self.model.tokens) == len(self.issued), "a lease token was handed out twice"
