"""What a running handler may know and do about its own job: :class:`JobContext`.

A handler declared as ``handler(payload, ctx)`` receives one; ``handler(payload)`` does not.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from tether.domain.errors import LeaseLost
from tether.domain.job import Job
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")


class JobContext:
    """The running job's view of its lease, and the cancellation signal.

    Attributes:
        job: the job as leased (``status`` running, ``attempts`` counting this attempt); replaced
            by the refreshed job after each :meth:`heartbeat`.
        worker_id: the id of the worker pool running it.

    The context is *cancelled* when an operator cancelled the job (``app.cancel``, ``tether jobs
    cancel``): the worker learns it from its next heartbeat's answer, within one heartbeat
    interval, and whatever outcome the handler then produces is recorded as ``cancelled``
    (:attr:`cancel_requested`); when the worker shuts down and the drain deadline has passed (the
    job is then released back to the queue and whatever the handler does next is not recorded);
    when the worker learns that the lease was lost (the reaper took the job back); or when the
    handler's time limit passed (the attempt then fails with ``JobTimeout``).  A long
    handler should check :attr:`cancelled` or use :meth:`sleep` between steps and return
    promptly once cancelled.

    Built by the worker pool (``lease_timeout`` in seconds); raises ValueError for a job that
    holds no lease token.
    """

    def __init__(
        self,
        job: Job,
        *,
        repository: JobRepository,
        clock: Clock,
        lease_timeout: float,
        worker_id: str,
    ) -> None:
        if job.lease_token is None:
            raise ValueError(f"job {job.id} is not running under a lease")
        self.job = job
        self.worker_id = worker_id
        self._token: str = job.lease_token
        self._repository = repository
        self._clock = clock
        self._lease_timeout = lease_timeout
        self._cancelled = False  # set under _callbacks_lock, never cleared
        self._wakeup: threading.Event | None = None  # made by the first sleep (most handlers never sleep)
        self._lease_lost = False
        self._cancel_requested = job.cancel_requested_at is not None
        self._on_cancel: list[Callable[[], None]] = []
        self._callbacks_lock = threading.Lock()
        if self._cancel_requested:
            self._cancelled = True

    @property
    def token(self) -> str:
        """The fencing token of this attempt's lease."""
        return self._token

    @property
    def attempt(self) -> int:
        """Which attempt this is, counted from 1 (``job.attempts``).  A snooze
        (``tether.Snooze``) or a release at shutdown gives the attempt back, so the run after one
        has the same number as the run before it."""
        return self.job.attempts

    @property
    def cancelled(self) -> bool:
        """True once the handler should stop: the job was cancelled, shutdown passed the drain
        deadline, the lease was lost, or the time limit passed."""
        return self._cancelled

    @property
    def cancel_requested(self) -> bool:
        """True once an operator asked to cancel this job (seen on a heartbeat's answer); the job
        ends ``cancelled`` whatever the handler does."""
        return self._cancel_requested

    @property
    def lease_lost(self) -> bool:
        """True once a heartbeat (the pool's or :meth:`heartbeat`) was refused by the fence."""
        return self._lease_lost

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` seconds, or less if the context is cancelled meanwhile.

        Returns:
            True when the whole time passed; False when it returned early because of cancellation
            (also at once when already cancelled).
        """
        seconds = max(float(seconds), 0.0)
        with self._callbacks_lock:
            if self._cancelled:
                return False
            wakeup = self._wakeup
            if wakeup is None:
                wakeup = self._wakeup = threading.Event()
        return not wakeup.wait(seconds)

    async def asleep(self, seconds: float) -> bool:
        """The async form of :meth:`sleep`: wait ``seconds`` seconds without blocking the event
        loop, or less if the context is cancelled meanwhile.

        Under a worker pool a cancelled context also cancels the handler's task, so the wait may
        end in :class:`asyncio.CancelledError` instead; let it propagate.

        Returns:
            True when the whole time passed; False when cancellation ended it early (also at once
            when already cancelled).
        """
        if self.cancelled:
            return False
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def settle() -> None:
            if not woken.done():
                woken.set_result(None)

        def wake() -> None:  # from whichever thread cancels
            loop.call_soon_threadsafe(settle)

        self.add_cancel_callback(wake)
        try:
            if self.cancelled:
                return False
            done, _ = await asyncio.wait({woken}, timeout=max(float(seconds), 0.0))
            return not done
        finally:
            self.remove_cancel_callback(wake)
            woken.cancel()

    async def aheartbeat(self) -> None:
        """The async form of :meth:`heartbeat`: the write runs on a worker thread, never on the
        event loop.  Same errors."""
        await asyncio.to_thread(self.heartbeat)

    def heartbeat(self) -> None:
        """Extend this job's lease now to ``now + lease_timeout`` seconds.

        The pool already heartbeats every ``heartbeat_interval`` seconds; call this only around a
        step that could block the pool's heartbeats for longer than the lease.

        The answer also says whether the job was cancelled meanwhile (:attr:`cancelled` turns true).

        Raises:
            LeaseLost: the job is no longer running under this lease; stop working on it (the
                context is cancelled as well).
            StorageUnavailable: the repository could not be reached; the lease is unchanged.
        """
        try:
            job = self._repository.heartbeat(self.job.id, self._token, now=self._clock.now(), lease_timeout=self._lease_timeout)
        except LeaseLost:
            self.mark_lease_lost()
            raise
        self.observe(job)

    # -- used by the worker pool -------------------------------------------------------------
    def observe(self, job: Job) -> None:
        """Take ``job`` (a heartbeat's answer) as :attr:`job`; cancel when it carries a
        cancellation request."""
        self.job = job
        if job.cancel_requested_at is not None and not self._cancel_requested:
            self._cancel_requested = True
            self._set_cancelled()

    def cancel(self) -> None:
        """Set :attr:`cancelled` (wakes a :meth:`sleep` at once)."""
        self._set_cancelled()

    def mark_lease_lost(self) -> None:
        """Record that the fence refused this lease, and cancel."""
        self._lease_lost = True
        self._set_cancelled()

    def add_cancel_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (from the cancelling thread; it must not block) when this context is
        cancelled, at once if it is already.  The async runner cancels the handler's task so."""
        with self._callbacks_lock:
            if not self._cancelled:
                self._on_cancel.append(callback)
                return
        callback()

    def remove_cancel_callback(self, callback: Callable[[], None]) -> None:
        """Forget a callback of :meth:`add_cancel_callback` (no error when it is gone)."""
        with self._callbacks_lock:
            if callback in self._on_cancel:
                self._on_cancel.remove(callback)

    def _set_cancelled(self) -> None:
        with self._callbacks_lock:
            if self._cancelled:
                return
            self._cancelled = True
            if self._wakeup is not None:
                self._wakeup.set()
            callbacks, self._on_cancel = self._on_cancel, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                logger.exception("a cancellation callback of job %s raised (ignored)", self.job.id)


__all__ = ["JobContext"]
