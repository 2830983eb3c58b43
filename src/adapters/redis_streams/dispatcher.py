"""The Redis Streams dispatcher: :class:`RedisStreamsDispatcher`, the Dispatcher port's methods, wiring
the parts of :mod:`tether.adapters.redis_streams`.

``notify`` is the :mod:`.publisher`'s; ``maintain`` and ``sweep`` are the :mod:`.sweeper`'s; ``wake``
ends the :mod:`.consumer`'s blocked reads.  ``acquire`` is the one loop that uses them all, each
round in this order:

1. entries held for a retry (:mod:`.reclaimer`), if any are due;
2. the sweep, at most once per ``sweep_interval`` per process, and this process's due timers;
3. while Redis is down (:mod:`.health`): a lease straight from the repository, polling at the
   backoff interval (degraded mode);
4. in backlog mode: a lease straight from the repository (below);
5. otherwise ``XREADGROUP BLOCK`` on the queues' streams (creating the groups first, recreating
   them on ``NOGROUP``), in slices of at most ``block`` seconds, and the entries read turned into
   leases (:meth:`~tether.adapters.redis_streams.consumer.StreamConsumer.take`).

**Backlog mode**: when a read fills ``limit`` (more entries are probably waiting), the next
``acquire`` first leases straight from the repository (``repository.lease``, as polling does) and
returns what it got without touching Redis; for each job leased that way the acknowledger later
retires one entry of that job's queue (one entry buys one lease; what is not there then is not
carried over).  The first lease that finds nothing ends backlog mode and the worker blocks on the
streams again.  Likewise a worker pool refills its threads in the statement that writes its
completions (:meth:`~RedisStreamsDispatcher.leases_from`, as with polling) and tells
:meth:`~RedisStreamsDispatcher.leased_directly`, which owes one entry per job leased.  This keeps
a draining worker at polling's speed instead of paying a Redis round trip per lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime

import redis
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.redis_streams.acknowledger import Acknowledger
from tether.adapters.redis_streams.connection import RedisConnection
from tether.adapters.redis_streams.consumer import StreamConsumer
from tether.adapters.redis_streams.health import RedisHealth, is_nogroup
from tether.adapters.redis_streams.keys import StreamKeys
from tether.adapters.redis_streams.members import GroupMembers
from tether.adapters.redis_streams.publisher import Publisher
from tether.adapters.redis_streams.reclaimer import Reclaimer
from tether.adapters.redis_streams.settings import StreamSettings
from tether.adapters.redis_streams.sweeper import Sweeper
from tether.domain.job import Job
from tether.domain.validation import validate_queue
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

log = logging.getLogger("tether.dispatch.redis")


class RedisStreamsDispatcher(Dispatcher):
    """A :class:`~tether.ports.dispatcher.Dispatcher` on Redis Streams (see :mod:`tether.adapters.redis_streams`).

    Args:
        repository: the job repository (the truth; leases are taken there by id).
        clock: supplies ``now`` for leases and due checks.
        redis_url: ``redis://[[user]:password@]host:port/db``, ``rediss://...`` or ``unix://...``.
        prefix: key prefix and Redis Cluster hash tag of this application's keys.
        group: the consumer group name (one per application).
        consumer: this process's consumer name; default ``<hostname>-<pid>-<6 hex>``.
        block: the longest single ``XREADGROUP BLOCK`` in seconds; ``acquire`` blocks in slices of
            at most this, re-checking the sweep timer and the queue registry between slices.
        claim_idle: seconds an entry must sit unacknowledged before ``maintain`` claims it from its
            (presumed dead) consumer; also how long an id the repository cannot see is retried.
        sweep_interval: seconds between sweeps, and the least time between two re-publications of
            one job.
        maxlen: approximate maximum entries per stream (``XADD MAXLEN ~``).
        require_connection: raise DispatcherUnavailable (a ConfigurationError) at construction if Redis cannot be reached.
            By default an unreachable Redis is logged and the dispatcher starts degraded (leasing
            from the repository) and keeps retrying, since Redis may just be restarting.
        cluster: ``redis_url`` names one node (the seed) of a Redis Cluster.  The dispatcher reads
            the cluster's topology from it and talks straight to the master that owns the hash
            slot of ``{prefix}`` (all keys of the prefix live there), following that slot through
            resharding and failover (see :mod:`tether.adapters.redis_streams.cluster`).  Only
            ``redis://`` and ``rediss://`` URLs on database 0.

    Raises:
        ConfigurationError: the URL does not parse, the password/user is refused, the database
            index is invalid, the server is older than Redis 6.2, ``cluster`` is set but the server
            is not a cluster node, or ``cluster`` is not set but the server is one; the message
            names the URL with its password replaced by ``***``.
        ValidationError: a bad prefix, group, consumer name or number, or a non-bool ``cluster``
            (naming the argument).
    """

    #: How worker pools on this dispatcher are listed in the worker registry.
    kind = "redis"

    def __init__(
        self,
        repository: JobRepository,
        clock: Clock,
        redis_url: str,
        *,
        prefix: str = "tether",
        group: str = "tether",
        consumer: str | None = None,
        block: float = 1.0,
        claim_idle: float = 30.0,
        sweep_interval: float = 5.0,
        maxlen: int = 100_000,
        require_connection: bool = False,
        cluster: bool = False,
    ) -> None:
        self._repository = repository
        self._clock = clock
        settings = StreamSettings.validated(
            prefix=prefix,
            group=group,
            consumer=consumer,
            block=block,
            claim_idle=claim_idle,
            sweep_interval=sweep_interval,
            maxlen=maxlen,
        )
        self._settings = settings
        self._keys = settings.keys
        self._block = settings.block
        self._connection = RedisConnection(redis_url, cluster=cluster, socket_timeout=settings.block + 5.0)
        self.url = self._connection.url
        # keys: "error" (Redis or the repository failing), "unseen" (an id that never became visible)
        limited_log = RateLimitedLog(log)
        self._health = RedisHealth(settings, self._connection, redis_url, cluster=cluster, limited_log=limited_log)
        self._publisher = Publisher(settings, self._connection, self._health, clock, limited_log)
        self._acks = Acknowledger(settings, self._connection, self._health)
        self._reclaimer = Reclaimer(settings, self._connection, self._acks, repository, clock, limited_log)
        self._stream_consumer = StreamConsumer(settings, self._connection, self._acks, self._reclaimer, repository, clock)
        self._members = GroupMembers(settings, self._connection)
        self._sweeper = Sweeper(
            settings, self._connection, self._health, self._publisher, self._acks, self._reclaimer, self._members,
            repository, clock, limited_log,
        )
        # per queue selection: a read filled ``limit``, so lease straight from the repository first
        self._backlog: dict[tuple[str, ...] | None, bool] = {}
        self._health.check_server(require_connection)

    # -- public attributes -----------------------------------------------------------------------
    def __repr__(self) -> str:
        """Where this dispatcher publishes and reads: URL (password hidden), prefix and group."""
        kind = ", cluster" if self._health.route is not None else ""
        return f"{type(self).__name__}({self.url!r}, prefix={self._keys.prefix!r}, group={self._settings.group!r}{kind})"

    @property
    def consumer(self) -> str:
        """This process's consumer name in the group."""
        return self._settings.consumer

    @property
    def group(self) -> str:
        """The consumer group name."""
        return self._settings.group

    @property
    def keys(self) -> StreamKeys:
        """The key layout (stream names etc.)."""
        return self._keys

    @property
    def node(self) -> tuple[str, int] | None:
        """On a Redis Cluster, ``(host, port)`` of the master this dispatcher last found owning the
        hash slot of its prefix (None until found); None on a standalone server."""
        route = self._health.route
        return route.address if route is not None else None

    # -- the Dispatcher port ---------------------------------------------------------------------
    def notify(self, jobs: Sequence[Job]) -> None:
        """Publish the due jobs among ``jobs`` (called after their commit).  Never raises: a failure
        is logged at a bounded rate and left to the sweep.  Jobs due later are left to the sweep."""
        self._publisher.notify(jobs)

    def acquire(
        self,
        *,
        queues: Sequence[str] | None,
        worker_id: str,
        limit: int,
        lease_timeout: float,
        max_wait: float,
        listed_order: bool = False,
    ) -> list[Job]:
        """Block up to ``max_wait`` seconds for published jobs of ``queues`` (all registered queues
        if None) and return up to ``limit`` of them leased to ``worker_id`` for ``lease_timeout``
        seconds.  While Redis is unreachable, leases straight from the repository.  With
        ``listed_order`` the queues' streams are read, and the repository leased from, in the
        order listed (see ``JobRepository.lease``).

        Raises:
            ValidationError: a bad queue name.
            StorageUnavailable: the repository could not be reached (entries read stay pending here
                and are retried).
        """
        names = None if queues is None else sorted({validate_queue(q) for q in queues})
        if listed_order and queues is not None:
            names = list(dict.fromkeys(validate_queue(q) for q in queues))
        listed = {"listed_order": True} if listed_order and names is not None and len(names) > 1 else {}
        connection, health, reader = self._connection, self._health, self._stream_consumer
        if limit <= 0 or connection.closed:
            return []
        deadline = time.monotonic() + max(0.0, float(max_wait))
        generation = reader.generation
        first = True
        while True:
            jobs = self._reclaimer.retry(names, worker_id, limit, lease_timeout)
            if jobs:
                return jobs
            self._sweeper.maybe_upkeep()
            self._publisher.publish_timers()
            now = time.monotonic()
            if reader.generation != generation or connection.closed:
                return []
            remaining = deadline - now
            if not first and remaining <= 0:
                return []
            first = False
            if health.is_down():
                jobs = self._repository.lease(
                    queues=names, worker_id=worker_id, now=self._clock.now(), lease_timeout=lease_timeout, limit=limit,
                    **listed,
                )
                if jobs or remaining <= 0:
                    return jobs
                reader.sleep(min(remaining, max(health.down_until - now, 0.005)), generation)
                continue
            backlog_key = None if names is None else tuple(sorted(names))
            if self._backlog.get(backlog_key):
                jobs = self._repository.lease(
                    queues=names, worker_id=worker_id, now=self._clock.now(), lease_timeout=lease_timeout, limit=limit,
                    **listed,
                )
                if jobs:
                    self._acks.owe(jobs)
                    return jobs
                self._backlog[backlog_key] = False
            try:
                streams = [self._keys.stream(q) for q in (names if names is not None else sorted(self._publisher.known_queues()))]
                if not streams:
                    reader.sleep(min(remaining, self._block), generation)
                    continue
                health.ensure_groups(streams)
                wait = min(remaining, self._block, self._reclaimer.next_try() - now, self._publisher.next_timer_in())
                entries = reader.read(streams, limit, wait, generation)
            except redis.RedisError as exc:
                if is_nogroup(exc):
                    health.group_lost()
                    continue
                health.record_failure(exc)
                continue
            except Exception:
                if connection.closed:  # close() from another thread pulled the socket away mid-read
                    return []
                raise
            health.record_success()
            if entries:
                jobs = reader.take(entries, worker_id, limit, lease_timeout)
                if limit > 1 and len(entries) >= limit and len(jobs) >= limit:
                    # more entries are probably waiting behind these (a read of one entry says
                    # little: a single-thread worker would pay an empty lease after every job)
                    self._backlog[backlog_key] = True
                if jobs:
                    return jobs

    def leases_from(self, repository: JobRepository) -> bool:
        """True for this dispatcher's own repository: a worker pool may refill its threads in the
        statement that writes its completions (``complete_and_lease``), as with polling, and tells
        :meth:`leased_directly`, which retires as many stream entries as in backlog mode.  A
        draining worker so pays no Redis round trip per lease."""
        return repository is self._repository

    def leased_directly(self, jobs: Sequence[Job]) -> None:
        """Jobs a worker pool leased from the repository itself: one entry of each one's queue is
        read and acknowledged in the background (see :meth:`Acknowledger.owe
        <tether.adapters.redis_streams.acknowledger.Acknowledger.owe>`).  Never raises."""
        if jobs and not self._connection.closed:
            self._acks.owe(jobs)

    def maintain(self, now: datetime) -> None:
        """Periodic upkeep; cheap to call often (the worker pool calls it about once a second).

        Always: sends deferred acknowledgements and publishes this process's due timers.  Then, if
        no process of the application swept in the last ``sweep_interval`` seconds (a
        ``SET {prefix}:sweep-lock NX PX`` lock decides), runs :meth:`sweep`.  ``acquire`` also
        calls this every ``sweep_interval``, so workers sweep even without a maintenance loop.
        Redis errors are logged and swallowed.

        Raises:
            StorageUnavailable: the repository could not be read.
        """
        self._sweeper.upkeep(now, force=False)

    def sweep(self, now: datetime) -> None:
        """Run one reclaim-and-sweep pass now, whatever the cadence (tests, operators): claim and
        acknowledge entries idle longer than ``claim_idle`` (dead consumers, trimmed messages),
        then re-publish due queued/retrying jobs, each at most once per ``sweep_interval``.
        Redis errors are logged and swallowed.

        Raises:
            StorageUnavailable: the repository could not be read.
        """
        self._sweeper.upkeep(now, force=True)

    def wake(self) -> None:
        """Make every blocked :meth:`acquire` return soon (``CLIENT UNBLOCK`` on their connections)."""
        self._stream_consumer.wake()

    def close(self) -> None:
        """Wake blocked readers, leave the group where this consumer has nothing pending (see
        :mod:`~tether.adapters.redis_streams.members`), and close every connection; the dispatcher
        is unusable afterwards."""
        self._acks.flush()
        self._connection.closed = True
        self._acks.stop()
        self.wake()
        if not self._health.is_down():
            try:
                queues = self._publisher.known_queues()
            except redis.RedisError:
                queues = set()
            self._members.leave(queues)
        self._health.close()
        self._connection.close()


__all__ = ["RedisStreamsDispatcher"]
