"""The worker pool's heartbeat thread: extends the lease of every job the pool holds.

Every ``interval`` seconds :meth:`Heartbeats.beat_once` extends each held lease to
``now + lease_timeout``: running jobs, prefetched jobs waiting for a thread, and jobs whose
outcome is being written (waiting in a completion batch, or retried after a storage error).
A heartbeat's answer that carries an operator's cancellation request cancels that job's context
(:meth:`~tether.entrypoints.context.JobContext.observe`): the handler sees ``ctx.cancelled`` within
one interval, with no extra round trip.  A refused heartbeat (``LeaseLost``: the reaper or another
worker took the job) cancels that job's context and is counted; for a job whose outcome is being written it changes nothing, as that
write reports its own result.  Any other error is logged (rate-limited) and the lease is tried
again at the next beat.  After each pass the thread runs its ``on_beat`` callback, if given: the pool
refreshes its worker registry entry there (:mod:`.presence`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import attrs
from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import LeaseLost
from tether.domain.failure import describe_failure
from tether.entrypoints.job_logs import job_fields
from tether.entrypoints.worker.held import HeldJobs
from tether.entrypoints.worker.stats import Counts
from tether.entrypoints.worker.supervision import SupervisedThread
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")


@attrs.frozen
class Beat:
    """What one pass of :meth:`Heartbeats.beat_once` did (counts of jobs).

    Attributes:
        extended: leases extended.
        lost: heartbeats refused by the fence (those jobs' contexts were cancelled).
        failed: heartbeats that failed otherwise (tried again at the next beat).
    """

    extended: int = 0
    lost: int = 0
    failed: int = 0


class Heartbeats:
    """The ``tether-heartbeat`` thread of a pool.

    Args:
        held: the pool's held jobs.
        counts: where refused heartbeats are counted (``lease_lost``).
        repository, clock: where and when leases are extended.
        interval: seconds between two passes (> 0, checked by the pool).
        lease_timeout: seconds each extended lease lasts from now.
        worker_id: for logs.
        ratelog: the pool's rate-limited log.
        on_beat: called after each pass, on this thread (what it raises is logged).
        spawn: builds the thread (``spawn(name, loop, stopped=...)``; the pool's supervisor).
    """

    def __init__(
        self,
        *,
        held: HeldJobs,
        counts: Counts,
        repository: JobRepository,
        clock: Clock,
        interval: float,
        lease_timeout: float,
        worker_id: str,
        ratelog: RateLimitedLog,
        on_beat: Callable[[], object] | None = None,
        spawn: Callable[..., SupervisedThread] = SupervisedThread,
    ) -> None:
        self._held = held
        self._counts = counts
        self._repository = repository
        self._clock = clock
        self._interval = interval
        self._lease_timeout = lease_timeout
        self._worker_id = worker_id
        self._ratelog = ratelog
        self._on_beat = on_beat
        self._stop = threading.Event()
        self._thread = spawn("tether-heartbeat", self._run, stopped=self._stop.is_set)

    def start(self) -> None:
        """Start the thread (a daemon); the first pass runs one ``interval`` from now."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end (after the pass in progress, if any)."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end."""
        self._thread.join(timeout)

    def beat_once(self) -> Beat:
        """Extend the lease of every job held now, one ``heartbeat`` call each; never raises."""
        extended = lost = failed = 0
        for entry in self._held.snapshot():
            with entry.lock:
                if entry.released:
                    continue
                try:
                    entry.ctx.observe(self._repository.heartbeat(  # an operator's cancel rides on the answer
                        entry.job.id, entry.token, now=self._clock.now(), lease_timeout=self._lease_timeout
                    ))
                    extended += 1
                except LeaseLost:
                    if entry.finishing:  # its outcome write landed first, or will report LeaseLost itself
                        continue
                    lost += 1
                    entry.ctx.mark_lease_lost()
                    entry.lost_counted = True
                    self._counts.count("lease_lost")
                    logger.warning(
                        "worker %s: heartbeat refused for job %s: lease lost (the reaper or another worker took it); "
                        "the handler's context is cancelled and its outcome will not be recorded",
                        self._worker_id, entry.job.id, extra=job_fields(entry.job, self._worker_id),
                    )
                except BaseException as exc:  # noqa: BLE001 - retry at the next beat (asyncio.CancelledError too)
                    failed += 1
                    self._ratelog(
                        "heartbeat", logging.WARNING, "worker %s: heartbeat of job %s failed (%s); retrying next beat",
                        self._worker_id, entry.job.id, describe_failure(exc, 500),
                    )
        return Beat(extended, lost, failed)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.beat_once()
            if self._on_beat is not None:
                try:
                    self._on_beat()
                except BaseException:  # noqa: BLE001 - the next beat comes anyway
                    self._ratelog("on-beat", logging.ERROR, "worker %s: the after-heartbeat pass failed",
                                  self._worker_id, exc_info=True)


__all__ = ["Beat", "Heartbeats"]
