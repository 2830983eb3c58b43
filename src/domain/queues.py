"""Queue controls: a queue's stored pause flag and running limit, and the pure rules that apply them.

Queues stay implicit: a queue exists as soon as a job names it, and a queue with no job may be
paused or limited all the same (its settings wait for its first job).  A queue's settings are
one small record, :class:`QueueState`; a queue with no record is unpaused and unlimited.

- **Pause**: no job of a paused queue is leased (by ``lease``, by ``lease_job``, by
  ``complete_and_lease``), from the first lease statement that starts after the pause was
  written.  Enqueue keeps accepting jobs; running jobs finish; ``due_jobs`` leaves them out.
- **Running limit** (``max_running``): at most that many jobs of the queue are running at once
  across every worker.  A running job counts while its lease has not expired at the lease's
  ``now`` (:func:`counts_as_running`), so the slots of a killed worker come back when its leases
  expire, before the reaper writes them.  A lease of a limited queue takes at most
  :func:`lease_room` jobs.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import attrs
from tether.domain.job import Job, JobStatus
from tether.domain.validation import validate_int, validate_queue

#: The largest ``max_running`` accepted.
MAX_RUNNING_LIMIT = 1_000_000


@attrs.frozen
class QueueState:
    """The stored controls of one queue.

    Attributes:
        name: the queue's name.
        paused: no job of the queue is leased while True.
        max_running: most jobs of the queue running at once across every worker (None: no limit).
        updated_at: when the record was last written (aware UTC), None for a queue with no record.
    """

    name: str
    paused: bool = False
    max_running: int | None = None
    updated_at: datetime | None = None

    @property
    def restricted(self) -> bool:
        """True when leases of this queue cannot take the plain lease path (paused or limited)."""
        return self.paused or self.max_running is not None


@attrs.frozen
class QueueInfo:
    """A queue as ``app.queues()`` lists it: its controls and how many jobs it holds per status.

    Attributes:
        name, paused, max_running: as in :class:`QueueState`.
        counts: jobs of the queue per status (every status present, zero included).
    """

    name: str
    paused: bool
    max_running: int | None
    counts: dict[JobStatus, int]

    @property
    def running(self) -> int:
        """Jobs of the queue in ``running``."""
        return self.counts.get(JobStatus.RUNNING, 0)


def validate_max_running(value: object, field: str = "max_running") -> int:
    """``value`` as a running limit (1 to :data:`MAX_RUNNING_LIMIT`).  Raises ValidationError(``field``)."""
    return validate_int(value, field, 1, MAX_RUNNING_LIMIT)


def validate_queue_name(value: object) -> str:
    """``value`` as a queue name (as enqueue accepts it).  Raises ValidationError(``queue``)."""
    return validate_queue(value, "queue")


def counts_as_running(job: Job, now: datetime) -> bool:
    """True when ``job`` holds one of its queue's slots at ``now``: running under a lease that has
    not expired (an expired lease's slot is free even before the reaper writes the job)."""
    return job.status is JobStatus.RUNNING and job.lease_expires_at is not None and job.lease_expires_at > now


def lease_room(state: QueueState | None, running: int) -> int | None:
    """How many jobs of a queue a lease may take now: 0 when paused, ``max_running - running``
    (never below 0) when limited, None when there is no limit (``running``: jobs counting as
    running, :func:`counts_as_running`)."""
    if state is None:
        return None
    if state.paused:
        return 0
    if state.max_running is None:
        return None
    return max(state.max_running - running, 0)


def restricted_names(states: Iterable[QueueState]) -> frozenset[str]:
    """The names of the paused or limited queues among ``states``."""
    return frozenset(s.name for s in states if s.restricted)


__all__ = [
    "MAX_RUNNING_LIMIT",
    "QueueInfo",
    "QueueState",
    "counts_as_running",
    "lease_room",
    "restricted_names",
    "validate_max_running",
    "validate_queue_name",
]
