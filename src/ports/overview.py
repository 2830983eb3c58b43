"""The overview port: the bounded reads an operator's dashboard makes of a store.

A port of its own, beside :class:`~tether.ports.repository.JobRepository` (as the worker registry
is): Tether's repositories (memory, SQLite, PostgreSQL) implement it; a third-party repository that
does not keeps working, and the dashboard then shows what the job port alone can tell.

Every read is bounded whatever the table's size: pages walk ids (keyset, never an offset), live
statuses are read through their partial indexes, and everything else through a bounded window.
Nothing here is on the lease or completion path.  The rules each answer follows are in
:mod:`tether.domain.overview`; :mod:`tether.testing.contract.overview` checks them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from tether.domain.job import Job
from tether.domain.overview import LIVE_STATUSES, JobFilter, JobPage, QueueSummary, StatusTotals, Throughput, summarize_queues
from tether.ports.repository import JobRepository

#: Jobs per ``list_jobs`` page when a store without this port is summarised.
LIST_PAGE = 1000


@runtime_checkable
class JobOverview(Protocol):
    """Reads jobs for people: pages by id, live counts per queue, totals, finished jobs per minute."""

    def browse_jobs(self, filters: JobFilter, *, before_id: int | None, limit: int, window: int) -> JobPage:
        """The jobs matching ``filters`` with an id below ``before_id`` (None: any), newest first,
        at most ``limit`` (1-500) of them.  With a live status in ``filters`` every older match is
        reachable through the status's partial index; otherwise only the ``window`` (1-100,000)
        highest ids below ``before_id`` are looked at, and the page says so when it stopped there
        (:class:`~tether.domain.overview.JobPage`).  Jobs carry their lease token: callers that
        show them strip it.

        Raises:
            StorageUnavailable: the store could not be reached.
        """
        ...

    def status_totals(self, *, live: Sequence[QueueSummary] | None = None) -> StatusTotals:
        """Jobs per status: exact for queued, retrying and running; completed, dead and cancelled
        may be planner estimates, named in ``estimated`` (PostgreSQL), exact elsewhere.  With
        ``live`` (summaries just read by :meth:`queue_summaries`) the live figures are their sums
        and the live jobs are not read a second time.

        Raises:
            StorageUnavailable: the store could not be reached.
        """
        ...

    def queue_summaries(self, *, now: datetime) -> list[QueueSummary]:
        """One summary per queue holding live jobs (queued, retrying, running), by queue name;
        due means ``scheduled_at <= now`` (aware UTC).  Reads only live jobs (SQL: through the
        live partial indexes), cheap enough for every metrics scrape and every live snapshot.

        Raises:
            ValidationError: a naive ``now``.
            StorageUnavailable: the store could not be reached.
        """
        ...

    def finished_per_minute(self, *, since: datetime, max_rows: int) -> Throughput:
        """Completed, dead and cancelled jobs per minute of ``finished_at``, from ``since`` (aware
        UTC) on, counting the newest ``max_rows`` (>= 1) rows at most (``capped`` says when more
        finished).

        Raises:
            ValidationError: a naive ``since``.
            StorageUnavailable: the store could not be reached.
        """
        ...


def queue_summaries_of(repository: JobRepository, *, now: datetime) -> list[QueueSummary]:
    """The queue summaries of any store at ``now`` (aware UTC): its own :meth:`JobOverview.queue_summaries`
    when it has this port; otherwise its live jobs paged through ``list_jobs``
    (:data:`LIST_PAGE` at a time; a job that changes status meanwhile may be counted under
    either status) and summarised by :func:`~tether.domain.overview.summarize_queues`.

    Raises:
        ValidationError: a naive ``now``.
        StorageUnavailable: the store could not be reached.
    """
    if isinstance(repository, JobOverview):
        return repository.queue_summaries(now=now)
    return summarize_queues(_live_jobs(repository), now=now)


def _live_jobs(repository: JobRepository) -> Iterator[Job]:
    for status in LIVE_STATUSES:
        offset = 0
        while True:
            page = repository.list_jobs(status=status, limit=LIST_PAGE, offset=offset)
            yield from page
            if len(page) < LIST_PAGE:
                break
            offset += len(page)


__all__ = ["LIST_PAGE", "JobOverview", "queue_summaries_of"]
