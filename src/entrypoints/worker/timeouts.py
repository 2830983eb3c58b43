"""Job timeouts: the watchdog that cancels a handler past its time limit, and what becomes of the
attempt and of the thread that runs it.

A job's limit is its handler's ``timeout`` (``@app.handler(..., timeout=30)``), else the pool's
``job_timeout``; None means no limit.  The clock starts when a handler thread starts the job (time
spent prefetched does not count).  A Python thread cannot be stopped from outside, so a timeout
takes up to three steps:

1. **At the limit** (:meth:`Timeouts.check_once`): the job's context is cancelled
   (``ctx.cancelled`` turns True, ``ctx.sleep`` returns at once) and the runner hands the thread's
   slot to a replacement thread (:meth:`Slots.time_out`), so the pool's capacity recovers at once.
   The attempt keeps its lease, still heartbeated: nothing else may run the job while its handler
   may still be running.
2. **The handler returns** before the hard bound (``limit + 2 * TIMEOUT_GRACE_SECONDS``): the
   attempt is written as failed with ``JobTimeout: timed out after N s``, whatever the handler
   returned or raised (a result that came too late is never recorded as completed), and is
   retried or sent to ``dead`` under the usual rules.  The thread then ends: its slot went to
   the replacement.
3. **At the hard bound**, if the handler still runs: the watchdog writes that failure itself and
   the pool stops holding the job (no more heartbeats), so its retry may start elsewhere while
   the abandoned thread still runs.  Whatever that thread does later is refused: its entry says
   timed out, and its token no longer holds a lease (the fence).

**The grace** (:data:`TIMEOUT_GRACE_SECONDS`, 5 s): a cooperative handler checks
``ctx.cancelled`` between steps; one grace lets it see the cancellation and return, a second one
lets it unwind (``finally`` blocks, closing files and connections) before its lease is given up.
So a retry never overlaps the attempt it replaces unless that attempt's thread outlived the hard
bound.

**Abandoned threads**: at most ``concurrency`` threads whose slot went to a replacement may be
stuck in handlers at once.  A handler that times out beyond that gets no replacement: its thread
keeps its slot, the pool stops leasing (an error is logged) until an abandoned thread returns.

**Cost**: only a job whose handler has a limit costs anything: its thread sets two fields and
appends it to a deque (no lock).  The watchdog thread (``tether-timeouts``) starts with the first
such job and looks at the watched jobs every :data:`TIMEOUT_CHECK_SECONDS`.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import attrs
from tether.domain.errors import JobTimeout
from tether.domain.retry import RetryPolicy
from tether.entrypoints.execution import record_failure
from tether.entrypoints.handlers import HandlerSpec
from tether.entrypoints.job_logs import job_fields, job_scope
from tether.entrypoints.worker.held import HeldJob, HeldJobs
from tether.entrypoints.worker.outcomes import Outcomes
from tether.entrypoints.worker.stats import Counts
from tether.entrypoints.worker.supervision import SupervisedThread
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")

#: Seconds a handler past its limit gets to return, twice over (see the module docstring): the
#: attempt is written as timed out when the handler returns, or at ``limit + 2 * grace`` at the latest.
TIMEOUT_GRACE_SECONDS = 5.0
#: How often the watchdog looks at the jobs it watches, in seconds (a limit is noticed this late at most).
TIMEOUT_CHECK_SECONDS = 0.1


@attrs.frozen
class TimeoutPass:
    """What one :meth:`Timeouts.check_once` did (counts of jobs).

    Attributes:
        timed_out: handlers past their limit, cancelled in this pass.
        expired: attempts whose handler was still running at the hard bound, written as failed.
        watched: jobs still watched after the pass.
    """

    timed_out: int = 0
    expired: int = 0
    watched: int = 0


class Slots(Protocol):
    """What the watchdog needs of the runner whose handler timed out."""

    def time_out(self, entry: HeldJob) -> bool:
        """Called with ``entry.lock`` held, as the handler of ``entry`` passes its limit: give
        the thread's slot to a replacement (True: call :meth:`add_thread` once the locks are
        released), or keep it there when too many threads are abandoned already (False)."""
        ...

    def add_thread(self) -> None:
        """Start one more handler thread (the replacement)."""
        ...


class Timeouts:
    """The watchdog of a pool (see the module docstring).

    Args:
        held: the pool's held jobs (a job whose failure the watchdog wrote is finished there).
        counts: where timeouts are counted (``timed_out``).
        outcomes: how the failure is written and recorded (fenced, retried on storage trouble).
        handlers: job type -> :class:`HandlerSpec` (for the ``on_failure`` hook).
        repository, clock, retry_policy: where, when, and with which backoff failures are written.
        worker_id: for logs and error texts.
        spawn: builds the watchdog thread (``spawn(name, loop, stopped=...)``; the pool's supervisor).

    Attributes:
        slots: the runner told of each timeout; the pool sets it after building the runner.
    """

    def __init__(
        self,
        *,
        held: HeldJobs,
        counts: Counts,
        outcomes: Outcomes,
        handlers: Mapping[str, HandlerSpec],
        repository: JobRepository,
        clock: Clock,
        retry_policy: RetryPolicy,
        worker_id: str,
        spawn: Callable[..., SupervisedThread] = SupervisedThread,
    ) -> None:
        self.slots: Slots | None = None
        self._held = held
        self._counts = counts
        self._outcomes = outcomes
        self._handlers = handlers
        self._repository = repository
        self._clock = clock
        self._retry_policy = retry_policy
        self._worker_id = worker_id
        self._incoming: collections.deque[HeldJob] = collections.deque()
        self._watched: list[HeldJob] = []
        self._stop = threading.Event()
        self._start_lock = threading.Lock()
        self._thread: SupervisedThread | None = None
        self._spawn = spawn

    # -- from the handler threads ------------------------------------------------------------
    def watch(self, entry: HeldJob, timeout: float) -> None:
        """Its handler starts now and may run ``timeout`` seconds (a lock-free append)."""
        entry.timeout = timeout
        entry.deadline = time.monotonic() + timeout
        self._incoming.append(entry)
        if self._thread is None:
            self._start()

    def settle(self, entry: HeldJob, *, drop: bool) -> bool:
        """Write the ``JobTimeout`` failure of ``entry`` unless someone else did: the first of its
        thread (handler returned), the watchdog (hard bound) and shutdown to claim it writes.
        ``drop``: the caller is not the job's thread, so the pool stops holding the job here.
        Returns True when this call claimed it (the failure is written, refused by the fence,
        or given up)."""
        with entry.lock:
            if entry.finishing or entry.released or entry.settled:
                return False
            entry.finishing = True
            entry.settled = drop
            lost = entry.ctx.lease_lost
        try:
            with job_scope(entry.job, self._worker_id):
                return self._write_timeout(entry, lost)
        except BaseException:  # never break the caller (the watchdog, shutdown, a handler thread)
            logger.exception("worker %s: could not write the timeout of job %s; the reaper will take it back",
                             self._worker_id, entry.job.id, extra=job_fields(entry.job, self._worker_id))
            return True
        finally:
            if drop:
                self._held.finish(entry)

    def _write_timeout(self, entry: HeldJob, lost: bool) -> bool:
        if lost:
            logger.warning(
                "worker %s: job %s timed out after losing its lease; nothing written", self._worker_id, entry.job.id
            )
            return True
        result = record_failure(
            entry.job, entry.ctx, self._handlers.get(entry.job.job_type), JobTimeout(entry.timeout or 0.0),
            repository=self._repository, clock=self._clock, retry_policy=self._retry_policy,
            writer=self._outcomes.writer(entry), worker_id=self._worker_id,
        )
        self._outcomes.record(entry, result)
        return True

    # -- the watchdog ------------------------------------------------------------------------
    def check_once(self, now: float | None = None) -> TimeoutPass:
        """One look at the watched jobs at ``now`` (``time.monotonic()``; default: now): cancel
        the handlers past their limit, and write the failure of those still running at the hard
        bound.  Call it from one thread at a time (the watchdog's, or a test's)."""
        now = time.monotonic() if now is None else now
        while True:
            try:
                self._watched.append(self._incoming.popleft())
            except IndexError:
                break
        hard = 2 * TIMEOUT_GRACE_SECONDS
        timed_out = expired = 0
        keep: list[HeldJob] = []
        for entry in self._watched:
            if not entry.timed_out:
                if entry.handler_returned or entry.released:
                    continue  # returned in time, or released at shutdown
                if now < entry.deadline:
                    keep.append(entry)
                elif self._time_out(entry):
                    timed_out += 1
                    keep.append(entry)
            elif entry.finishing or entry.released or entry.settled:
                continue  # its failure is written (or being written)
            elif now >= entry.deadline + hard:
                if self.settle(entry, drop=True):
                    expired += 1
                    logger.error(
                        "worker %s: job %s still running %.1f s past its %g s limit; its attempt is written as timed "
                        "out and its thread abandoned (whatever it does now is not recorded)",
                        self._worker_id, entry.job.id, now - entry.deadline, entry.timeout or 0.0,
                    )
            else:
                keep.append(entry)
        self._watched = keep
        return TimeoutPass(timed_out=timed_out, expired=expired, watched=len(keep))

    def _time_out(self, entry: HeldJob) -> bool:
        """Cancel the handler of ``entry`` (past its limit) and hand its slot on; False when it
        returned meanwhile."""
        slots = self.slots
        with entry.lock:  # its thread's begin_finish takes it too: it sees all of this, or none
            if entry.handler_returned or entry.finishing or entry.released:
                return False
            entry.timed_out = True
            entry.ctx.cancel()
            replace = slots.time_out(entry) if slots is not None else False
        self._counts.count("timed_out")
        if replace and slots is not None:
            slots.add_thread()
            logger.warning(
                "worker %s: job %s passed its %g s limit; its context is cancelled and a new thread takes its slot "
                "(the attempt fails with JobTimeout when the handler returns, or in %g s at the latest)",
                self._worker_id, entry.job.id, entry.timeout or 0.0, 2 * TIMEOUT_GRACE_SECONDS,
            )
        else:
            logger.error(
                "worker %s: job %s passed its %g s limit, but as many handler threads as the pool's concurrency are "
                "stuck past their limits already: no new thread; the pool leases no job until one of them returns",
                self._worker_id, entry.job.id, entry.timeout or 0.0,
            )
        return True

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = self._spawn("tether-timeouts", self._run, stopped=self._stop.is_set)
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(TIMEOUT_CHECK_SECONDS):
            try:
                self.check_once()
            except BaseException:
                logger.exception("worker %s: timeout check failed", self._worker_id)

    def stop(self) -> None:
        """Stop watching (after the pass in progress); the thread ends."""
        with self._start_lock:
            self._stop.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the watchdog thread to end."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)


__all__ = ["TIMEOUT_CHECK_SECONDS", "TIMEOUT_GRACE_SECONDS", "Slots", "TimeoutPass", "Timeouts"]
