"""Rows that make a batch fail: which jobs to leave out of batch leases and reaps for a while.

A batch statement (a lease, a reap pass, a completion flush) fails whole when one of its rows is
refused (:class:`~tether.domain.errors.StorageRowError`: a user's trigger raising, a constraint,
a row the server cannot read).  The repository then does the batch again row by row, so the
other rows go through, and records each row that failed alone here: that job is *skipped*, left
out of batch leases and reaps (their statements take an ``id <> ALL(skipped)`` filter, only while
something is skipped) for :data:`SKIP_SECONDS` seconds, doubling each time it fails again up to
the cap, so a row that keeps failing costs one row-by-row pass per period instead of slowing every
lease.  Once its time is up it is tried in a batch again; it leaves the book when a row-by-row
write of it succeeds, or when the book is full (:data:`MAX_SKIPPED`, oldest first).

One book per repository object (per process); thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("tether.storage")

#: First and longest time, in seconds, a job whose row failed alone is left out of batches.
SKIP_SECONDS = (5.0, 300.0)
#: Most jobs the book holds; beyond it the oldest entry is dropped (it is tried again).
MAX_SKIPPED = 1_000


class SkippedRows:
    """The jobs whose rows failed alone, and until when each is left out of batches (monotonic seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: dict[int, float] = {}
        self._strikes: dict[int, int] = {}

    def ids(self) -> list[int]:
        """The jobs to leave out of batch statements now (sorted; usually empty: a cheap check)."""
        if not self._until:
            return []
        now = time.monotonic()
        with self._lock:
            for job_id in [j for j, until in self._until.items() if until <= now]:
                del self._until[job_id]  # tried in a batch again; its strikes stay until it succeeds
            return sorted(self._until)

    def failed(self, job_id: int, doing: str, error: BaseException) -> float:
        """The row of ``job_id`` failed alone: skip it, for twice as long as last time; returns
        the seconds.  Logged as a warning naming the job and the error."""
        with self._lock:
            strikes = self._strikes.get(job_id, 0) + 1
            seconds = min(SKIP_SECONDS[0] * 2 ** (strikes - 1), SKIP_SECONDS[1])
            self._strikes[job_id] = strikes
            self._until[job_id] = time.monotonic() + seconds
            while len(self._until) > MAX_SKIPPED:
                oldest = next(iter(self._until))
                del self._until[oldest]
                self._strikes.pop(oldest, None)
            while len(self._strikes) > 2 * MAX_SKIPPED:
                self._strikes.pop(next(iter(self._strikes)))
        logger.warning(
            "could not %s for job %s alone (%s); the other rows of its batch went through, and job %s is left out "
            "of batches for %.0f s", doing, job_id, error, job_id, seconds,
        )
        return seconds

    def succeeded(self, job_id: int) -> None:
        """A row-by-row write of ``job_id`` went through: forget its strikes."""
        if job_id in self._strikes:
            with self._lock:
                self._strikes.pop(job_id, None)
                self._until.pop(job_id, None)


__all__ = ["MAX_SKIPPED", "SKIP_SECONDS", "SkippedRows"]
