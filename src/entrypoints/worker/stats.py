"""What a worker pool did so far: :class:`WorkerStats`, and the counters its parts bump.

Every part of the pool counts through one :class:`Counts`, under the pool's one lock (see
:mod:`tether.entrypoints.worker.held`): a count costs one short locked section, as it did when
the pool was one class.
"""

from __future__ import annotations

import threading

import attrs
from tether.entrypoints.execution import Outcome


@attrs.frozen
class WorkerStats:
    """What a pool did so far (counts of jobs).

    Attributes:
        completed: jobs completed.
        failed: failed attempts sent to ``retrying``.
        dead: jobs sent to ``dead`` (attempts used up, PermanentError).
        lease_lost: writes refused by the fence (complete, fail, heartbeat, release).
        released: jobs handed back at shutdown.
        reaped: expired leases taken back by this pool's reaper (any worker's).
        cancelled: jobs whose outcome write recorded ``cancelled`` (an operator cancelled them
            while this pool ran them), whatever the handler did.
        snoozed: jobs given back by their handler's ``Snooze``.
        no_handler: jobs given back because this pool has no handler for their type.
        timed_out: handlers that ran past their time limit (their attempts' failures are
            counted in ``failed`` or ``dead`` too).
    """

    completed: int = 0
    failed: int = 0
    dead: int = 0
    lease_lost: int = 0
    released: int = 0
    reaped: int = 0
    cancelled: int = 0
    snoozed: int = 0
    no_handler: int = 0
    timed_out: int = 0


#: Which :class:`WorkerStats` counter each recorded outcome of a handler bumps.
OUTCOME_COUNTERS = {
    Outcome.COMPLETED: "completed", Outcome.RETRYING: "failed", Outcome.DEAD: "dead", Outcome.CANCELLED: "cancelled",
    Outcome.SNOOZED: "snoozed", Outcome.NO_HANDLER: "no_handler",
}


class Counts:
    """The running counts of one pool, each a :class:`WorkerStats` field but ``reaped`` (the
    maintenance loop counts that one).

    Args:
        lock: the pool's lock; every count is taken under it.
    """

    def __init__(self, lock: threading.Condition) -> None:
        self._lock = lock
        self._counts: dict[str, int] = dict.fromkeys(attrs.fields_dict(WorkerStats), 0)

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``key`` (a :class:`WorkerStats` field name)."""
        with self._lock:
            self._counts[key] += n

    def snapshot(self, *, reaped: int) -> WorkerStats:
        """The counts so far, with ``reaped`` (expired leases taken back by the pool's reaper)."""
        with self._lock:
            counts = dict(self._counts)
        counts["reaped"] = reaped
        return WorkerStats(**counts)


__all__ = ["OUTCOME_COUNTERS", "Counts", "WorkerStats"]
