"""A memory repository that counts the leases a worker pool takes outside the dispatcher's
acquire: the completion flush's refills (``complete_and_lease``) and by-id leases (``lease_job``).

Used by the prefetch tests (polling) and the refill tests (Redis Streams) to see that the flush
really leased, and what a stream entry cost when its job had been leased some other way.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime

from tether.adapters.memory import InMemoryJobRepository
from tether.domain.errors import LeaseLost
from tether.domain.job import Job


class CountingRepository(InMemoryJobRepository):
    """:class:`InMemoryJobRepository` that records its refills and by-id leases (thread-safe).

    Attributes:
        refills: one ``(completions written, jobs leased)`` pair per ``complete_and_lease`` call.
        refill_types: the ``job_types`` of each ``complete_and_lease`` call (None: not given).
        by_id: how many ``lease_job`` calls there were (whatever they returned).
    """

    def __init__(self) -> None:
        super().__init__()
        self.refills: list[tuple[int, int]] = []
        self.refill_types: list[tuple[str, ...] | None] = []  # the job types each refill asked (None: every type)
        self.by_id = 0
        self._counts_lock = threading.Lock()

    @property
    def refilled(self) -> int:
        """Jobs leased by every ``complete_and_lease`` call so far."""
        with self._counts_lock:
            return sum(leased for _, leased in self.refills)

    def lease_job(self, job_id: int, *, worker_id: str, now: datetime, lease_timeout: float) -> Job | None:
        with self._counts_lock:
            self.by_id += 1
        return super().lease_job(job_id, worker_id=worker_id, now=now, lease_timeout=lease_timeout)

    def complete_and_lease(
        self, items: Sequence[tuple[int, str]], *, now: datetime, queues: Sequence[str] | None, worker_id: str,
        lease_timeout: float, limit: int, listed_order: bool = False, job_types: Sequence[str] | None = None,
    ) -> tuple[list[Job | LeaseLost], list[Job]]:
        results, jobs = super().complete_and_lease(
            items, now=now, queues=queues, worker_id=worker_id, lease_timeout=lease_timeout, limit=limit,
            listed_order=listed_order, job_types=job_types,
        )
        with self._counts_lock:
            self.refills.append((len(items), len(jobs)))
            self.refill_types.append(None if job_types is None else tuple(job_types))
        return results, jobs
