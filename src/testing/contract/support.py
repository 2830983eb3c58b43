"""Fixtures and helpers shared by the parts of :class:`~tether.testing.contract.RepositoryContract`.

Every time a contract test uses comes from the ``clock`` fixture (a
:class:`~tether.adapters.clock.FakeClock` starting at 2026-01-01T00:00:00Z), never from the wall
clock, so the expected values are exact.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from tether.adapters.clock import FakeClock
from tether.domain.job import Job, JobStatus, NewJob
from tether.domain.validation import prepare_job
from tether.ports.repository import JobRepository

MINUTE = 60.0
#: ``payload`` default of the helpers: an empty object.
EMPTY: Any = object()


class Rollback(Exception):
    """Raised inside ``repository.transaction()`` by a test to make it roll back."""


class ContractSupport:
    """Base of the contract parts: the ``clock`` fixture, the knobs, and small helpers.

    Knobs (class attributes) an adapter's subclass may lower for a slow backend; the defaults are
    the values of the acceptance cases:

    Attributes:
        lease_timeout: seconds a lease lasts in the cases (15 min, as in C01-C05).
        concurrent_enqueuers: threads enqueueing one idempotency key at once (C10c: 20).
        token_reuse_leases: leases of one job by one worker id whose tokens must all differ (1,000).
        reap_race_jobs: jobs raced between the reaper and their holders' ``complete`` (50).
        contention_pause: seconds an open transaction is held while another thread contends with
            it (C10a/b); only a pause, never an assertion on how long anything took.
        thread_join_timeout: seconds to wait for a contract's helper thread before failing.
    """

    lease_timeout: float = 15 * MINUTE
    concurrent_enqueuers: int = 20
    token_reuse_leases: int = 1_000
    reap_race_jobs: int = 50
    contention_pause: float = 0.2
    thread_join_timeout: float = 60.0

    @pytest.fixture
    def clock(self) -> FakeClock:
        """A fake clock at 2026-01-01T00:00:00Z; the repository fixture may use it too."""
        return FakeClock()

    # -- helpers -----------------------------------------------------------------------------
    @staticmethod
    def new_job(clock: FakeClock, payload: Any = EMPTY, *, job_type: str = "contract.job", **options: Any) -> NewJob:
        """A validated :class:`NewJob` (``prepare_job`` with ``now`` from ``clock``)."""
        return prepare_job(job_type, {} if payload is EMPTY else payload, now=clock.now(), **options)

    def add(self, repository: JobRepository, clock: FakeClock, payload: Any = EMPTY, **options: Any) -> Job:
        """Enqueue one job now (outside any transaction) and return it as stored."""
        result = repository.enqueue(self.new_job(clock, payload, **options), now=clock.now())
        assert result.created, "a job without a duplicate idempotency key must be created"
        return result.job

    def lease_one(self, repository: JobRepository, clock: FakeClock, worker_id: str = "w-1", **options: Any) -> Job:
        """Lease exactly one job (any queue) at ``clock.now()``; fails the test if none is due."""
        jobs = repository.lease(
            queues=options.pop("queues", None),
            worker_id=worker_id,
            now=clock.now(),
            lease_timeout=options.pop("lease_timeout", self.lease_timeout),
            limit=1,
        )
        assert len(jobs) == 1, f"expected one due job to lease, got {len(jobs)}"
        return jobs[0]

    @staticmethod
    def total(repository: JobRepository, **filters: Any) -> int:
        """How many jobs the repository holds (all statuses)."""
        return sum(repository.count_by_status(**filters).values())

    @staticmethod
    def token_of(job: Job) -> str:
        assert job.status is JobStatus.RUNNING and job.lease_token, f"job {job.id} is not running under a lease"
        return job.lease_token

    def run_threads(self, targets: list[Callable[[], None]]) -> None:
        """Start one thread per target, join them all; fail the test if one is still running."""
        threads = [threading.Thread(target=t, daemon=True) for t in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(self.thread_join_timeout)
        stuck = [t.name for t in threads if t.is_alive()]
        assert not stuck, f"threads still running after {self.thread_join_timeout} s: {stuck}"

    @staticmethod
    def at(clock: FakeClock, start: datetime, seconds: float) -> datetime:
        """Move ``clock`` to ``start + seconds`` and return that instant."""
        clock.set(start + timedelta(seconds=seconds))
        return clock.now()
