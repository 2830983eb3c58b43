"""The seam through which metrics, traces and job logs watch a worker pool: :class:`JobObserver`.

A pool built without observers (the default) makes no call here at all: the runner and
:class:`~tether.entrypoints.worker.outcomes.Outcomes` test one attribute against None, so
watching costs nothing when it is off.  With observers, each job calls, in order:

1. :meth:`JobObserver.job_started`, on the handler's thread just before its handler runs (a
   tracer opens its span there and makes it current for the handler's own spans);
2. :meth:`JobObserver.handler_returned`, on the same thread once the handler returned and its
   outcome was decided (a completion may still wait in the batcher);

   (An ``async def`` handler's job is told the same two calls in the same context, that of its
   task: ``job_started`` on the pool's loop before the task starts, in the task's context, so
   what it makes current is current in the coroutine only; ``handler_returned`` once the task is
   done and the outcome decided, on the loop for a success or on the write thread that wrote any
   other outcome, in that same context.  See :mod:`.async_runner`.)
3. :meth:`JobObserver.job_finished`, once the outcome is recorded: for a completion when its
   batched write returned (on the batcher's thread), else on the thread that wrote it.  Only a
   recorded outcome is reported: a job released at shutdown, or whose lease was lost, is not.

Pool-wide counts (leases lost, jobs reaped, released, timed out) are no events: an observer that
wants them reads :attr:`WorkerPool.stats` when asked (see :meth:`JobObserver.pool_started`).

An observer must be quick and must not raise; what it raises is logged (rate-limited) and
ignored, never the job's failure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from tether.adapters.log_limits import RateLimitedLog
from tether.domain.job import Job
from tether.entrypoints.execution import Execution, Outcome
from tether.entrypoints.worker.stats import WorkerStats

logger = logging.getLogger("tether.worker")

#: The state of an observer whose ``job_started`` raised: its ``handler_returned`` is not called.
_FAILED = object()


class PoolView(Protocol):
    """What an observer may read of the pool that runs it (:class:`WorkerPool` is one)."""

    @property
    def worker_id(self) -> str: ...

    @property
    def stats(self) -> WorkerStats: ...

    @property
    def in_flight(self) -> int: ...


class JobObserver(Protocol):
    """Told about each job a pool runs (see the module docstring for when each call comes)."""

    def pool_started(self, pool: PoolView) -> None:
        """The pool starts (before its first lease)."""
        ...

    def job_started(self, job: Job, worker_id: str) -> object:
        """Its handler is about to run on this thread; returns a state given back to
        :meth:`handler_returned` (None if the observer needs none)."""
        ...

    def handler_returned(self, job: Job, state: object, execution: Execution | None) -> None:
        """Same thread, after the handler and the outcome's decision; ``execution`` is None when
        running it raised unexpectedly."""
        ...

    def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
        """The outcome of ``job`` (as leased) is recorded: ``COMPLETED``, ``RETRYING``, ``DEAD``,
        ``CANCELLED``, ``SNOOZED`` or ``NO_HANDLER``; ``seconds`` from the handler's start to
        its return (monotonic clock)."""
        ...


class Observers:
    """Several observers as one (each call goes to each, in order); an observer's error is
    logged (rate-limited) and the next one still called.

    Args:
        observers: the observers, in the order they are called.
    """

    def __init__(self, observers: Sequence[JobObserver]) -> None:
        self._observers = tuple(observers)
        self._ratelog = RateLimitedLog(logger)

    def _failed(self, observer: JobObserver, what: str) -> None:
        self._ratelog(f"observer:{what}", logging.WARNING, "observer %r raised in %s (ignored)", observer, what,
                      exc_info=True)

    def pool_started(self, pool: PoolView) -> None:
        for observer in self._observers:
            try:
                observer.pool_started(pool)
            except Exception:  # noqa: BLE001 - watching a job never changes it
                self._failed(observer, "pool_started")

    def job_started(self, job: Job, worker_id: str) -> object:
        states: list[object] = []
        for observer in self._observers:
            try:
                states.append(observer.job_started(job, worker_id))
            except Exception:  # noqa: BLE001 - watching a job never changes it
                self._failed(observer, "job_started")
                states.append(_FAILED)
        return states

    def handler_returned(self, job: Job, state: object, execution: Execution | None) -> None:
        states = state if isinstance(state, list) else [_FAILED] * len(self._observers)
        for observer, own in zip(self._observers, states):
            if own is _FAILED:  # its job_started raised: it has nothing to end
                continue
            try:
                observer.handler_returned(job, own, execution)
            except Exception:  # noqa: BLE001 - watching a job never changes it
                self._failed(observer, "handler_returned")

    def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
        for observer in self._observers:
            try:
                observer.job_finished(job, outcome, seconds)
            except Exception:  # noqa: BLE001 - watching a job never changes it
                self._failed(observer, "job_finished")


class OneObserver(Observers):
    """:class:`Observers` of a single observer (the usual case: metrics, or tracing), without the
    per-job list of states and the loops: the same calls and the same error handling."""

    def __init__(self, observer: JobObserver) -> None:
        super().__init__([observer])
        self._one = observer

    def job_started(self, job: Job, worker_id: str) -> object:
        try:
            return self._one.job_started(job, worker_id)
        except Exception:  # noqa: BLE001 - watching a job never changes it
            self._failed(self._one, "job_started")
            return _FAILED

    def handler_returned(self, job: Job, state: object, execution: Execution | None) -> None:
        if state is _FAILED:  # its job_started raised: it has nothing to end
            return
        try:
            self._one.handler_returned(job, state, execution)
        except Exception:  # noqa: BLE001 - watching a job never changes it
            self._failed(self._one, "handler_returned")

    def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
        try:
            self._one.job_finished(job, outcome, seconds)
        except Exception:  # noqa: BLE001 - watching a job never changes it
            self._failed(self._one, "job_finished")


def combine(observers: Sequence[JobObserver] | None) -> Observers | None:
    """The one observer a pool calls for ``observers`` (a :class:`OneObserver` for a single one),
    or None when there are none (then the pool makes no observer call at all)."""
    if not observers:
        return None
    return OneObserver(observers[0]) if len(observers) == 1 else Observers(observers)


__all__ = ["JobObserver", "Observers", "OneObserver", "PoolView", "combine"]
