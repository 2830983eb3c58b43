"""The overview reads of the in-memory repository: the reference rules of :mod:`tether.domain.overview`
applied to its jobs under its lock (a memory store is small; nothing here is indexed)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime

from tether.domain.job import Job
from tether.domain.overview import (
    JobFilter,
    JobPage,
    QueueSummary,
    StatusTotals,
    Throughput,
    browse,
    count_finished,
    summarize_queues,
    total_by_status,
)
from tether.domain.timeutil import ensure_utc
from tether.ports.overview import JobOverview


class MemoryOverview(JobOverview):
    """:class:`~tether.ports.overview.JobOverview` for
    :class:`~tether.adapters.memory.InMemoryJobRepository` (a mixin: it supplies ``_jobs`` and ``_lock``)."""

    _jobs: dict[int, Job]
    _lock: threading.Condition

    def browse_jobs(self, filters: JobFilter, *, before_id: int | None, limit: int, window: int) -> JobPage:
        with self._lock:
            ids = sorted((i for i in self._jobs if before_id is None or i < before_id), reverse=True)
            return browse((self._jobs[i] for i in ids), filters, limit=limit, window=window)

    def status_totals(self, *, live: Sequence[QueueSummary] | None = None) -> StatusTotals:
        with self._lock:
            return total_by_status(list(self._jobs.values()), live)

    def queue_summaries(self, *, now: datetime) -> list[QueueSummary]:
        now = ensure_utc(now, "now")
        with self._lock:
            return summarize_queues(list(self._jobs.values()), now=now)

    def finished_per_minute(self, *, since: datetime, max_rows: int) -> Throughput:
        since = ensure_utc(since, "since")
        with self._lock:
            return count_finished(list(self._jobs.values()), since=since, max_rows=max_rows)


__all__ = ["MemoryOverview"]
