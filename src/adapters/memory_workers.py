"""The worker registry of the in-memory repository: the entries of the worker pools, in memory.

A mixin of :class:`~tether.adapters.memory.InMemoryJobRepository` (which supplies the lock), the
:class:`~tether.ports.worker_registry.WorkerRegistry` port's methods over one dict by worker id.
"""

from __future__ import annotations

import threading
from datetime import datetime

import attrs
from tether.domain.timeutil import ensure_utc
from tether.domain.workers import WorkerEntry, with_gone_flag
from tether.ports.worker_registry import WorkerRegistry


class MemoryWorkerRegistry(WorkerRegistry):
    """``record_worker``, ``remove_worker``, ``list_workers`` and ``prune_workers`` in memory."""

    _lock: threading.Condition
    _workers: dict[str, WorkerEntry]

    def record_worker(self, entry: WorkerEntry) -> None:
        entry = attrs.evolve(
            entry,
            started_at=ensure_utc(entry.started_at, "started_at"),
            last_seen_at=ensure_utc(entry.last_seen_at, "last_seen_at"),
            gone=False,
        )
        with self._lock:
            self._workers[entry.worker_id] = entry

    def remove_worker(self, worker_id: str) -> bool:
        with self._lock:
            return self._workers.pop(worker_id, None) is not None

    def list_workers(self, *, now: datetime) -> list[WorkerEntry]:
        now = ensure_utc(now, "now")
        with self._lock:
            entries = list(self._workers.values())
        entries.sort(key=lambda e: (e.started_at, e.worker_id))
        return [with_gone_flag(e, now) for e in entries]

    def prune_workers(self, *, older_than: datetime) -> int:
        older_than = ensure_utc(older_than, "older_than")
        with self._lock:
            doomed = [w for w, e in self._workers.items() if e.last_seen_at < older_than]
            for worker_id in doomed:
                del self._workers[worker_id]
        return len(doomed)



__all__ = ["MemoryWorkerRegistry"]
