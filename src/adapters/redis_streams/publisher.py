"""Publishing: the Redis Streams dispatcher tells workers "look at job N" once the job is committed.

* :meth:`Publisher.notify` (called after the enqueue commits) sends one ``XADD <stream of the job's
  queue> MAXLEN ~ <maxlen> * id <job id>`` per due job, pipelined, plus ``SADD`` of the queue name
  to the application's queue registry (at most once a second per queue and process).  A failed
  publish is logged (at most about one line a second) and swallowed: the enqueue has committed,
  and the sweep will publish the job.  While Redis is down (:mod:`.health`) nothing is sent.
* Batches: a stream given at least :data:`PUBLISH_SCRIPT_MIN` ids in one publish gets them through
  :data:`PUBLISH_SCRIPT`, which runs the XADDs server-side (one entry per job either way: only the
  number of commands the client encodes changes).
* Jobs due later: ``notify`` of a job due in the future puts it on this process's timer instead; a
  process that also acquires or runs ``maintain`` (a worker) publishes it when due
  (:meth:`Publisher.publish_timers`).  The sweep also puts every job falling due before its next
  pass on the sweeping process's timer, so a job whose enqueuer kept no timer (the CLI, a process
  that exited) is published when due; the sweep itself is the safety net.
* Bounded streams: every XADD trims its stream to about ``maxlen`` entries.  A trimmed entry is only
  a hint: the job it named is still queued in the repository, and the sweep re-publishes it once
  the queue's consumers have caught up.  So trimming costs latency for a backlog larger than
  ``maxlen``, never a job.
* Queues and ``queues=None``: a consumer with ``queues=None`` reads the streams of every queue in
  the registry set ``{prefix}:queues`` (fed by every publish and by the sweep; re-read at most
  every ``block`` seconds) plus the queues this process has published itself
  (:meth:`Publisher.known_queues`).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime

import redis
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.redis_streams.connection import RedisConnection
from tether.adapters.redis_streams.health import RedisHealth
from tether.adapters.redis_streams.keys import is_valid_queue
from tether.adapters.redis_streams.settings import StreamSettings
from tether.domain.job import Job
from tether.ports.clock import Clock

log = logging.getLogger("tether.dispatch.redis")

#: Adds one entry ``id <ARGV[i]>`` (i >= 2) per job id to the stream KEYS[1], trimmed like a single
#: XADD (``MAXLEN ~ ARGV[1]``); returns how many.  One command for a batch of one queue's jobs:
#: the server runs the XADDs, the client encodes one command instead of one per job.
PUBLISH_SCRIPT = """
for i = 2, #ARGV do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'id', ARGV[i])
end
return #ARGV - 1
"""
#: A stream given at least this many ids in one publish gets them through :data:`PUBLISH_SCRIPT`,
#: in calls of at most :data:`PUBLISH_CHUNK` ids (each call holds the server for about a
#: millisecond per 500 ids); fewer go as plain XADDs in the pipeline.
PUBLISH_SCRIPT_MIN, PUBLISH_CHUNK = 16, 1000
#: A process adds a queue to the registry set at most once per this many seconds (the sweep also
#: adds every queue it publishes), so a steady stream of enqueues costs one XADD each.
REGISTRY_REFRESH = 1.0
#: At most this many future jobs wait on this process's local timer (the sweep covers the rest).
TIMER_LIMIT = 10_000


class Publisher:
    """Publishes job ids to their queues' streams, now or when due (see the module docstring).

    Args:
        settings: the dispatcher's settings (keys, ``maxlen``; ``block``: how long a read of the
            queue registry is reused by :meth:`known_queues`).
        connection: where commands go.
        health: backoff and degraded mode (nothing is published while Redis is down).
        clock: supplies ``now`` for due checks.
        limited_log: the dispatcher's rate-limited log (key ``"error"``).
    """

    def __init__(
        self, settings: StreamSettings, connection: RedisConnection, health: RedisHealth, clock: Clock, limited_log: RateLimitedLog
    ) -> None:
        self._connection = connection
        self._health = health
        self._keys = settings.keys
        self._clock = clock
        self._maxlen = settings.maxlen
        self._block = settings.block
        self._log_limited = limited_log
        self._publish_many = connection.client.register_script(PUBLISH_SCRIPT)  # always called with client=<pipeline>
        self._lock = threading.Lock()
        self._local_queues: set[str] = set()
        self._registry_cache: tuple[float, frozenset[str]] = (0.0, frozenset())
        self._registered: dict[str, float] = {}  # queue -> monotonic time of this process's last SADD
        self._timers: list[tuple[datetime, int, str]] = []
        self._timed: set[tuple[datetime, int]] = set()  # (due, job id) on the timer: each once

    # -- publishing now --------------------------------------------------------------------------
    def notify(self, jobs: Sequence[Job]) -> None:
        """Publish the due jobs among ``jobs`` (called after their commit) and put the leasable
        jobs due later on this process's timer.  Never raises: a failure is logged at a bounded
        rate and left to the sweep."""
        try:
            now = self._clock.now()
            due = [job for job in jobs if job.status.is_leasable and job.scheduled_at <= now]
            later = [job for job in jobs if job.status.is_leasable and job.scheduled_at > now]
            if later:
                self.remember_later(later)
            if not due or self._connection.closed:
                return
            if self._health.is_down():
                self._log_limited(
                    "error",
                    logging.WARNING,
                    "Redis at %s is down: %d job(s) not published now; the sweep will publish them",
                    self._connection.url,
                    len(due),
                )
                return
            self.publish((job.id, job.queue) for job in due)
        except redis.RedisError as exc:
            self._health.record_failure(exc)
        except Exception:  # never let a publish fail the (committed) enqueue
            log.exception("publishing %d job(s) failed; the sweep will publish them", len(jobs))

    def publish(self, targets: Iterable[tuple[int, str]]) -> int:
        """XADD each ``(job id, queue)`` to its queue's stream, and SADD the queues to the registry
        unless this process did so in the last :data:`REGISTRY_REFRESH` seconds: one round trip.
        A single XADD is sent as a plain command (the enqueue-latency path); more go in a pipeline,
        where a stream with many ids gets them by :data:`PUBLISH_SCRIPT`.  Returns how many
        entries were added.

        Raises:
            redis.RedisError: the round trip failed (nothing is retried here).
        """
        targets = list(targets)
        if not targets:
            return 0
        queues = {queue for _, queue in targets}
        clock = time.monotonic()
        with self._lock:
            stale = sorted(q for q in queues if clock - self._registered.get(q, -REGISTRY_REFRESH) >= REGISTRY_REFRESH)
        if len(targets) == 1 and not stale:
            job_id, queue = targets[0]
            self._connection.client.xadd(self._keys.stream(queue), {"id": job_id}, maxlen=self._maxlen, approximate=True)
            return 1
        by_stream: dict[str, list[int]] = {}
        for job_id, queue in targets:
            by_stream.setdefault(self._keys.stream(queue), []).append(job_id)
        pipe = self._connection.client.pipeline(transaction=False)
        for stream, ids in by_stream.items():
            if len(ids) < PUBLISH_SCRIPT_MIN:
                for job_id in ids:
                    pipe.xadd(stream, {"id": job_id}, maxlen=self._maxlen, approximate=True)
                continue
            for start in range(0, len(ids), PUBLISH_CHUNK):
                self._publish_many(keys=[stream], args=[self._maxlen, *ids[start : start + PUBLISH_CHUNK]], client=pipe)
        if stale:
            pipe.sadd(self._keys.registry, *stale)
        pipe.execute()
        with self._lock:
            self._local_queues |= queues
            for queue in stale:
                self._registered[queue] = clock
        return len(targets)

    # -- jobs due later, published by this process when due ----------------------------------------
    def remember_later(self, jobs: Sequence[Job]) -> None:
        """Keep future jobs on a local timer so a process that both notifies and acquires (a worker
        retrying with backoff, say) publishes them right when due rather than at the next sweep.
        Best effort: the timer dies with the process and is capped at :data:`TIMER_LIMIT` entries;
        the sweep publishes whatever it misses."""
        with self._lock:
            for job in jobs:
                if len(self._timers) >= TIMER_LIMIT:
                    break
                if (job.scheduled_at, job.id) in self._timed:
                    continue  # notified and swept, say: published once
                self._timed.add((job.scheduled_at, job.id))
                heapq.heappush(self._timers, (job.scheduled_at, job.id, job.queue))

    def next_timer_in(self) -> float:
        """Seconds until the next local timer is due (by the clock port), or infinity."""
        with self._lock:
            if not self._timers:
                return float("inf")
            first = self._timers[0][0]
        return max(0.0, (first - self._clock.now()).total_seconds())

    def publish_timers(self) -> None:
        """Publish the jobs on the timer that are due now (by the clock port); while Redis is down
        they are dropped from the timer (the fallback lease, and later the sweep, find them).
        Redis errors are recorded by :mod:`.health`, never raised."""
        with self._lock:
            if not self._timers:
                return
        now = self._clock.now()
        due: list[tuple[datetime, int, str]] = []
        with self._lock:
            while self._timers and self._timers[0][0] <= now:
                due.append(heapq.heappop(self._timers))
                self._timed.discard((due[-1][0], due[-1][1]))
        if not due or self._health.is_down():
            return  # while Redis is down, the fallback lease and later the sweep find them
        try:
            self.publish((job_id, queue) for _, job_id, queue in due)
        except redis.RedisError as exc:
            self._health.record_failure(exc)

    # -- the queue registry ----------------------------------------------------------------------
    def known_queues(self, *, refresh: bool = False) -> set[str]:
        """The queues in the registry (read again after ``block`` seconds, or now with ``refresh``)
        plus those this process published.

        Raises:
            redis.RedisError: the registry could not be read.
        """
        expires, cached = self._registry_cache
        if refresh or time.monotonic() >= expires:
            names = {str(q) for q in self._connection.client.smembers(self._keys.registry)}  # type: ignore[union-attr]
            cached = frozenset(q for q in names if is_valid_queue(q))
            self._registry_cache = (time.monotonic() + self._block, cached)
        with self._lock:
            return set(cached) | self._local_queues


__all__ = ["PUBLISH_CHUNK", "PUBLISH_SCRIPT", "PUBLISH_SCRIPT_MIN", "REGISTRY_REFRESH", "TIMER_LIMIT", "Publisher"]
