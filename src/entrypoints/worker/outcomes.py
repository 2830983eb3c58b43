"""Writing the outcome of a job the pool holds, under its lease's fence; shared by every runner.

:func:`~tether.entrypoints.execution.execute_job` calls the handler and decides the outcome; it
writes through an :class:`~tether.entrypoints.execution.OutcomeWriter`, and :class:`Outcomes`
gives it the pool's rules for one held job (:meth:`Outcomes.writer`):

- **whether to write at all** (:meth:`Outcomes.begin_finish`): not for a job released at shutdown,
  nor once its lease is known lost (a ``LeaseLost`` seen by the handler's own ``ctx.heartbeat()``
  is counted here, once), nor for a handler past its time limit (:mod:`.timeouts` writes its
  ``JobTimeout`` failure instead: a late completion is never recorded);
- **completions go to the batcher** (:mod:`tether.entrypoints.worker.completions`): the same
  fenced write, in one ``complete_many`` with the other threads' completions.  The job stays held
  (and heartbeated) until its write returned; only then is it counted (:meth:`Outcomes.completed`)
  and finished.  When the batcher is closed the completion is written here instead;
- **every other write** (``fail``, ``dead_letter``; a completion the batcher refused) runs in the
  caller's thread (:meth:`Outcomes.write`): ``StorageUnavailable`` is retried with backoff for at
  most :data:`WRITE_RETRY_SECONDS` and never past the lease expiry (the reaper owns the job then);
  ``LeaseLost`` is logged and counted, never raised: the job belongs to someone else now;
- **after the write** (:meth:`Outcomes.record`): the outcome is counted (``cancelled`` when the
  write recorded that: an operator cancelled the job while it ran), and a job leasable again
  (``retrying``, snoozed, or given back for lack of a handler) is announced to the dispatcher
  (:func:`announce`: Redis Streams publishes it again when it is due).

Nothing here depends on how the handler was run, so a runner of ``async def`` handlers can write
its outcomes through the same :class:`Outcomes`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import LeaseLost, StorageRowError, StorageUnavailable
from tether.domain.failure import describe_failure
from tether.domain.job import Job, JobStatus
from tether.entrypoints.execution import Execution, Outcome, OutcomeWriter
from tether.entrypoints.job_logs import enter_job, leave_job
from tether.entrypoints.worker.completions import CompletionBatcher
from tether.entrypoints.worker.held import HeldJob, HeldJobs
from tether.entrypoints.worker.observers import Observers
from tether.entrypoints.worker.queue_limits import QueueLimits
from tether.entrypoints.worker.stats import OUTCOME_COUNTERS, Counts
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher

logger = logging.getLogger("tether.worker")

_T = TypeVar("_T")

#: How long the pool keeps retrying a complete/fail write that hit ``StorageUnavailable``, in
#: seconds, at most (never past the lease expiry: after that the reaper owns the job).
WRITE_RETRY_SECONDS = 30.0


def announce(dispatcher: Dispatcher, job: Job, ratelog: RateLimitedLog) -> None:
    """Tell the dispatcher about a job that is leasable again (``retrying`` after a failure, or
    ``queued`` after a release at shutdown) so another worker is woken when it is due (Redis
    Streams publishes it then) instead of at the next sweep; never raises."""
    try:
        dispatcher.notify([job])
    except BaseException:  # noqa: BLE001 - a lost notification costs latency, never the job
        ratelog("notify", logging.WARNING, "could not tell the dispatcher about %s job %d", job.status.value,
                job.id, exc_info=True)


class _HeldJobWriter:
    """The pool's :class:`~tether.entrypoints.execution.OutcomeWriter` for one held job."""

    def __init__(self, outcomes: Outcomes, entry: HeldJob) -> None:
        self._outcomes = outcomes
        self._entry = entry

    def begin_finish(self) -> bool:
        return self._outcomes.begin_finish(self._entry)

    def write(self, what: str, write: Callable[[], Job]) -> Job | None:
        if what == "complete" and self._outcomes.defer_complete(self._entry):
            # The same fenced completion, handed to the batcher: the job stays held (and
            # heartbeated) until its write returned; the outcome is recorded then.
            return self._entry.job
        return self._outcomes.write(self._entry, what, write)


