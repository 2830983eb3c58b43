"""Maintenance: the reaper (expired leases back to retrying/dead) and purge of finished jobs.

The reaper is what keeps the promise that a job is never lost to a dead worker: a running job
whose own lease expired (no heartbeat came in time) counts as a failed attempt and goes back to
``retrying``, due at once, or to ``dead`` when its attempts are used up (DESIGN.md, "The job
state machine"; cases C04-C06).  Each write is a compare-and-set on the lease the reaper read,
so a job that finished or was re-leased meanwhile is left alone.

:class:`MaintenanceLoop` is the thread a worker pool runs: the reaper every ``reap_interval``
seconds, and the dispatcher's own upkeep (:meth:`Dispatcher.maintain`) every
``maintain_interval`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.timeutil import ensure_utc
from tether.domain.validation import validate_seconds
from tether.entrypoints.job_logs import job_fields
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.maintenance")

#: How many expired leases one repository call takes back; the reaper loops until a batch is short.
REAP_BATCH = 100


class Reaper:
    """Takes back jobs whose lease expired, and tells the dispatcher about the ones that will retry.

    Args:
        repository: the job store.
        clock: supplies ``now``.
        dispatcher: told (after the write) about reaped jobs that are ``retrying``, so a broker-based
            dispatcher can publish them; None to tell nobody.
        batch_size: jobs per ``repository.reap`` call.
        max_batches: at most this many calls per :meth:`run_once` (bounds one pass).
    """

    def __init__(
        self,
        repository: JobRepository,
        clock: Clock,
        dispatcher: Dispatcher | None = None,
        *,
        batch_size: int = REAP_BATCH,
        max_batches: int = 100,
    ) -> None:
        self.repository = repository
        self.clock = clock
        self.dispatcher = dispatcher
        self.batch_size = batch_size
        self.max_batches = max_batches

    def run_once(self) -> list[Job]:
        """One reaper pass: every job whose lease expired at or before now, as written.

        Raises:
            StorageUnavailable: the repository could not be reached (nothing more was reaped).
        """
        reaped: list[Job] = []
        for _ in range(self.max_batches):
            batch = self.repository.reap(now=self.clock.now(), limit=self.batch_size)
            reaped.extend(batch)
            if len(batch) < self.batch_size:
                break
        for job in reaped:
            logger.warning(
                "reaped job %s (%s) from %s: attempt %s/%s, now %s",
                job.id, job.job_type, job.queue, job.attempts, job.max_attempts, job.status.value,
                extra=job_fields(job, None),
            )
        retrying = [j for j in reaped if j.status is JobStatus.RETRYING]
        if retrying and self.dispatcher is not None:
            try:
                self.dispatcher.notify(retrying)
            except BaseException:
                logger.exception("dispatcher notify failed for %d reaped jobs (they will be found by the next poll or sweep)", len(retrying))
        return reaped


def purge_cutoff(older_than: object, now: datetime) -> datetime:
    """The instant before which finished jobs are purged.

    Args:
        older_than: an aware datetime (that instant), or a timedelta >= 0 (that long before ``now``).

    Raises:
        ValidationError (field ``older_than``): anything else, a naive datetime, a negative
            timedelta, one reaching before the year 1.
    """
    if isinstance(older_than, timedelta):
        if older_than < timedelta(0):
            raise ValidationError("older_than", f"must be a timedelta >= 0, got {older_than}")
        try:
            return now - older_than
        except OverflowError:
            raise ValidationError("older_than", f"{older_than} before {now.isoformat()} is before the year 1") from None
    if isinstance(older_than, datetime):
        return ensure_utc(older_than, "older_than")
    raise ValidationError("older_than", f"must be an aware datetime or a timedelta, got {type(older_than).__name__}")


def purge_finished(repository: JobRepository, clock: Clock, older_than: datetime | timedelta) -> int:
    """Delete completed, dead and cancelled jobs whose ``finished_at`` is before the cutoff (see
    :func:`purge_cutoff`); returns how many.  Their idempotency keys become free again.

    Raises:
        ValidationError: bad ``older_than``; nothing deleted.
    """
    cutoff = purge_cutoff(older_than, clock.now())
    count = repository.purge(older_than=cutoff)
    logger.info("purged %d finished jobs that finished before %s", count, cutoff.isoformat())
    return count


class MaintenanceLoop:
    """A daemon thread running the reaper and the dispatcher's upkeep periodically.

    Errors of one pass are logged (at most about once a second) and the loop goes on.

    Args:
        reaper: the reaper to run.
        dispatcher: whose :meth:`~tether.ports.dispatcher.Dispatcher.maintain` to call.
        reap_interval: seconds between reaper passes (> 0); the first pass runs at start.
        maintain_interval: seconds between ``dispatcher.maintain(now)`` calls (> 0); the
            dispatcher applies its own cadence (e.g. a sweep interval) on top.
        name: the thread name.
        spawn: builds the thread, ``spawn(name, loop, stopped=...)`` returning an object with
            ``start``, ``is_alive`` and ``join`` (a worker pool passes its supervisor's); default a
            plain daemon thread.

    Raises:
        ValidationError: an interval that is not a finite number of seconds > 0.
    """

    def __init__(
        self,
        reaper: Reaper,
        dispatcher: Dispatcher,
        *,
        reap_interval: float,
        maintain_interval: float = 1.0,
        name: str = "tether-maintenance",
        spawn: Callable[..., Any] | None = None,
    ) -> None:
        self.reaper = reaper
        self.dispatcher = dispatcher
        self.reap_interval = validate_seconds(reap_interval, "reap_interval", allow_zero=False)
        self.maintain_interval = validate_seconds(maintain_interval, "maintain_interval", allow_zero=False)
        self.reaped = 0
        self._stop = threading.Event()
        if spawn is None:
            self._thread: Any = threading.Thread(target=self._run, name=name, daemon=True)
        else:
            self._thread = spawn(name, self._run, stopped=self._stop.is_set)
        self._ratelog = RateLimitedLog(logger)
        self._running_in: threading.Thread | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Ask the loop to end and wait up to ``timeout`` seconds for the pass in progress."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._running_in:
            self._thread.join(timeout)

    def _log_error(self, what: str) -> None:
        # One key for both passes: at most one line a second from this loop, as before.
        self._ratelog("pass", logging.ERROR, "%s failed; retrying at the next pass", what, exc_info=True)

    def _run(self) -> None:
        self._running_in = threading.current_thread()
        next_reap = time.monotonic()
        next_maintain = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_reap:
                next_reap = now + self.reap_interval
                try:
                    self.reaped += len(self.reaper.run_once())
                except BaseException:  # noqa: BLE001 - the loop outlives any one pass (asyncio.CancelledError too)
                    self._log_error("reaper pass")
            if now >= next_maintain:
                next_maintain = now + self.maintain_interval
                try:
                    self.dispatcher.maintain(self.reaper.clock.now())
                except BaseException:  # noqa: BLE001
                    self._log_error("dispatcher maintenance")
            self._stop.wait(max(min(next_reap, next_maintain) - time.monotonic(), 0.0))


__all__ = ["REAP_BATCH", "MaintenanceLoop", "Reaper", "purge_cutoff", "purge_finished"]
