"""How a worker pool shuts down: stop requests and signals, the drain, and the release of the jobs
it still holds.

When shutdown begins (:meth:`Shutdown.begin`) no lease is taken any more.  Jobs a lease query
returned at that very moment, and jobs prefetched but not started yet
(:meth:`Shutdown.release_prefetched`), are released unstarted at once.  The jobs still held get
``drain_timeout`` seconds to finish (:meth:`Shutdown.drain`); past that their contexts are
cancelled and their jobs released under the fence (``queued``, due now, lease cleared, the
attempt given back) so another worker can lease them at once (case C16).  Whatever a released
handler does afterwards is not recorded.  A job whose handler already ran past its time limit is
not released but written as timed out (:mod:`.timeouts`): its attempt did fail.

A second SIGINT/SIGTERM ends the drain at once (one that came before the drain began too), as
does a second :meth:`Shutdown.request_stop`; the release lines then say so
(``second SIGTERM: drain abandoned``) instead of ``drain deadline passed``.  Signals only bump a
counter (:meth:`Shutdown.on_signal`): a handler runs on the main thread between bytecodes and
must not take a lock (an Event's included) that the main thread may be holding.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType

from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import LeaseLost
from tether.domain.job import Job, JobStatus
from tether.entrypoints.job_logs import job_scope
from tether.entrypoints.worker.held import HeldJob, HeldJobs
from tether.entrypoints.worker.outcomes import announce
from tether.entrypoints.worker.runner import Runner
from tether.entrypoints.worker.stats import Counts
from tether.entrypoints.worker.supervision import survivable
from tether.entrypoints.worker.timeouts import Timeouts
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")


class Shutdown:
    """The stop requests of a pool, and the releases at its shutdown.

    Args:
        held: the pool's held jobs.
        counts: where releases (``released``) and refused releases (``lease_lost``) are counted.
        runner: whose unstarted jobs are released first.
        repository, dispatcher, clock: where jobs are released, who hears of them, and when.
        worker_id: for logs.
        ratelog: the pool's rate-limited log.
        timeouts: the pool's watchdog, which writes the failure of a job past its time limit
            instead of a release (None: no such job is ever released differently).

    Attributes:
        stop_requested: set by :meth:`request_stop` and at :meth:`begin`.
        signals: SIGINT/SIGTERM received so far (read without locks).
    """

    def __init__(
        self,
        *,
        held: HeldJobs,
        counts: Counts,
        runner: Runner,
        repository: JobRepository,
        dispatcher: Dispatcher,
        clock: Clock,
        worker_id: str,
        ratelog: RateLimitedLog,
        timeouts: Timeouts | None = None,
    ) -> None:
        self._held = held
        self._timeouts = timeouts
        self._counts = counts
        self._runner = runner
        self._repository = repository
        self._dispatcher = dispatcher
        self._clock = clock
        self._worker_id = worker_id
        self._ratelog = ratelog
        self.stop_requested = threading.Event()
        self._cut_drain = threading.Event()  # end the drain now (a second request)
        self.signals = 0
        self._last_signal = 0  # its number, for the log

    # -- requests ----------------------------------------------------------------------------
    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The SIGINT/SIGTERM handler: lock-free on purpose (see the module docstring)."""
        self._last_signal = signum
        self.signals += 1

    def request_stop(self) -> None:
        """Ask for a shutdown, from any thread; a second request ends the drain at once."""
        if self.stop_requested.is_set():
            self._cut_drain.set()
        self.stop_requested.set()

    def signal_name(self) -> str:
        """``"SIGTERM"``: the name of the last signal received."""
        try:
            return signal.Signals(self._last_signal).name
        except ValueError:
            return f"signal {self._last_signal}"

    # -- the drain ---------------------------------------------------------------------------
    def begin(self) -> int:
        """Shutdown begins: no more leases.  Returns the signals that count as the stop request
        itself (0 or 1): every one after them cuts the drain, even one that came in before this
        call (two quick SIGTERMs must not wait out the deadline)."""
        self._held.stopping.set()
        self.stop_requested.set()
        return min(self.signals, 1)

    def release_prefetched(self) -> None:
        """Jobs handed to the runner but not started yet (prefetched) go back to their queue at
        once, under the fence, the attempt given back; they are not run."""
        self._runner.release_unstarted(lambda entry: self.release(entry, "shutting down before it started"))

    def drain(self, *, deadline: float, drain_timeout: float, first_signals: int) -> None:
        """Wait until no job is held, ``deadline`` (``time.monotonic()``) passed, or a second
        request cut the drain (``first_signals`` from :meth:`begin`); then release every job
        still held, its handler's context cancelled."""
        lock = self._held.lock
        with lock:
            while self._held.in_flight and self._drain_cut_by(first_signals) is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                lock.wait(min(remaining, 0.1))
            leftovers = list(self._held.by_id.values())
            cut_by = self._drain_cut_by(first_signals)
        if cut_by is not None:
            reason = f"{cut_by}: drain abandoned"
            if leftovers:
                logger.warning("worker %s: %s; releasing %d running job(s) now", self._worker_id, reason, len(leftovers))
        else:
            reason = f"drain deadline passed ({drain_timeout:g} s)"
        for entry in leftovers:
            self.release(entry, reason)

    def _drain_cut_by(self, first_signals: int) -> str | None:
        """What ended the drain early: ``"second SIGTERM"`` (or SIGINT), ``"second stop request"``;
        None while nothing has."""
        if self.signals > first_signals:
            return f"second {self.signal_name()}"
        return "second stop request" if self._cut_drain.is_set() else None

    # -- releases ----------------------------------------------------------------------------
    def release(self, entry: HeldJob, reason: str) -> None:
        """Cancel the handler of ``entry`` and hand its job back under the fence (``reason`` goes
        to the log line); nothing is released when its outcome is being written already, and a
        job past its time limit is written as timed out instead."""
        with job_scope(entry.job, self._worker_id):
            self._release(entry, reason)

    def _release(self, entry: HeldJob, reason: str) -> None:
        with entry.lock:
            if entry.finishing or entry.released:
                return
            timed_out = entry.timed_out and self._timeouts is not None
            if not timed_out:
                entry.released = True
                entry.ctx.cancel()
                try:
                    released = self._repository.release(entry.job.id, entry.token, now=self._clock.now())
                except LeaseLost:
                    self._counts.count("lease_lost")
                    logger.warning("worker %s: release of job %s refused: lease already lost", self._worker_id, entry.job.id)
                    return
                except BaseException as exc:
                    if not survivable(exc):
                        raise
                    logger.exception(
                        "worker %s: could not release job %s; the reaper will take it back when its lease expires",
                        self._worker_id, entry.job.id,
                    )
                    return
        if timed_out:  # its attempt failed: written as such, not given back
            if self._timeouts is not None:
                self._timeouts.settle(entry, drop=True)
            return
        if released.status is JobStatus.CANCELLED:  # an operator cancelled it meanwhile: it ends here
            self._counts.count("cancelled")
            logger.warning("worker %s: %s; job %s was cancelled, recorded as cancelled", self._worker_id, reason, entry.job.id)
            return
        self._counts.count("released")
        announce(self._dispatcher, released, self._ratelog)
        logger.warning("worker %s: %s; job %s cancelled and released back to its queue", self._worker_id, reason, entry.job.id)

    def release_unstarted(self, job: Job) -> None:
        """Hand back a job leased while shutdown began, never held (no handler saw it)."""
        if job.lease_token is None:  # pragma: no cover - a dispatcher only returns leased jobs
            return
        try:
            released = self._repository.release(job.id, job.lease_token, now=self._clock.now())
        except LeaseLost:
            self._counts.count("lease_lost")
        except BaseException as exc:
            if not survivable(exc):
                raise
            logger.exception("worker %s: could not release unstarted job %s; the reaper will take it back",
                             self._worker_id, job.id)
        else:
            self._counts.count("cancelled" if released.status is JobStatus.CANCELLED else "released")
            announce(self._dispatcher, released, self._ratelog)


__all__ = ["Shutdown"]
