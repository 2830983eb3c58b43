"""What a worker pool knows of its queues' controls: which are limited or paused, refreshed from the store.

The store enforces pauses and running limits on every lease; the pool reads the controls only to
behave well around them:

- **no prefetch from a limited queue** (:attr:`QueueLimits.limited`): while any queue the pool
  serves has a running limit or a rate limit, the acquirer leases no job ahead of its free threads, so a pool never holds
  a limited queue's slots for jobs it cannot start yet;
- **a freed slot wakes waiting workers** (:meth:`QueueLimits.slot_freed`): when jobs of a limited
  queue leave ``running`` in this pool (completed, failed, released, snoozed, cancelled), as many
  of the queue's next due jobs are announced to the dispatcher (polling wakes this process's
  acquirers; Redis Streams publishes them, so idle workers of any process lease them).  The
  announcements of one queue are coalesced: at most one read of its due jobs per
  :data:`ANNOUNCE_INTERVAL` (the acquiring loop sends what is left, :meth:`QueueLimits.announce_freed`),
  so a busy limited queue costs one small read every few milliseconds, not one per job;
- **a new rate window wakes waiting workers** (:meth:`QueueLimits.announce_freed`): once per rate
  window of each rate-limited queue it serves, the pool announces up to ``rate_limit`` of the
  queue's due jobs, so with Redis Streams the jobs a spent window held back start when the next
  window opens, not at the next sweep;
- **idle means nothing runnable** (:meth:`QueueLimits.paused_names`): jobs waiting in a paused
  queue do not keep ``run(stop_when_idle=True)`` running.

The controls are read at most once per :data:`REFRESH_SECONDS` (:meth:`QueueLimits.refresh`,
called from the acquiring loop outside the pool's lock); a read that fails keeps the last answer.
A store without queue controls (a third-party repository) reads as none.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from tether.adapters.log_limits import RateLimitedLog
from tether.domain.job import Job
from tether.domain.queues import QueueState, window_start_micros
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

#: Seconds between two reads of the queue controls by one pool.
REFRESH_SECONDS = 1.0
#: Least seconds between two announcements of one limited queue's freed slots by one pool.
ANNOUNCE_INTERVAL = 0.02
#: Most due jobs announced at once for one queue.
ANNOUNCE_BATCH = 100


class QueueLimits:
    """The pool's view of its queues' controls (see the module docstring).

    Args:
        repository, dispatcher, clock: the ports.
        queues: the pool's queues (None: all).
        ratelog: the pool's rate-limited log.
    """

    def __init__(
        self,
        *,
        repository: JobRepository,
        dispatcher: Dispatcher,
        clock: Clock,
        queues: Sequence[str] | None,
        ratelog: RateLimitedLog,
    ) -> None:
        self._repository = repository
        self._dispatcher = dispatcher
        self._clock = clock
        self._queues = None if queues is None else frozenset(queues)
        self._ratelog = ratelog
        self._states: dict[str, QueueState] = {}
        self._read_at: float | None = None
        self._lock = threading.Lock()
        self._freed: dict[str, int] = {}  # limited queue -> slots freed since its last announcement
        self._announced_at: dict[str, float] = {}
        self._windows_announced: dict[str, int] = {}  # rate-limited queue -> window start (µs) announced
        self._freed_lock = threading.Lock()
        #: True while a queue this pool serves is limited (read without a lock: one bool).
        self.limited = False

    def refresh(self, *, force: bool = False) -> None:
        """Read the controls again if the last read is older than :data:`REFRESH_SECONDS` (or
        ``force``); never raises."""
        read_at = self._read_at
        if not force and read_at is not None and time.monotonic() - read_at < REFRESH_SECONDS:
            return
        if not self._lock.acquire(blocking=False):
            return  # another thread is reading them
        try:
            reader = getattr(self._repository, "queue_states", None)
            states = {s.name: s for s in reader()} if reader is not None else {}
            self._states = states
            self.limited = any(s.limited and (self._queues is None or s.name in self._queues) for s in states.values())
        except Exception:  # noqa: BLE001 - the store enforces the controls; this is only a view
            self._ratelog("queue-controls", logging.WARNING, "could not read the queue controls", exc_info=True)
        finally:
            self._read_at = time.monotonic()
            self._lock.release()

    def paused_names(self) -> frozenset[str]:
        """The paused queues, as last read (refreshed first when stale)."""
        self.refresh()
        return frozenset(name for name, s in self._states.items() if s.paused)

    def _new_windows(self) -> dict[str, int]:
        """The rate-limited queues this pool serves whose current rate window it has not announced
        yet, with their ``rate_limit`` (the window is then marked announced)."""
        found: dict[str, int] = {}
        states = self._states
        if not states:
            return found
        now = self._clock.now()
        for name, state in states.items():
            period = state.rate_period_micros
            if period is None or state.rate_limit is None or state.paused:
                continue
            if self._queues is not None and name not in self._queues:
                continue
            window = window_start_micros(now, period)
            with self._freed_lock:
                if self._windows_announced.get(name) == window:
                    continue
                self._windows_announced[name] = window
            found[name] = state.rate_limit
        return found

    def slot_freed(self, job: Job) -> None:
        """``job`` left ``running`` in this pool: if its queue is limited, note the freed slot and
        announce the queue's freed slots unless it was announced less than
        :data:`ANNOUNCE_INTERVAL` ago; never raises."""
        state = self._states.get(job.queue)
        if state is None or state.paused or (state.max_running is None and state.max_running_per_key is None):
            return
        with self._freed_lock:
            self._freed[job.queue] = self._freed.get(job.queue, 0) + 1
        self.announce_freed()

    def announce_freed(self) -> None:
        """Announce to the dispatcher, for each limited queue with slots freed since its last
        announcement at least :data:`ANNOUNCE_INTERVAL` ago, as many of its due jobs (at most
        :data:`ANNOUNCE_BATCH`); never raises."""
        windows = self._new_windows()
        if not self._freed and not windows:
            return
        now = time.monotonic()
        with self._freed_lock:
            ready = {q: n for q, n in self._freed.items() if now - self._announced_at.get(q, 0.0) >= ANNOUNCE_INTERVAL}
            for queue in ready:
                del self._freed[queue]
                self._announced_at[queue] = now
            for queue, starts in windows.items():
                ready[queue] = max(ready.get(queue, 0), starts)
        for queue, freed in ready.items():
            try:
                due = self._repository.due_jobs(now=self._clock.now(), queues=[queue], limit=min(freed, ANNOUNCE_BATCH))
                if due:
                    self._dispatcher.notify(due)
            except Exception:  # noqa: BLE001 - a poll, a refill or the sweep finds the jobs anyway
                self._ratelog("slot-freed", logging.WARNING, "could not announce freed slots of queue %s", queue,
                              exc_info=True)


__all__ = ["ANNOUNCE_BATCH", "ANNOUNCE_INTERVAL", "REFRESH_SECONDS", "QueueLimits"]
