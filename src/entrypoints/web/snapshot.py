"""What the dashboard reads from the store: the overview snapshot (totals, queues, finished jobs per
minute, workers) and pages of jobs, through the overview port when the store has one and through
the ``Tether`` API otherwise.  Every job shown passes through ``without_token``."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

import attrs
from tether.domain.errors import ConfigurationError, JobNotFound, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.lease import without_token
from tether.domain.overview import (
    DEFAULT_FINISHED_ROWS,
    DEFAULT_WINDOW,
    JobPage,
    QueueSummary,
    StatusTotals,
    Throughput,
)
from tether.domain.workers import WorkerEntry
from tether.entrypoints.durations import format_duration
from tether.entrypoints.service import Tether
from tether.entrypoints.web.chart_minutes import ChartMinutes
from tether.entrypoints.web.params import JobsQuery
from tether.ports.overview import JobOverview

#: Seconds a chart of finished jobs is reused before it is read again (it covers an hour).
THROUGHPUT_REFRESH = 10.0


@attrs.frozen
class Snapshot:
    """The overview at ``taken_at`` (aware UTC).  ``queues``/``throughput``/``workers`` are empty or
    None where the store cannot tell (no overview port, no worker registry)."""

    taken_at: datetime
    totals: StatusTotals
    queues: tuple[QueueSummary, ...] = ()
    throughput: Throughput | None = None
    workers: tuple[WorkerEntry, ...] | None = None

    def as_json(self) -> dict[str, Any]:
        """The figures the live script puts into the page (names as its ``data-live`` attributes use them)."""
        figures: dict[str, Any] = {f"status.{s.value}": n for s, n in self.totals.counts.items()}
        for q in self.queues:
            latency = q.latency(self.taken_at)
            figures.update({
                f"queue.{q.queue}.queued": q.queued,
                f"queue.{q.queue}.retrying": q.retrying,
                f"queue.{q.queue}.running": q.running,
                f"queue.{q.queue}.due": q.due,
                f"queue.{q.queue}.latency": format_duration(latency),
            })
        if self.workers is not None:
            figures["workers.alive"] = sum(1 for w in self.workers if not w.gone)
            figures["workers.gone"] = sum(1 for w in self.workers if w.gone)
        return {"taken_at": self.taken_at.isoformat(), "figures": figures,
                "estimated": sorted(s.value for s in self.totals.estimated)}


class StoreReader:
    """The dashboard's reads of one app's store (thread-safe; called from Starlette's thread pool)."""

    def __init__(self, app: Tether, *, window: int = DEFAULT_WINDOW, finished_rows: int = DEFAULT_FINISHED_ROWS) -> None:
        self.app = app
        self.overview: JobOverview | None = app.repository if isinstance(app.repository, JobOverview) else None
        self.window = window
        self.finished_rows = finished_rows
        self._chart_lock = threading.Lock()
        self._chart: tuple[float, Throughput] | None = None
        self._minutes = None if self.overview is None else ChartMinutes(self.overview, max_rows=finished_rows)

    def snapshot(self) -> Snapshot:
        """Totals, queues, the chart (reused for :data:`THROUGHPUT_REFRESH` s) and the registry, now."""
        now = self.app.clock.now()
        workers = self.workers()
        if self.overview is None:
            return Snapshot(now, StatusTotals(self.app.counts()), workers=workers)
        queues = tuple(self.overview.queue_summaries(now=now))
        return Snapshot(now, self.overview.status_totals(live=queues), queues, self.throughput(now), workers)

    def throughput(self, now: datetime) -> Throughput | None:
        """Finished jobs per minute over the hour up to ``now``, reused for :data:`THROUGHPUT_REFRESH`
        seconds and read incrementally (:class:`~tether.entrypoints.web.chart_minutes.ChartMinutes`);
        None when the store has no overview port."""
        if self._minutes is None:
            return None
        with self._chart_lock:
            if self._chart is not None and time.monotonic() - self._chart[0] < THROUGHPUT_REFRESH:
                return self._chart[1]
            chart = self._minutes.read(now)
            self._chart = (time.monotonic(), chart)
            return chart

    def workers(self) -> tuple[WorkerEntry, ...] | None:
        try:
            return tuple(self.app.workers())
        except ConfigurationError:
            return None

    def jobs(self, query: JobsQuery) -> JobPage | None:
        """One page of ``/jobs``, lease tokens stripped; None when the store cannot browse."""
        if self.overview is None:
            return None
        page = self.overview.browse_jobs(query.filters, before_id=query.before, limit=query.limit, window=self.window)
        return attrs.evolve(page, jobs=tuple(without_token(j) for j in page.jobs))

    def job(self, job_id: int) -> Job:
        """One job (token stripped).  Raises JobNotFound."""
        return self.app.get(job_id)

    def find(self, text: str) -> Job | None:
        """The job whose id or idempotency key is ``text``, or None."""
        if text.isascii() and text.isdigit() and len(text) <= 19:
            try:
                return self.app.get(int(text))
            except (JobNotFound, ValidationError):
                pass  # not the id of a stored job: try it as a key
        try:
            return self.app.find_by_key(text)
        except ValidationError:
            return None


LIVE_ORDER = (JobStatus.QUEUED, JobStatus.RETRYING, JobStatus.RUNNING)

__all__ = ["LIVE_ORDER", "THROUGHPUT_REFRESH", "Snapshot", "StoreReader"]
