"""The worker registry port: where running worker pools record themselves, for people and ``jobs why``.

A port of its own, beside :class:`~tether.ports.repository.JobRepository`: Tether's repositories
(memory, SQLite, PostgreSQL) implement both, in the same store, while a third-party repository
that implements only the job port keeps working (its pools then record nothing, and
``app.workers()`` says the store keeps no registry).

The registry is information only.  Nothing in it fences a write, and the reaper never reads it:
a job's own lease alone decides when the job is taken back (case C04).  Writes are one small
statement per pool per heartbeat interval, never on the lease or completion path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from tether.domain.workers import WorkerEntry


@runtime_checkable
class WorkerRegistry(Protocol):
    """Stores one :class:`~tether.domain.workers.WorkerEntry` per running worker pool."""

    def record_worker(self, entry: WorkerEntry) -> None:
        """Store ``entry``, replacing the entry of the same ``worker_id`` if there is one (a pool
        records itself at start and at every refresh).  ``entry.gone`` is not stored.

        Raises:
            ValidationError: a naive ``started_at``/``last_seen_at``; nothing written.
            StorageUnavailable: the store could not be reached.
        """
        ...

    def remove_worker(self, worker_id: str) -> bool:
        """Delete the entry of ``worker_id`` (a pool's clean stop); True if there was one.

        Raises:
            StorageUnavailable: the store could not be reached.
        """
        ...

    def list_workers(self, *, now: datetime) -> list[WorkerEntry]:
        """Every stored entry, oldest ``started_at`` first (then by worker id), each with
        ``gone`` set as :func:`~tether.domain.workers.is_gone` decides at ``now`` (aware UTC).

        Raises:
            ValidationError: a naive ``now``.
            StorageUnavailable: the store could not be reached.
        """
        ...

    def prune_workers(self, *, older_than: datetime) -> int:
        """Delete the entries last refreshed before ``older_than`` (aware UTC); returns how many.

        Raises:
            ValidationError: a naive ``older_than``; nothing deleted.
            StorageUnavailable: the store could not be reached.
        """
        ...


__all__ = ["WorkerRegistry"]
