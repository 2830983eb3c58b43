"""The lockstep state machine: two repositories (say memory and SQLite) driven by the same random
history, failing on the first call whose result or error differs between them.

It needs no model: each store is the other's oracle.  Besides the steps of the repository machine,
it writes with any token ever handed out, on any job, and expects both stores to refuse or accept
alike.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from tether.adapters.memory import InMemoryJobRepository
from tether.domain.errors import TetherError
from tether.domain.job import Job, JobStatus
from tether.ports.repository import JobRepository
from tether.testing.statemachine.base import (
    DEFAULT_SETTINGS,
    LEASE_TIMEOUT,
    QUEUE_FILTERS,
    TIMEOUT_ERROR,
    WORKERS,
    WRITES,
    MachineBase,
    Rollback,
    delays,
    keys,
    max_attempts,
    priorities,
    queues,
    retry_delays,
    steps,
)

#: What one call gave on one side: ``("ok", normalized result)`` or ``("raised", error class name)``.
Outcome = tuple[str, Any]


class LockstepStateMachine(MachineBase):
    """Two repositories driven by the same random history; fails on the first difference.

    Override :meth:`make_left` and :meth:`make_right` (or use :func:`lockstep_machine`).  Jobs are
    compared by enqueue order (ids may differ between stores), with status, attempts, max_attempts,
    priority, queue, scheduled_at, finished_at, lease start, expiry and holder, payload, whether
    ``last_error`` is set and the attempt history (entry for entry); every call must give the same result or raise the same error.
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
            job.cancel_requested_at, job.leased_at, job.history,
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
                    raise Rollback
            except Rollback:
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
            if action == "time_out":
                return r.fail(job_id, token, now=now, error=TIMEOUT_ERROR, retry_at=retry_at)
            if action == "dead_letter":
                return r.dead_letter(job_id, token, now=now, error="dead")
            if action == "heartbeat":
                return r.heartbeat(job_id, token, now=now, lease_timeout=LEASE_TIMEOUT)
            if action == "snooze":
                return r.snooze(job_id, token, now=now, until=retry_at)
            assert action == "release", action
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

    @precondition(lambda self: len(self.leases) > 1)
    @rule(data=st.data(), action=st.sampled_from(WRITES), retry_delay=retry_delays)
    def stale_write(self, data: st.DataObject, action: str, retry_delay: float) -> None:
        """A write on a running job with a token that does not hold it: an earlier lease of the
        job, or another job's.  Both stores must refuse it alike."""
        running = sorted(self.ordinal_of[0][j.id] for j in self.sides[0].list_jobs(status=JobStatus.RUNNING, limit=10_000))
        if not running:
            return
        ordinal = data.draw(st.sampled_from(running), label="ordinal")
        stale = [lease for i, lease in enumerate(self.leases) if i != self.current.get(ordinal)]
        _, left_token, right_token = data.draw(st.sampled_from(stale), label="stale lease")
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

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data(), queue_filter=st.sampled_from(QUEUE_FILTERS), limit=st.integers(0, 3))
    def cancel(self, data: st.DataObject, queue_filter: tuple[str, ...] | None, limit: int) -> None:
        """An operator's cancel: of one job (``limit`` 0), or of a batch of up to ``limit`` jobs by queue."""
        now = self.clock.now()
        if limit == 0:
            ordinal = data.draw(st.integers(1, len(self.ids)), label="ordinal")
            self._both(f"cancel(#{ordinal})", lambda r, side: r.cancel(self.ids[ordinal - 1][side], now=now), self._job)
            return
        queues = None if queue_filter is None else list(queue_filter)
        self._both("cancel_many", lambda r, side: r.cancel_many(now=now, queues=queues, limit=limit), self._jobs)

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
