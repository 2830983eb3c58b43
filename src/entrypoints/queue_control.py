"""Queue pause, resume, running limits and rate limits, part of :class:`~tether.entrypoints.service.Tether`.

The rules live in :mod:`tether.domain.queues` and are enforced by the store on every lease; this
mixin validates the input, writes the queue's controls and, when a queue may start more jobs
(resumed, a limit raised or cleared), tells the dispatcher about its due jobs at once
(:meth:`QueueControl._announce`): polling wakes this process's idle workers, Redis Streams
publishes the jobs so that an idle worker of any process leases them.
"""

from __future__ import annotations

import builtins
import enum
import logging

from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.domain.queues import (
    QueueInfo,
    QueueState,
    validate_max_running,
    validate_max_running_per_key,
    validate_queue_name,
    validate_rate,
)
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether")

#: Most due jobs of a queue announced to the dispatcher when it may start more (the sweep or the
#: next poll finds the others).
ANNOUNCED_ON_RESUME = 1_000


class _Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "unset"


#: A limit of :meth:`QueueControl.limit_queue` not given: it stays as stored.
UNSET = _Unset.UNSET


class QueueControl:
    """The queue side of the ``Tether`` API (a mixin: ``Tether`` supplies the attributes)."""

    repository: JobRepository
    dispatcher: Dispatcher
    clock: Clock

    def pause_queue(self, name: str) -> QueueState:
        """Pause queue ``name`` (it need not have any job yet): from the next lease statement of
        any worker on, none of its jobs is leased.  Enqueue keeps accepting jobs; running jobs
        finish.  Idempotent.  Returns the queue's state as stored.

        Raises:
            ValidationError: ``name`` is not a queue name (field ``queue``); nothing written.
            StorageUnavailable: the store could not be reached.
        """
        return self.repository.set_queue_paused(validate_queue_name(name), True, now=self.clock.now())

    def resume_queue(self, name: str) -> QueueState:
        """Resume queue ``name``: its due jobs are leased again, and idle workers are woken at
        once.  Idempotent.  Returns the queue's state as stored.

        Raises:
            ValidationError: ``name`` is not a queue name (field ``queue``); nothing written.
            StorageUnavailable: the store could not be reached.
        """
        state = self.repository.set_queue_paused(validate_queue_name(name), False, now=self.clock.now())
        self._announce(state.name)
        return state

    def limit_queue(
        self, name: str, max_running: int | None | _Unset = UNSET, *, max_running_per_key: int | None | _Unset = UNSET
    ) -> QueueState:
        """At most ``max_running`` (1 to 1,000,000) jobs of queue ``name`` running at once across
        every worker, and at most ``max_running_per_key`` (1 to 1,000,000) of its jobs with the
        same ``concurrency_key`` (jobs enqueued without a key are not limited by it); None clears
        a limit, a limit not given stays as it is.  Jobs already running beyond a lowered limit
        finish; no new one starts until it is below it.  Returns the queue's state as stored.

        Raises:
            ValidationError: a bad queue name (field ``queue``) or limit (field ``max_running``
                or ``max_running_per_key``), or neither limit given; nothing written.
            StorageUnavailable: the store could not be reached.
        """
        queue = validate_queue_name(name)
        if isinstance(max_running, _Unset) and isinstance(max_running_per_key, _Unset):
            raise ValidationError("max_running", "give max_running, max_running_per_key or both")
        limit = per_key = None
        if not isinstance(max_running, _Unset) and max_running is not None:
            limit = validate_max_running(max_running)
        if not isinstance(max_running_per_key, _Unset) and max_running_per_key is not None:
            per_key = validate_max_running_per_key(max_running_per_key)
        now = self.clock.now()
        state = None
        if not isinstance(max_running, _Unset):
            state = self.repository.set_queue_limit(queue, limit, now=now)
        if not isinstance(max_running_per_key, _Unset):
            state = self.repository.set_queue_key_limit(queue, per_key, now=now)
        assert state is not None
        self._announce(queue)
        return state

    def rate_limit_queue(self, name: str, starts: int | None, per: float | None = None) -> QueueState:
        """At most ``starts`` (1 to 1,000,000) jobs of queue ``name`` start per window of ``per``
        seconds (0.001 s to 366 days), across every worker; ``starts=None`` clears the rate
        limit.  Windows are fixed: multiples of ``per`` seconds since the Unix epoch (UTC), so
        ``rate_limit_queue("api", starts=100, per=60)`` allows 100 starts in each calendar minute.
        Every lease counts (first attempts and retries).  Returns the queue's state as stored.

        Raises:
            ValidationError: a bad queue name (``queue``), ``starts`` (field ``rate_limit``) or
                ``per`` (field ``rate_period``: missing, zero, negative, out of range); nothing written.
            StorageUnavailable: the store could not be reached.
        """
        queue = validate_queue_name(name)
        if starts is None:
            state = self.repository.set_queue_rate(queue, None, None, now=self.clock.now())
        else:
            limit, period = validate_rate(starts, per)
            state = self.repository.set_queue_rate(queue, limit, period, now=self.clock.now())
        self._announce(queue)
        return state

    def queues(self) -> builtins.list[QueueInfo]:
        """Every queue that holds a job or has stored controls, by name: its counts per status,
        its ``paused`` flag, its ``max_running`` (None: no limit), its ``max_running_per_key``
        (None: none) and its rate limit (``rate_limit`` starts per ``rate_period`` seconds; None: none).

        Raises:
            StorageUnavailable: the store could not be reached.
        """
        states = {s.name: s for s in self.repository.queue_states()}
        counts = self.repository.count_by_queue()
        infos = []
        for name in sorted(states.keys() | counts.keys()):
            state = states.get(name) or QueueState(name)
            infos.append(QueueInfo(name, state.paused, state.max_running, counts.get(name) or {s: 0 for s in JobStatus},
                                   rate_limit=state.rate_limit, rate_period=state.rate_period,
                                   max_running_per_key=state.max_running_per_key))
        return infos

    def _announce(self, queue: str) -> None:
        """Tell the dispatcher about up to :data:`ANNOUNCED_ON_RESUME` due jobs of ``queue``;
        never raises (a poll or the sweep finds them anyway)."""
        try:
            due = self.repository.due_jobs(now=self.clock.now(), queues=[queue], limit=ANNOUNCED_ON_RESUME)
            if due:
                self.dispatcher.notify(due)
        except Exception:
            logger.warning("could not announce the due jobs of queue %s to the dispatcher", queue, exc_info=True)


__all__ = ["ANNOUNCED_ON_RESUME", "UNSET", "QueueControl"]
