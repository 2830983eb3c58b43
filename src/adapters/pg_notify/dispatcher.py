"""The listening dispatcher: the polling dispatcher, woken by PostgreSQL notifications and due-time timers.

:class:`ListeningDispatcher` leases exactly as the polling dispatcher it wraps (every ``acquire``
is the polling one, so the poll stays the safety net: a lost notification costs at most one
``poll_interval``).  What it adds:

- a :class:`~.listener.PgListener` on the schema's channel, started by the first ``acquire`` (a
  process that only enqueues holds no listening connection);
- for a notification of a job already due, of a queue some acquirer here serves: the waiting
  acquirers are woken at once (the next lease query runs within milliseconds of the commit);
- for one due later (delayed, retried, snoozed): a :class:`~.due_timer.DueTimer` wakes them when
  it is due;
- after each (re)connection of the listener: one poll, for whatever committed while no one listened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from tether.adapters.pg_notify.due_timer import DueTimer
from tether.adapters.pg_notify.listener import PgListener
from tether.domain.job import Job
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

log = logging.getLogger("tether.adapters.pg_notify")


class WakeablePoller(Dispatcher, Protocol):
    """The polling dispatcher as this module uses it: a dispatcher whose waiting acquirers
    :meth:`work_arrived` wakes (and whose idle backoff it resets)."""

    def work_arrived(self) -> None:
        """Wake every waiting acquirer to query again now."""
        ...


def parse_payload(payload: str) -> tuple[float, str] | None:
    """``"<Unix seconds> <queue>"`` -> ``(seconds, queue)``; None for any other text."""
    due, _, queue = payload.partition(" ")
    try:
        return float(due), queue
    except ValueError:
        return None


class ListeningDispatcher(Dispatcher):
    """A polling dispatcher woken through PostgreSQL ``LISTEN`` (see the module docstring).

    Args:
        polling: the polling dispatcher that leases (it keeps its ``poll_interval``).
        clock: the clock the polling dispatcher leases with (due times are compared on it).
        connect: opens a psycopg connection to the database, outside any pool.
        channel: the channel the repository notifies (``PgWakeups.enable_wakeups``).
    """

    #: How worker pools on this dispatcher are listed in the worker registry.
    kind = "listen"
    #: Its notify only wakes this process's threads (see ``Dispatcher.notify_blocks``).
    notify_blocks = False

    def __init__(self, polling: WakeablePoller, clock: Clock, connect: Callable[[], Any], channel: str) -> None:
        self.polling = polling
        self.clock = clock
        self.channel = channel
        self.listener = PgListener(connect, channel, on_notify=self._on_payload, on_connected=polling.work_arrived)
        self.timer = DueTimer(clock, polling.work_arrived)
        self._lock = threading.Lock()
        self._served: dict[str, frozenset[str] | None] = {}  # worker id -> its queues (None: all)

    def _serves(self, queue: str) -> bool:
        with self._lock:
            served = list(self._served.values())
        return not served or any(queues is None or queue in queues for queues in served)

    def _on_payload(self, payload: str) -> None:
        parsed = parse_payload(payload)
        if parsed is None:
            log.debug("ignoring a notification on %s: %r", self.channel, payload[:100])
            return
        due, queue = parsed
        if not self._serves(queue):
            return
        if due <= self.clock.now().timestamp():
            self.polling.work_arrived()
        else:
            self.timer.add(due)

    def notify(self, jobs: Sequence[Job]) -> None:
        """Wake this process's waiting acquirers (other processes hear the commit's ``NOTIFY``)."""
        self.polling.notify(jobs)

    def acquire(
        self,
        *,
        queues: Sequence[str] | None,
        worker_id: str,
        limit: int,
        lease_timeout: float,
        max_wait: float,
        listed_order: bool = False,
        job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """As :meth:`PollingDispatcher.acquire` (``listed_order`` and ``job_types`` included); the
        first call starts the listener.

        Raises:
            StorageUnavailable: from the repository (the caller backs off).
        """
        with self._lock:
            self._served[worker_id] = None if queues is None else frozenset(queues)
        self.listener.start()
        return self.polling.acquire(
            queues=queues, worker_id=worker_id, limit=limit, lease_timeout=lease_timeout, max_wait=max_wait,
            listed_order=listed_order, **({} if job_types is None else {"job_types": job_types}),
        )

    def leases_from(self, repository: JobRepository) -> bool:
        """As the polling dispatcher: True for its own repository."""
        return self.polling.leases_from(repository)

    def leased_directly(self, jobs: Sequence[Job]) -> None:
        """Nothing to retire (no messages are kept)."""

    def maintain(self, now: datetime) -> None:
        """Nothing to maintain."""
        self.polling.maintain(now)

    def wake(self) -> None:
        """Make every blocked :meth:`acquire` return at once."""
        self.polling.wake()

    def close(self) -> None:
        """Stop the listener and the timer, then close the polling dispatcher (the repository is the caller's)."""
        self.listener.stop()
        self.timer.stop()
        self.polling.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(channel={self.channel!r}, polling={self.polling!r})"


__all__ = ["ListeningDispatcher", "WakeablePoller", "parse_payload"]
