"""What an operator's overview reads from a store, and the rules every store answers it by.

An overview never loads a whole table: jobs are browsed newest first by id (keyset pagination,
never an offset), and a filter that no partial index serves looks at a bounded window of ids per
page; live jobs (queued, retrying, running) are counted exactly, finished ones may be estimates
(marked as such); the jobs finished per minute are read from at most ``max_rows`` rows.

The pure functions here (:func:`browse`, :func:`summarize_queues`, :func:`count_finished`,
:func:`total_by_status`) are the reference answers: the in-memory store uses them, and the
contract suite (:mod:`tether.testing.contract.overview`) holds every store to them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

import attrs
from tether.domain.job import Job, JobStatus

LIVE_STATUSES = (JobStatus.QUEUED, JobStatus.RETRYING, JobStatus.RUNNING)
#: The most jobs one page shows.
MAX_PAGE_LIMIT = 500
#: How many ids a page looks at when its filter has no live status (no partial index serves it).
DEFAULT_WINDOW = 10_000
MAX_WINDOW = 100_000
#: The most finished rows one throughput read counts (the newest ones; the answer says when it stopped there).
DEFAULT_FINISHED_ROWS = 100_000


@attrs.frozen
class JobFilter:
    """Which jobs a page lists: all of them, or those of one status, queue and/or job type."""

    status: JobStatus | None = None
    queue: str | None = None
    job_type: str | None = None

    @property
    def uses_live_index(self) -> bool:
        """True when the status is a live one: its partial index bounds the read, no window needed."""
        return self.status in LIVE_STATUSES

    def matches(self, job: Job) -> bool:
        return (
            (self.status is None or job.status is self.status)
            and (self.queue is None or job.queue == self.queue)
            and (self.job_type is None or job.job_type == self.job_type)
        )


@attrs.frozen
class JobPage:
    """One page of jobs, newest (highest id) first.

    ``next_before_id``: pass it as ``before_id`` for the next page; None when no older job can
    match.  ``window_limited``: the page stopped at its window of ids, not because older jobs ran
    out, so it may hold fewer than ``limit`` jobs while older matches exist.
    """

    jobs: tuple[Job, ...]
    next_before_id: int | None
    window_limited: bool = False


@attrs.frozen
class QueueSummary:
    """The live jobs of one queue: how many are queued, retrying (waiting for a retry) and running,
    how many of the waiting ones are due, and the due time of the oldest due one (aware UTC; None
    when none is due), whose age is the queue's latency."""

    queue: str
    queued: int = 0
    retrying: int = 0
    running: int = 0
    due: int = 0
    oldest_due_at: datetime | None = None

    def latency(self, now: datetime) -> float | None:
        """Seconds the oldest due job has waited at ``now``; None when none is due."""
        if self.oldest_due_at is None:
            return None
        return max(0.0, (now - self.oldest_due_at).total_seconds())


@attrs.frozen
class StatusTotals:
    """Jobs per status (every status present); ``estimated`` names those whose figure is the
    database planner's estimate rather than an exact count."""

    counts: Mapping[JobStatus, int]
    estimated: frozenset[JobStatus] = frozenset()


@attrs.frozen
class FinishedMinute:
    """Jobs that finished within one minute starting at ``minute`` (aware UTC, whole minute)."""

    minute: datetime
    completed: int = 0
    dead: int = 0
    cancelled: int = 0


@attrs.frozen
class Throughput:
    """Finished jobs per minute, oldest minute first (only minutes with at least one job).
    ``capped``: more rows finished in the period than were counted; the oldest minutes are short."""

    minutes: tuple[FinishedMinute, ...]
    capped: bool = False


def browse(jobs_newest_first: Iterable[Job], filters: JobFilter, *, limit: int, window: int) -> JobPage:
    """The page of ``jobs_newest_first`` (already limited to ids below the cursor) that a store
    must return: see :class:`JobPage` and :meth:`tether.ports.overview.JobOverview.browse_jobs`."""
    floor = None
    if not filters.uses_live_index:
        looked_at = list(itertools.islice(jobs_newest_first, window))
        jobs_newest_first = looked_at
        if looked_at and len(looked_at) == window:
            floor = looked_at[-1].id
    matches = itertools.islice((j for j in jobs_newest_first if filters.matches(j)), limit + 1)
    return page_of(list(matches), limit=limit, window_floor=floor)


