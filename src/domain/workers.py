"""Worker registry entries: what a running worker pool says about itself, and when it counts as gone.

Each worker pool records one :class:`WorkerEntry` in the store when it starts, refreshes it once
per heartbeat interval, and removes it when it stops cleanly.  A pool that stops refreshing (its
process was killed, its host lost) stays listed as *gone* (:func:`is_gone`) until entries unseen
for :data:`PRUNE_AFTER` are pruned.

The registry is information only: it never fences a write, and the reaper never reads it (a job's
own lease alone decides when a job is taken back; case C04).  All datetimes are aware UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

#: An entry is gone once it has missed this many refreshes (``heartbeat_interval`` each) ...
GONE_AFTER_BEATS = 3
#: ... and never before this many seconds without one (a loaded machine's late thread is not a death).
GONE_FLOOR_SECONDS = 5.0
#: Entries not refreshed for this long are deleted (by live pools, at most once per :data:`PRUNE_EVERY`).
PRUNE_AFTER = timedelta(days=1)
#: How often one pool prunes the registry.
PRUNE_EVERY = timedelta(hours=1)

#: The ``dispatcher`` of a pool woken through Redis Streams; the polling one is ``"polling"``.
REDIS_DISPATCH = "redis"
POLLING_DISPATCH = "polling"


def _tuple_or_none(value: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


@attrs.frozen
class WorkerEntry:
    """One worker pool as the registry holds it.

    Attributes:
        worker_id: the pool's worker id (the ``leased_by`` of the jobs it leases).
        host: the host name it runs on.
        pid: its process id on that host.
        queues: the queues it leases from, or None for every queue.
        job_types: the job types it has handlers for, sorted.
        concurrency: its handler threads.
        version: the Tether version it runs (``tether.__version__``).
        dispatcher: how it learns of work: ``"polling"``, ``"redis"``, or another dispatcher's
            ``kind`` (its class name when it names none).
        heartbeat_interval: seconds between two refreshes of this entry (the pool's heartbeat
            interval).
        started_at: when the pool started (aware UTC).
        last_seen_at: its last refresh (aware UTC).
        gone: True when the entry stopped refreshing (see :func:`is_gone`); set by
            :meth:`~tether.ports.worker_registry.WorkerRegistry.list_workers` from its ``now``,
            ignored when an entry is recorded.
    """

    worker_id: str
    host: str
    pid: int
    queues: tuple[str, ...] | None = attrs.field(converter=_tuple_or_none)
    job_types: tuple[str, ...] = attrs.field(converter=tuple)
    concurrency: int
    version: str
    dispatcher: str
    heartbeat_interval: float
    started_at: datetime
    last_seen_at: datetime
    gone: bool = False

    @property
    def status(self) -> str:
        """``"gone"`` or ``"alive"``."""
        return "gone" if self.gone else "alive"

    def serves(self, queue: str, job_type: str | None = None) -> bool:
        """True when this pool leases from ``queue`` and (if given) has a handler for ``job_type``."""
        if self.queues is not None and queue not in self.queues:
            return False
        return job_type is None or job_type in self.job_types


def gone_after(entry: WorkerEntry) -> timedelta:
    """How long after its last refresh ``entry`` counts as gone: :data:`GONE_AFTER_BEATS`
    heartbeat intervals, and at least :data:`GONE_FLOOR_SECONDS`."""
    return timedelta(seconds=max(GONE_AFTER_BEATS * entry.heartbeat_interval, GONE_FLOOR_SECONDS))


def is_gone(entry: WorkerEntry, now: datetime) -> bool:
    """True when ``entry`` was last refreshed longer ago than :func:`gone_after` at ``now``."""
    return now - entry.last_seen_at > gone_after(entry)


def with_gone_flag(entry: WorkerEntry, now: datetime) -> WorkerEntry:
    """``entry`` with :attr:`WorkerEntry.gone` set as :func:`is_gone` decides at ``now``."""
    gone = is_gone(entry, now)
    return entry if entry.gone is gone else attrs.evolve(entry, gone=gone)


__all__ = [
    "GONE_AFTER_BEATS",
    "GONE_FLOOR_SECONDS",
    "POLLING_DISPATCH",
    "PRUNE_AFTER",
    "PRUNE_EVERY",
    "REDIS_DISPATCH",
    "WorkerEntry",
    "gone_after",
    "is_gone",
    "with_gone_flag",
]
