"""The flush step of the repository state machine: a holder's completion written as a worker
pool's completion flush writes it, ``complete_and_lease`` with the next lease, in the store and the
model alike.

A mixin of :class:`~tether.testing.statemachine.repository_machine.RepositoryStateMachine` (which
supplies the clock, the repository, the model and its bookkeeping).  It holds no rule: the
machine's ``holder_write`` rule sends every other completion here, so the machine's rules and the
draws of its derandomized histories stay as they were.
"""

from __future__ import annotations

from typing import Any, ClassVar

from tether.domain.job import Job
from tether.testing.model import JobModel
from tether.testing.statemachine.base import LEASE_TIMEOUT, describe


class FlushSteps:
    """``_complete_and_lease``: one completion and a lease of one more, for the same worker."""

    clock: Any
    repository: Any
    model: JobModel
    ids: dict[int, int]
    worker_job_types: ClassVar[dict[str, tuple[str, ...]]]
    limited_queues_last: ClassVar[bool]

    _check: Any  # (job, expected model job) -> None
    _ordinal: Any  # job -> its model ordinal
    _leased: Any  # (job, worker, now) -> None: the lease recorded in the model and checked

    def _complete_and_lease(self, ordinal: int, token: str, worker: str | None) -> None:
        """The holder's completion as a worker pool's flush writes it: ``complete_and_lease`` of the
        job and a lease of one more for the same worker, of that worker's job types (the model:
        the completion, then its lease order)."""
        assert worker is not None
        now = self.clock.now()
        job_types = self.worker_job_types.get(worker)
        done = self.model.complete(ordinal, token, now=now)
        expected = self.model.next_leases(
            now=now, queues=None, limit=1, limited_last=self.limited_queues_last, job_types=job_types,
        )
        results, got = self.repository.complete_and_lease(
            [(self.ids[ordinal], token)], now=now, queues=None, worker_id=worker, lease_timeout=LEASE_TIMEOUT,
            limit=1, **({} if job_types is None else {"job_types": list(job_types)}),  # type: ignore[arg-type]
        )
        [result] = results
        assert isinstance(result, Job), f"complete_and_lease of #{ordinal} answered {result!r}"
        self._check(result, done)
        leased = [self._ordinal(j) for j in got]
        assert leased == expected, (
            f"complete_and_lease leased {[describe(j) for j in got]}, the model's lease order says ordinals {expected}")
        for leased_job in got:
            self._leased(leased_job, worker, now)


__all__ = ["FlushSteps"]