def page_of(jobs: Sequence[Job], *, limit: int, window_floor: int | None) -> JobPage:
    """The page made of up to ``limit + 1`` matching jobs read newest first; ``window_floor`` is
    the lowest id of a window that was full (None: no window, or it reached the first job)."""
    if len(jobs) > limit:
        return JobPage(tuple(jobs[:limit]), jobs[limit - 1].id)
    if window_floor is not None:
        return JobPage(tuple(jobs), window_floor, window_limited=True)
    return JobPage(tuple(jobs), None)


def minute_of(moment: datetime) -> datetime:
    """The start of ``moment``'s minute."""
    return moment.replace(second=0, microsecond=0)


def count_finished(jobs: Iterable[Job], *, since: datetime, max_rows: int) -> Throughput:
    """Jobs of ``jobs`` finished at or after ``since``, per minute, counting only the newest
    ``max_rows`` of them (see :class:`Throughput`)."""
    finished = sorted(
        (j for j in jobs if j.finished_at is not None and j.finished_at >= since and j.status.is_terminal),
        key=lambda j: j.finished_at or since,
        reverse=True,
    )
    capped = len(finished) > max_rows
    per_minute: dict[datetime, dict[JobStatus, int]] = {}
    for job in finished[:max_rows]:
        assert job.finished_at is not None
        counts = per_minute.setdefault(minute_of(job.finished_at), {})
        counts[job.status] = counts.get(job.status, 0) + 1
    return Throughput(tuple(minute_row(minute, per_minute[minute]) for minute in sorted(per_minute)), capped)


def minute_row(minute: datetime, counts: Mapping[JobStatus, int]) -> FinishedMinute:
    return FinishedMinute(
        minute,
        completed=counts.get(JobStatus.COMPLETED, 0),
        dead=counts.get(JobStatus.DEAD, 0),
        cancelled=counts.get(JobStatus.CANCELLED, 0),
    )


def summarize_queues(jobs: Iterable[Job], *, now: datetime) -> list[QueueSummary]:
    """One :class:`QueueSummary` per queue holding live jobs, by queue name."""
    summaries: dict[str, QueueSummary] = {}
    for job in jobs:
        if job.status not in LIVE_STATUSES:
            continue
        summary = summaries.get(job.queue) or QueueSummary(job.queue)
        changes: dict[str, object] = {job.status.value: getattr(summary, job.status.value) + 1}
        if job.status.is_leasable and job.scheduled_at <= now:
            changes["due"] = summary.due + 1
            if summary.oldest_due_at is None or job.scheduled_at < summary.oldest_due_at:
                changes["oldest_due_at"] = job.scheduled_at
        summaries[job.queue] = attrs.evolve(summary, **changes)  # type: ignore[arg-type]
    return [summaries[name] for name in sorted(summaries)]


def total_by_status(jobs: Iterable[Job], live: Sequence[QueueSummary] | None = None) -> StatusTotals:
    """Exact counts per status; the live ones summed from ``live`` when given."""
    counts = {s: 0 for s in JobStatus}
    for job in jobs:
        if live is None or job.status.is_terminal:
            counts[job.status] += 1
    if live is not None:
        counts.update(live_counts(live))
    return StatusTotals(counts)


def live_counts(summaries: Iterable[QueueSummary]) -> dict[JobStatus, int]:
    """Queued, retrying and running jobs summed over ``summaries``."""
    counts = dict.fromkeys(LIVE_STATUSES, 0)
    for summary in summaries:
        for status in LIVE_STATUSES:
            counts[status] += getattr(summary, status.value)
    return counts


def throughput_since(now: datetime, minutes: int = 60) -> datetime:
    """The start of the chart's period: the minute ``minutes - 1`` minutes before ``now``'s."""
    return minute_of(now) - timedelta(minutes=minutes - 1)


__all__ = [
    "DEFAULT_FINISHED_ROWS",
    "DEFAULT_WINDOW",
    "LIVE_STATUSES",
    "MAX_PAGE_LIMIT",
    "MAX_WINDOW",
    "FinishedMinute",
    "JobFilter",
    "JobPage",
    "QueueSummary",
    "StatusTotals",
    "Throughput",
    "browse",
    "count_finished",
    "live_counts",
    "minute_of",
    "minute_row",
    "page_of",
    "summarize_queues",
    "throughput_since",
    "total_by_status",
]
