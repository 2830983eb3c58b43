"""The sweep: the Redis Streams dispatcher's safety net, which re-publishes the due jobs nobody took.

Delivery never depends on a stream entry: an entry lost with a failed publish, trimmed away,
claimed from a dead consumer or never sent while Redis was down costs latency, never a job,
because the sweep finds every due job in the repository.

* **Cadence** (:meth:`Sweeper.upkeep`, behind the dispatcher's ``maintain``, which the worker pool
  calls about once a second and ``acquire`` calls every ``sweep_interval``): always sends the
  deferred acknowledgements and publishes this process's due timers; then runs a pass only when it
  wins the ``SET {prefix}:sweep-lock NX PX <sweep_interval>`` lock, so one process per interval
  sweeps.  The dispatcher's ``sweep`` forces a pass.
* **A pass**: first :meth:`~tether.adapters.redis_streams.reclaimer.Reclaimer.reclaim_once`, then
  :meth:`Sweeper.sweep_once`, which re-publishes the due queued/retrying jobs
  (``repository.due_jobs``, up to :data:`SWEEP_LIMIT`, at most ``maxlen`` per queue), each at most
  once per ``sweep_interval`` however many workers sweep (``SET {prefix}:swept:<id> 1 NX PX
  <interval>``).  It also puts every job falling due before the next pass on this process's timer,
  so a job whose enqueuer kept no timer (the CLI, a process that exited) is published when due.
* **Consumers left behind** by processes long gone are pruned in a pass at most once per
  :data:`~.members.PRUNE_INTERVAL` per process (:meth:`~.members.GroupMembers.maybe_prune`).
* **Lagging queues**: a queue whose stream still holds entries not yet delivered to the group (its
  ``last-generated-id`` is past the group's ``last-delivered-id``) is skipped that round: its
  consumers are behind, and re-publishing would only add duplicates; once they catch up, anything
  missing is published.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs
import redis
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.redis_streams.acknowledger import Acknowledger
from tether.adapters.redis_streams.connection import RedisConnection
from tether.adapters.redis_streams.health import RedisHealth
from tether.adapters.redis_streams.keys import is_valid_queue
from tether.adapters.redis_streams.members import GroupMembers
from tether.adapters.redis_streams.publisher import Publisher
from tether.adapters.redis_streams.reclaimer import Reclaimer
from tether.adapters.redis_streams.settings import StreamSettings
from tether.domain.errors import StorageUnavailable
from tether.domain.job import Job
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

#: At most this many due jobs are re-published per sweep.
SWEEP_LIMIT = 1000


@attrs.frozen
class SweepResult:
    """What one :meth:`Sweeper.sweep_once` did.

    Attributes:
        published: jobs re-published (due now, not swept by any process in the last interval).
        due_soon: jobs falling due before the next pass, offered to this process's timer (which
            holds each job once, however many passes offer it).
        lagging: queues skipped because their consumers are behind.
    """

    published: int = 0
    due_soon: int = 0
    lagging: frozenset[str] = frozenset()


class Sweeper:
    """Runs the sweep at its cadence, or on demand (see the module docstring).

    Args:
        settings: the dispatcher's settings (keys, group, consumer name: the sweep lock's value;
            ``sweep_interval``: between passes, and the least time between two re-publications of
            one job; ``maxlen``: the most jobs of one queue re-published by one pass).
        connection: where commands go.
        health: records Redis errors and successes; no pass starts while Redis is down.
        publisher: re-publishes, keeps the timer, knows the queues.
        acks: its deferred acknowledgements are sent by every upkeep.
        reclaimer: claims dead consumers' entries at the start of a pass.
        members: prunes the consumers left behind, in a pass now and then.
        repository: where due jobs are read.
        clock: supplies ``now`` for the cadence's passes.
        limited_log: the dispatcher's rate-limited log (key ``"error"``).
    """

    def __init__(
        self,
        settings: StreamSettings,
        connection: RedisConnection,
        health: RedisHealth,
        publisher: Publisher,
        acks: Acknowledger,
        reclaimer: Reclaimer,
        members: GroupMembers,
        repository: JobRepository,
        clock: Clock,
        limited_log: RateLimitedLog,
    ) -> None:
        self._connection = connection
        self._members = members
        self._health = health
        self._publisher = publisher
        self._acks = acks
        self._reclaimer = reclaimer
        self._repository = repository
        self._clock = clock
        self._keys = settings.keys
        self._group = settings.group
        self._consumer = settings.consumer
        self._sweep_interval = settings.sweep_interval
        self._sweep_px = max(1, int(settings.sweep_interval * 1000))  # sweep lock and swept markers, ms
        self._maxlen = settings.maxlen
        self._log_limited = limited_log
        self._lock = threading.Lock()
        self._next_sweep = 0.0

    def maybe_upkeep(self) -> None:
        """From ``acquire``: at most once per ``sweep_interval`` per process, run :meth:`upkeep`
        (a repository failure is logged at a bounded rate, not raised)."""
        now_m = time.monotonic()
        with self._lock:
            if now_m < self._next_sweep or self._connection.closed:
                return
            self._next_sweep = now_m + self._sweep_interval
        if self._health.is_down():
            return
        try:
            self.upkeep(self._clock.now(), force=False)
        except StorageUnavailable as exc:
            self._log_limited("error", logging.WARNING, "sweep skipped: the repository is unavailable (%s)", exc)

    def upkeep(self, now: datetime, *, force: bool) -> None:
        """Send deferred acks, publish due timers, then reclaim and sweep if ``force`` or this
        process wins the sweep lock.  Redis errors are recorded (backoff, rate-limited log).

        Raises:
            StorageUnavailable: the repository could not be read.
        """
        if self._connection.closed:
            return
        try:
            self._acks.flush()
            self._publisher.publish_timers()
            if force or self._connection.client.set(self._keys.sweep_lock, self._consumer, nx=True, px=self._sweep_px):
                queues = self._publisher.known_queues(refresh=True)
                self._reclaimer.reclaim_once(queues)
                self.sweep_once(queues, now)
                self._members.maybe_prune(queues)
            self._health.record_success()
        except redis.RedisError as exc:
            self._health.record_failure(exc)

    def sweep_once(self, queues: Iterable[str], now: datetime) -> SweepResult:
        """Re-publish the due jobs nobody took, and put the jobs falling due before the next pass
        on this process's timer (``now``: an aware UTC datetime).

        Raises:
            StorageUnavailable: the repository could not be read.
            redis.RedisError: a command failed (a pass is all-or-nothing only per round trip).
        """
        known = sorted(queues)
        lagging = self._lagging_queues(known)
        if known and len(lagging) == len(known):
            return SweepResult(lagging=frozenset(lagging))  # every queue is behind: publishing would duplicate
        # One read for both: the jobs due by the next sweep hold every job due now, in lease order,
        # unless the limit cut them short; only then is "due now" read on its own.
        horizon = now + timedelta(seconds=self._sweep_interval)
        upcoming = self._repository.due_jobs(now=horizon, queues=None, limit=SWEEP_LIMIT)
        soon = [j for j in upcoming if j.scheduled_at > now]
        if soon:
            self._publisher.remember_later(soon)
        if len(upcoming) < SWEEP_LIMIT:
            due_now = [j for j in upcoming if j.scheduled_at <= now]
        else:
            due_now = self._repository.due_jobs(now=now, queues=None, limit=SWEEP_LIMIT)
        due = [j for j in due_now if j.queue not in lagging]
        per_queue: dict[str, int] = {}
        kept: list[Job] = []
        for job in due:  # more than maxlen per stream would be trimmed at once: publish those next round
            if is_valid_queue(job.queue) and per_queue.get(job.queue, 0) < self._maxlen:
                per_queue[job.queue] = per_queue.get(job.queue, 0) + 1
                kept.append(job)
        published = 0
        if kept:
            pipe = self._connection.client.pipeline(transaction=False)
            for job in kept:
                pipe.set(self._keys.swept(job.id), 1, nx=True, px=self._sweep_px)
            fresh = [job for job, won in zip(kept, pipe.execute()) if won]
            published = self._publisher.publish((job.id, job.queue) for job in fresh)
        return SweepResult(published=published, due_soon=len(soon), lagging=frozenset(lagging))

    def _lagging_queues(self, queues: Sequence[str]) -> set[str]:
        """Queues whose stream holds entries not yet delivered to the group (consumers are behind,
        so re-publishing there only adds duplicates).  Compares the group's ``last-delivered-id``
        with the stream's ``last-generated-id``; the ``lag`` field of XINFO GROUPS is not used, as
        Redis cannot compute it reliably once undelivered entries were trimmed."""
        if not queues:
            return set()
        pipe = self._connection.client.pipeline(transaction=False)
        for queue in queues:
            stream = self._keys.stream(queue)
            pipe.xinfo_stream(stream)
            pipe.xinfo_groups(stream)
        results = pipe.execute(raise_on_error=False)
        lagging: set[str] = set()
        for index, queue in enumerate(queues):
            info, groups = results[2 * index], results[2 * index + 1]
            if isinstance(info, Exception) or isinstance(groups, Exception) or not info.get("length"):
                continue  # no stream (lost, or never published) or nothing in it: nothing pending delivery
            mine = [g for g in groups if g.get("name") == self._group]
            if not mine:
                lagging.add(queue)  # entries wait for a group no consumer has created yet
            elif entry_key(mine[0].get("last-delivered-id")) < entry_key(info.get("last-generated-id")):
                lagging.add(queue)
        return lagging


def entry_key(entry_id: Any) -> tuple[int, int]:
    """A stream entry id ``"<ms>-<seq>"`` as a sortable pair (``(0, 0)`` if absent or malformed)."""
    try:
        ms, _, seq = str(entry_id).partition("-")
        return int(ms), int(seq or 0)
    except ValueError:
        return (0, 0)


__all__ = ["SWEEP_LIMIT", "SweepResult", "Sweeper", "entry_key"]
