"""The polling dispatcher: workers lease due jobs straight from the repository.

No broker is involved: :meth:`PollingDispatcher.acquire` asks the repository for a lease and,
when the queues are idle, waits and asks again, doubling the wait from ``min_poll_interval`` up
to ``poll_interval`` seconds.  The idle wait of each worker id carries over from one ``acquire``
call to the next, so an idle worker settles at about one lease query per ``poll_interval``.

:meth:`notify` (called after an enqueue commits) and :meth:`wake` interrupt the wait of every
acquirer in this process at once; a notify also resets the idle backoff.  Workers in other
processes are not told anything: they find the job at their next poll, at most ``poll_interval``
seconds later.  Nothing is ever lost by a missed notification, since every poll reads the
repository, which is the truth (DESIGN.md, "Dispatch").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import datetime

from tether.domain.errors import ValidationError
from tether.domain.job import Job
from tether.domain.validation import validate_seconds
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

#: Most worker ids whose idle backoff the dispatcher remembers; past it the book starts over (a
#: long-lived process that runs pool after pool, each with a new id, keeps flat memory).
MAX_IDLE_WORKERS = 1024

class PollingDispatcher(Dispatcher):
    """Leases jobs by polling the repository, with an idle backoff.

    Args:
        repository: where jobs are leased (the port; any repository works).
        clock: supplies ``now`` for every lease.
        poll_interval: longest idle wait between two lease queries, in seconds (> 0).
        min_poll_interval: first idle wait after work was seen, in seconds (> 0, <= poll_interval).

    Raises:
        ValidationError: an interval is not a positive finite number, or min > max.
    """

    #: How worker pools on this dispatcher are listed in the worker registry.
    kind = "polling"
    #: :meth:`notify` only wakes this process's waiting workers: no I/O, so the async API may
    #: call it on an event loop (see :attr:`tether.ports.dispatcher.Dispatcher.notify_blocks`).
    notify_blocks = False

    def __init__(
        self,
        repository: JobRepository,
        clock: Clock,
        *,
        poll_interval: float = 1.0,
        min_poll_interval: float = 0.01,
    ) -> None:
        self.repository = repository
        self.clock = clock
        self.poll_interval = validate_seconds(poll_interval, "poll_interval", allow_zero=False)
        self.min_poll_interval = validate_seconds(min_poll_interval, "min_poll_interval", allow_zero=False)
        if self.min_poll_interval > self.poll_interval:
            raise ValidationError(
                "min_poll_interval", f"must be <= poll_interval ({self.poll_interval}), got {self.min_poll_interval}"
            )
        self._cond = threading.Condition()
        self._notified = 0  # bumped by notify(): new work was committed in this process
        self._woken = 0  # bumped by wake(): blocked acquirers return now
        self._idle_delay: dict[str, float] = {}  # worker id -> next idle wait, seconds
        self._closed = False

    def notify(self, jobs: Sequence[Job]) -> None:
        """Wake every waiting acquirer of this process and reset their idle backoff.  Never raises."""
        if jobs:
            self.work_arrived()

    def work_arrived(self) -> None:
        """Wake every waiting acquirer of this process to query now, and reset their idle backoff
        (what :meth:`notify` does; also called by wake-up sources such as PostgreSQL ``LISTEN``)."""
        with self._cond:
            self._notified += 1
            self._idle_delay.clear()
            self._cond.notify_all()

    def wake(self) -> None:
        """Make every blocked :meth:`acquire` return (with what it has, usually nothing) at once."""
        with self._cond:
            self._woken += 1
            self._cond.notify_all()

    def acquire(
        self,
        *,
        queues: Sequence[str] | None,
        worker_id: str,
        limit: int,
        lease_timeout: float,
        max_wait: float,
        listed_order: bool = False,
        job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """Lease up to ``limit`` due jobs for ``worker_id``, waiting up to ``max_wait`` seconds
        (``listed_order``, ``job_types``: as for ``JobRepository.lease``).

        Returns the leased jobs as soon as a lease query finds any; ``[]`` after ``max_wait``
        seconds without work, or at once after :meth:`wake`.

        Raises:
            StorageUnavailable: from the repository (the caller backs off).
        """
        if limit <= 0:
            return []
        deadline = time.monotonic() + max(float(max_wait), 0.0)
        with self._cond:
            woken = self._woken
        while True:
            with self._cond:
                notified = self._notified
                if self._closed or self._woken != woken:
                    return []
            jobs = self.repository.lease(
                queues=queues, worker_id=worker_id, now=self.clock.now(), lease_timeout=lease_timeout, limit=limit,
                **({"listed_order": True} if listed_order else {}),  # a repository of an older port lacks it
                **({} if job_types is None else {"job_types": job_types}),
            )
            if jobs:
                with self._cond:
                    self._idle_delay.pop(worker_id, None)
                return jobs
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            with self._cond:
                delay = self._idle_delay.get(worker_id, self.min_poll_interval)
                if self._notified == notified and self._woken == woken and not self._closed:
                    self._cond.wait(min(delay, remaining))
                if self._notified == notified:
                    if len(self._idle_delay) >= MAX_IDLE_WORKERS and worker_id not in self._idle_delay:
                        self._idle_delay.clear()  # workers that came and went: forget their backoff
                    self._idle_delay[worker_id] = min(delay * 2, self.poll_interval)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(poll_interval={self.poll_interval})"

    def leases_from(self, repository: JobRepository) -> bool:
        """True for this dispatcher's own repository: :meth:`acquire` only calls its ``lease``, so
        a worker pool on that repository may lease with ``complete_and_lease`` as well."""
        return repository is self.repository

    def maintain(self, now: datetime) -> None:
        """Nothing to maintain: every poll reads the repository."""

    def close(self) -> None:
        """Wake blocked acquirers; later ``acquire`` calls return ``[]`` at once.  The repository
        is not closed (it belongs to the caller)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


__all__ = ["MAX_IDLE_WORKERS", "PollingDispatcher"]
