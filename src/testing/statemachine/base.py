"""What both repository state machines share: their budget, the random inputs they draw, and the
settings plumbing (``hypothesis_settings``, :meth:`MachineBase.test_case`, the fake clock, the jobs
they enqueue).

The inputs are deliberately few (two queues, three workers, three idempotency keys, a handful of
priorities, delays and clock steps), so that random histories collide: keys repeat, leases race,
and clock steps land just before and just after a lease's expiry (``LEASE_TIMEOUT`` is 60 s, the
steps include 59 and 61 s).
"""

from __future__ import annotations

import unittest
from typing import ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from tether.adapters.clock import FakeClock
from tether.domain.job import Job, NewJob
from tether.domain.validation import prepare_job
from tether.ports.repository import JobRepository

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
#: The job types of the machines' jobs: every third job (by serial) is of the second type, so
#: a lease that asks for the first type alone passes over one now and then.
JOB_TYPES = ("machine.job", "machine.other")
#: The job types a worker's leases ask for (``JobRepository.lease(job_types=...)``), as a worker
#: pool with only some kinds of handler does; the others lease every type.  Tied to the worker
#: drawn rather than drawn apart, so the machines' draws (and so their reach within the budget)
#: stay what they were.
WORKER_JOB_TYPES: dict[str, tuple[str, ...]] = {"w2": ("machine.job",)}
KEYS = ("k1", "k2", "k3")
#: The concurrency keys of the jobs, by their serial in turn (no draw of its own, so the histories
#: the budget reaches stay as they were): the first two jobs share a key, so a per-key limit binds
#: early in a history; then another key, and a job without one.
CONCURRENCY_KEYS = (None, "c1", "c1", "c2")
#: The holder's writes (``snooze`` gives the job back due ``retry_delay`` seconds later;
#: ``time_out`` is a failure with a time limit's error).
WRITES = ("complete", "fail", "fail_permanent", "time_out", "dead_letter", "heartbeat", "release", "snooze")
#: The error of the ``time_out`` write (as a worker writes a ``JobTimeout``).
TIMEOUT_ERROR = "JobTimeout: timed out after 5 s"
#: One lease timeout for leases and heartbeats, so a heartbeat always moves the expiry forward.
LEASE_TIMEOUT = 60.0

queues = st.sampled_from(QUEUES)
priorities = st.sampled_from([-1, 0, 0, 5])
delays = st.one_of(st.none(), st.sampled_from([0, 1, 30, 90]))
max_attempts = st.integers(1, 3)
keys = st.one_of(st.none(), st.sampled_from(KEYS))
steps = st.sampled_from([0.5, 1, 5, 30, 59, 61, 120])
retry_delays = st.sampled_from([0, 1, 2, 30])
#: A lease's change of its first queue's controls: a running limit (1 to 3, so it binds often),
#: a rate limit ``(starts, per seconds)`` (one start a minute: windows the clock steps cross), a
#: per-key running limit ``("per_key", n)``, ``"clear"`` (all lifted), or none (None).
running_limits = st.sampled_from([None, "clear", 1, 2, 3, (1, 60.0), ("per_key", 1)])


class Rollback(Exception):
    """Raised inside a transaction to roll it back (the machines' rolled-back enqueues)."""


class MachineBase(RuleBasedStateMachine):
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
            JOB_TYPES[serial % 3 == 0], {"serial": serial}, now=self.clock.now(), queue=queue, priority=priority,
            delay=delay, max_attempts=attempts, idempotency_key=key,
            concurrency_key=CONCURRENCY_KEYS[serial % len(CONCURRENCY_KEYS)],
        )

    clock: FakeClock
    serial: int = 0


def describe(job: Job) -> str:
    """One line naming a job's id, status, attempts, due time and lease, for failure messages."""
    return (f"id={job.id} {job.status.value} attempts={job.attempts}/{job.max_attempts} "
            f"scheduled={job.scheduled_at.isoformat()} lease={job.lease_token and job.lease_token[:8]}")