class Outcomes:
    """How a pool writes and records the outcomes of its held jobs (see the module docstring).

    Args:
        held: the pool's held jobs (a job whose deferred completion returned is finished there).
        counts: the pool's counters.
        completions: the batcher completions are handed to.
        dispatcher: told about jobs leasable again (:func:`announce`).
        clock: the lease expiry is compared with its ``now``.
        worker_id: for logs.
        ratelog: the pool's rate-limited log.
        observer: told of each recorded outcome (see :mod:`.observers`), or None.
        queue_limits: told when a job leaves ``running`` (a freed slot of a limited queue wakes
            waiting workers, :meth:`QueueLimits.slot_freed`); None: nobody.
    """

    def __init__(
        self,
        *,
        held: HeldJobs,
        counts: Counts,
        completions: CompletionBatcher,
        dispatcher: Dispatcher,
        clock: Clock,
        worker_id: str,
        ratelog: RateLimitedLog,
        observer: Observers | None = None,
        queue_limits: QueueLimits | None = None,
    ) -> None:
        self._observer = observer
        self._queue_limits = queue_limits
        self._held = held
        self._counts = counts
        self._completions = completions
        self._dispatcher = dispatcher
        self._clock = clock
        self._worker_id = worker_id
        self._ratelog = ratelog

    def writer(self, entry: HeldJob) -> OutcomeWriter:
        """The writer :func:`~tether.entrypoints.execution.execute_job` gets for ``entry``."""
        return _HeldJobWriter(self, entry)

    def record(self, entry: HeldJob, result: Execution) -> None:
        """After :func:`~tether.entrypoints.execution.execute_job` returned for ``entry``: count
        the outcome (a deferred completion is counted when written) and announce a retry."""
        counter = OUTCOME_COUNTERS.get(result.outcome)
        if counter is not None and not entry.deferred:
            self._counts.count(counter)
            if self._observer is not None:
                self._observer.job_finished(entry.job, result.outcome, time.monotonic() - entry.started)
        if result.outcome in (Outcome.RETRYING, Outcome.SNOOZED, Outcome.NO_HANDLER):
            announce(self._dispatcher, result.job, self._ratelog)
        if self._queue_limits is not None and not entry.deferred:
            self._queue_limits.slot_freed(entry.job)
        if result.outcome is Outcome.NO_HANDLER:
            self._ratelog(f"no-handler:{entry.job.job_type}", logging.WARNING,
                          "worker %s: no handler for job type %r here; its jobs are handed back for a worker that has it",
                          self._worker_id, entry.job.job_type)

    def begin_finish(self, entry: HeldJob) -> bool:
        """The handler returned: claim the right to write the job's outcome; False if shutdown
        released it, the lease is lost, or its time limit passed (only the ``JobTimeout`` failure
        is written then, see :mod:`.timeouts`).  From here on the job can no longer time out."""
        with entry.lock:
            entry.handler_returned = True
            if entry.ctx.lease_lost and not entry.lost_counted:  # the handler's own ctx.heartbeat() was refused
                entry.lost_counted = True
                self._counts.count("lease_lost")
            if entry.released or entry.timed_out or entry.ctx.lease_lost:
                return False
            entry.finishing = True
            return True

    def defer_complete(self, entry: HeldJob) -> bool:
        """Hand the job's completion to the batcher; False when it is closed (write it here)."""
        expires = entry.ctx.job.lease_expires_at
        give_up_at = time.monotonic() + WRITE_RETRY_SECONDS
        if expires is not None:  # never retry past the lease: the reaper owns the job then
            give_up_at = min(give_up_at, time.monotonic() + (expires - self._clock.now()).total_seconds())
        entry.deferred = True
        if self._completions.submit(entry.job.id, entry.token, lambda result: self.completed(entry, result),
                                    give_up_at=give_up_at):
            return True
        entry.deferred = False
        return False

    def completed(self, entry: HeldJob, result: Job | BaseException) -> None:
        """On the flusher thread: the deferred completion of ``entry`` returned ``result``; the
        job is recorded and no longer held.  Log records made meanwhile are about the job
        (:func:`~tether.entrypoints.job_logs.enter_job`); a completion that landed makes none
        unless an observer does, so then it skips that step (it is on every job's path)."""
        scope = None if self._observer is None and isinstance(result, Job) else enter_job(entry.job, self._worker_id)
        try:
            self._completed(entry, result)
        finally:
            if scope is not None:
                leave_job(scope)
            self._held.finish(entry)

    def _completed(self, entry: HeldJob, result: Job | BaseException) -> None:
        if isinstance(result, Job):
            entry.ctx.job = result
            cancelled = result.status is JobStatus.CANCELLED
            self._counts.count("cancelled" if cancelled else "completed")
            if self._queue_limits is not None:
                self._queue_limits.slot_freed(result)
            if self._observer is not None:
                self._observer.job_finished(entry.job, Outcome.CANCELLED if cancelled else Outcome.COMPLETED,
                                            time.monotonic() - entry.started)
        elif isinstance(result, LeaseLost):
            self._counts.count("lease_lost")
            logger.warning(
                "worker %s: complete of job %s refused: lease lost (the reaper or another worker took it); "
                "nothing written", self._worker_id, entry.job.id,
            )
        elif isinstance(result, StorageUnavailable):
            logger.error(
                "worker %s: giving up complete of job %s (%s); the reaper will take the job back when its lease "
                "expires", self._worker_id, entry.job.id, describe_failure(result, 500),
            )
        else:
            logger.error("worker %s: complete of job %s failed; the reaper will take the job back",
                         self._worker_id, entry.job.id, exc_info=result)

    def write(self, entry: HeldJob, what: str, write: Callable[[], _T]) -> _T | None:
        """Run one fenced write, retrying ``StorageUnavailable`` while the lease may still be held.
        Returns the write's result, or None when it was refused (LeaseLost) or given up."""
        job = entry.job
        deadline = time.monotonic() + WRITE_RETRY_SECONDS
        expires = entry.ctx.job.lease_expires_at
        delay = 0.05
        while True:
            try:
                return write()
            except LeaseLost:
                self._counts.count("lease_lost")
                logger.warning(
                    "worker %s: %s of job %s refused: lease lost (the reaper or another worker took it); nothing written",
                    self._worker_id, what, job.id,
                )
                return None
            except StorageRowError as exc:  # refused because of the row: sending it again fails again
                logger.error("worker %s: %s of job %s refused by the store (%s); the reaper will take the job back",
                             self._worker_id, what, job.id, describe_failure(exc, 500))
                return None
            except StorageUnavailable as exc:
                past_lease = expires is not None and self._clock.now() >= expires
                if time.monotonic() >= deadline or past_lease:
                    logger.error(
                        "worker %s: giving up %s of job %s (%s); the reaper will take the job back when its lease expires",
                        self._worker_id, what, job.id, describe_failure(exc, 500),
                    )
                    return None
                self._ratelog("write", logging.WARNING, "worker %s: %s of job %s failed (%s); retrying",
                              self._worker_id, what, job.id, describe_failure(exc, 500))
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
            except BaseException:
                logger.exception("worker %s: %s of job %s failed; the reaper will take the job back",
                                 self._worker_id, what, job.id)
                return None


__all__ = ["WRITE_RETRY_SECONDS", "Outcomes", "announce"]
