"""The worker pool's entry in the worker registry: recorded at start, refreshed each heartbeat, removed at a clean stop.

:class:`Presence` writes one :class:`~tether.domain.workers.WorkerEntry` for its pool: at
:meth:`~Presence.announce` (from :meth:`WorkerPool.start`), then at every pass of the heartbeat
thread (:meth:`~Presence.refresh_once`, one small write per heartbeat interval, never on the lease
or completion path), and deletes it at :meth:`~Presence.withdraw` (the end of a clean stop).  A
pool that dies without stopping leaves its entry behind; readers see it as gone after a few missed
refreshes (:func:`~tether.domain.workers.is_gone`), and live pools prune entries unseen for
:data:`~tether.domain.workers.PRUNE_AFTER`, at most once per
:data:`~tether.domain.workers.PRUNE_EVERY` each.

Information only: a registry that cannot be written is logged (rate-limited) and written again
at the next refresh; it never stops the pool, and nothing about leases depends on it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tether.adapters.log_limits import RateLimitedLog
from tether.domain.failure import describe_failure
from tether.domain.workers import PRUNE_AFTER, PRUNE_EVERY, WorkerEntry
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.worker_registry import WorkerRegistry

logger = logging.getLogger("tether.worker")


def dispatcher_kind(dispatcher: Dispatcher) -> str:
    """How a dispatcher is named in the registry: its ``kind`` class attribute (``"polling"``,
    ``"redis"``), else its class name."""
    kind = getattr(type(dispatcher), "kind", None)
    return kind if isinstance(kind, str) and kind else type(dispatcher).__name__


class Presence:
    """One pool's registry entry.

    Args:
        registry: where to record it; None records nothing (every method is then a no-op).
        clock: supplies ``started_at`` and ``last_seen_at``.
        worker_id, queues, concurrency, heartbeat_interval: the pool's settings, as recorded.
        handlers: the pool's handler registry (its job types are read again at each refresh, so
            handlers registered later are listed).
        dispatcher: the pool's dispatcher (recorded as :func:`dispatcher_kind`).
        ratelog: the pool's rate-limited log.
    """

    def __init__(
        self,
        *,
        registry: WorkerRegistry | None,
        clock: Clock,
        worker_id: str,
        queues: Sequence[str] | None,
        handlers: Mapping[str, Any],
        concurrency: int,
        heartbeat_interval: float,
        dispatcher: Dispatcher,
        ratelog: RateLimitedLog,
    ) -> None:
        from tether import __version__

        self._registry = registry
        self._clock = clock
        self._worker_id = worker_id
        self._queues = None if queues is None else tuple(queues)
        self._handlers = handlers
        self._concurrency = concurrency
        self._heartbeat_interval = heartbeat_interval
        self._dispatcher = dispatcher_kind(dispatcher)
        self._version = __version__
        self._host = socket.gethostname()
        self._ratelog = ratelog
        self._lock = threading.Lock()  # one write at a time; withdraw waits for a refresh under way
        self._started_at: datetime | None = None
        self._withdrawn = False
        self._next_prune = 0.0  # monotonic; the first write prunes
        self.entry: WorkerEntry | None = None  # the last entry written

    def _entry(self, now: datetime) -> WorkerEntry:
        assert self._started_at is not None
        return WorkerEntry(
            worker_id=self._worker_id,
            host=self._host,
            pid=os.getpid(),
            queues=self._queues,
            job_types=sorted(self._handlers),
            concurrency=self._concurrency,
            version=self._version,
            dispatcher=self._dispatcher,
            heartbeat_interval=self._heartbeat_interval,
            started_at=self._started_at,
            last_seen_at=now,
        )

    def announce(self) -> bool:
        """Record the entry as started now; True if it was written.  Never raises."""
        if self._registry is None:
            return False
        with self._lock:
            try:
                self._started_at = self._clock.now()
            except BaseException as exc:  # noqa: BLE001 - a clock that fails now is tried again at the refresh
                self._failed("record", exc)
                return False
        return self.refresh_once()

    def refresh_once(self) -> bool:
        """Write the entry with ``last_seen_at = now`` (recording it again if it was pruned or
        removed meanwhile), and prune stale entries when :data:`PRUNE_EVERY` has passed; True if
        the entry was written.  Does nothing after :meth:`withdraw`.  Never raises."""
        if self._registry is None:
            return False
        with self._lock:
            if self._withdrawn:
                return False
            try:
                now = self._clock.now()
                if self._started_at is None:  # the clock failed at announce
                    self._started_at = now
                entry = self._entry(now)
                self._registry.record_worker(entry)
                self.entry = entry
            except BaseException as exc:  # noqa: BLE001 - information only: retried at the next refresh
                self._failed("refresh", exc)
                return False
            if time.monotonic() >= self._next_prune:
                self._next_prune = time.monotonic() + PRUNE_EVERY.total_seconds()
                try:
                    pruned = self._registry.prune_workers(older_than=now - PRUNE_AFTER)
                except BaseException as exc:  # noqa: BLE001
                    self._failed("prune", exc)
                else:
                    if pruned:
                        logger.info("worker %s: pruned %d worker registry entries unseen since %s", self._worker_id, pruned,
                                    now - PRUNE_AFTER)
            return True

    def withdraw(self) -> bool:
        """Delete the entry (the end of a clean stop); later refreshes write nothing.  True if an
        entry was deleted.  Never raises."""
        if self._registry is None:
            return False
        with self._lock:
            self._withdrawn = True
            try:
                return self._registry.remove_worker(self._worker_id)
            except BaseException as exc:  # noqa: BLE001 - the entry turns gone, then is pruned
                self._failed("remove", exc)
                return False

    def _failed(self, what: str, exc: BaseException) -> None:
        self._ratelog(
            "registry", logging.WARNING, "worker %s: could not %s its worker registry entry (%s); information only, "
            "tried again at the next heartbeat", self._worker_id, what, describe_failure(exc, 300),
        )


__all__ = ["Presence", "dispatcher_kind"]
