"""Queue controls of the in-memory repository: pause, running limits (per queue and per key) and rate limits, in memory.

A mixin of :class:`~tether.adapters.memory.InMemoryJobRepository` (which supplies the lock and the
jobs): the stored :class:`~tether.domain.queues.QueueState` of each queue, the count of each
rate-limited queue's current window, and the room a lease has in a queue
(:func:`~tether.domain.queues.lease_room`), all under the repository's one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime

import attrs
from tether.domain.job import Job, JobStatus
from tether.domain.queues import (
    QueueState,
    counts_as_running,
    lease_room,
    validate_max_running,
    validate_max_running_per_key,
    validate_queue_name,
    validate_rate,
    window_start_micros,
)
from tether.domain.timeutil import ensure_utc, from_micros


class MemoryQueueControls:
    """``set_queue_paused``, ``set_queue_limit``, ``set_queue_key_limit``, ``set_queue_rate``,
    ``queue_states``, ``count_by_queue``, ``count_running_by_key``, and the room of a lease in a
    queue (``_room``, ``_started``) and per key (``_key_holds``, ``_key_full``, ``_hold_key``)."""

    _lock: threading.Condition
    _jobs: dict[int, Job]
    _running: set[int]

    def _init_queue_controls(self) -> None:
        self._queue_states: dict[str, QueueState] = {}
        self._windows: dict[str, tuple[int, int]] = {}  # rate-limited queue -> (window start µs, starts)

    def _room(self, queue: str, now: datetime) -> int | None:
        """How many jobs of ``queue`` may be leased now (None: no limit); with the lock held."""
        state = self._queue_states.get(queue)
        if state is None or not state.restricted:
            return None
        running = started = 0
        if not state.paused and state.max_running is not None:
            running = sum(1 for i in self._running if self._jobs[i].queue == queue and counts_as_running(self._jobs[i], now))
        period = state.rate_period_micros
        if not state.paused and period is not None:
            window, count = self._windows.get(queue, (None, 0))
            started = count if window == window_start_micros(now, period) else 0
        return lease_room(state, running, started)

    def _key_holds(self, queue: str, now: datetime) -> dict[str, int] | None:
        """Per concurrency key, the jobs of ``queue`` counting as running at ``now``; None when the
        queue has no per-key limit (or is paused); with the lock held."""
        state = self._queue_states.get(queue)
        if state is None or state.paused or state.max_running_per_key is None:
            return None
        holds: dict[str, int] = {}
        for i in self._running:
            job = self._jobs[i]
            if job.queue == queue and job.concurrency_key is not None and counts_as_running(job, now):
                holds[job.concurrency_key] = holds.get(job.concurrency_key, 0) + 1
        return holds

    def _key_full(self, queue: str, job: Job, holds: dict[str, int] | None) -> bool:
        """True when ``job``'s key is at its queue's per-key limit (``holds``: :meth:`_key_holds`)."""
        if holds is None or job.concurrency_key is None:
            return False
        limit = self._queue_states[queue].max_running_per_key
        return limit is not None and holds.get(job.concurrency_key, 0) >= limit

    def _hold_key(self, job: Job, holds: dict[str, int] | None) -> None:
        """Count ``job``, just leased, in ``holds`` (:meth:`_key_holds`)."""
        if holds is not None and job.concurrency_key is not None:
            holds[job.concurrency_key] = holds.get(job.concurrency_key, 0) + 1

    def count_running_by_key(self, queue: str, concurrency_key: str, *, now: datetime) -> int:
        now = ensure_utc(now, "now")
        with self._lock:
            return sum(
                1 for i in self._running
                if self._jobs[i].queue == queue and self._jobs[i].concurrency_key == concurrency_key
                and counts_as_running(self._jobs[i], now)
            )

    def _started(self, queue: str, now: datetime) -> None:
        """Count one start in ``queue``'s current rate window (with the lock held)."""
        state = self._queue_states.get(queue)
        period = None if state is None else state.rate_period_micros
        if period is None:
            return
        window = window_start_micros(now, period)
        current, count = self._windows.get(queue, (window, 0))
        self._windows[queue] = (window, count + 1 if current == window else 1)

    def _is_paused(self, queue: str) -> bool:
        state = self._queue_states.get(queue)
        return state is not None and state.paused

    def _write_queue_state(self, queue: str, now: datetime, **changes: object) -> QueueState:
        with self._lock:
            state = self._queue_states.get(queue) or QueueState(queue)
            state = attrs.evolve(state, updated_at=now, **changes)  # type: ignore[misc]
            self._queue_states[queue] = state
            return state

    def set_queue_paused(self, queue: str, paused: bool, *, now: datetime) -> QueueState:
        queue = validate_queue_name(queue)
        now = ensure_utc(now, "now")
        return self._write_queue_state(queue, now, paused=bool(paused))

    def set_queue_limit(self, queue: str, max_running: int | None, *, now: datetime) -> QueueState:
        queue = validate_queue_name(queue)
        limit = None if max_running is None else validate_max_running(max_running)
        now = ensure_utc(now, "now")
        return self._write_queue_state(queue, now, max_running=limit)

    def set_queue_key_limit(self, queue: str, max_running_per_key: int | None, *, now: datetime) -> QueueState:
        queue = validate_queue_name(queue)
        limit = None if max_running_per_key is None else validate_max_running_per_key(max_running_per_key)
        now = ensure_utc(now, "now")
        return self._write_queue_state(queue, now, max_running_per_key=limit)

    def set_queue_rate(
        self, queue: str, rate_limit: int | None, rate_period: float | None, *, now: datetime
    ) -> QueueState:
        queue = validate_queue_name(queue)
        limit, period = (None, None) if rate_limit is None and rate_period is None else validate_rate(rate_limit, rate_period)
        now = ensure_utc(now, "now")
        with self._lock:
            self._windows.pop(queue, None)  # a new rate counts afresh
            return self._write_queue_state(queue, now, rate_limit=limit, rate_period=period)

    def queue_states(self) -> list[QueueState]:
        with self._lock:
            states = [
                attrs.evolve(s, window_start=from_micros(self._windows[s.name][0]), window_starts=self._windows[s.name][1])
                if s.name in self._windows and s.rate_limit is not None else s
                for s in self._queue_states.values()
            ]
        return sorted(states, key=lambda s: s.name)

    def count_by_queue(self, *, job_types: Sequence[str] | None = None) -> dict[str, dict[JobStatus, int]]:
        types = None if job_types is None else set(job_types)
        counts: dict[str, dict[JobStatus, int]] = {}
        with self._lock:
            for job in self._jobs.values():
                if types is None or job.job_type in types:
                    counts.setdefault(job.queue, {s: 0 for s in JobStatus})[job.status] += 1
        return counts


__all__ = ["MemoryQueueControls"]
