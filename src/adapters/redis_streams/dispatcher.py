"""The Redis Streams dispatcher: jobs start within milliseconds of their commit, and no job depends
on Redis to be found.

The repository is the source of truth; Redis only carries "look at job N".  The moving parts:

* **Publishing** (:meth:`RedisStreamsDispatcher.notify`, called after the enqueue commits): one
  pipelined ``XADD <stream of the job's queue> MAXLEN ~ <maxlen> * id <job id>`` per due job, plus
  ``SADD`` of the queue name to the application's queue registry (at most once a second per queue
  and process).  A job due in the future is not
  published; the sweep publishes it once due.  A failed publish is logged (at most about one line a
  second) and swallowed: the enqueue has committed, and the sweep will publish the job.
* **Consuming** (:meth:`~RedisStreamsDispatcher.acquire`): one consumer group (``group``) shared by
  every worker of the application; consumer names are unique per process start
  (``<hostname>-<pid>-<6 hex>``).  ``XREADGROUP GROUP <group> <consumer> COUNT <limit> BLOCK ...``
  over the streams of the worker's queues.  The ``k`` entries read from one queue's stream buy one
  fenced batch lease of up to ``k`` due queued/retrying jobs of that queue
  (``repository.lease``, lease order, one statement on SQL repositories); when fewer come back,
  each entry whose own job was not among them is tried by id (``repository.lease_job``).  Every
  entry is acknowledged whatever the outcome (leased, already taken, finished, not due,
  malformed), with one exception: an id the repository cannot see *yet* (a reader racing the
  producer's commit, or replica lag) is transient.  That entry stays pending under this consumer
  and is tried again by id with a short backoff (10 ms doubling to 1 s) for up to ``claim_idle``
  seconds, after which it is acknowledged (a job that never became visible was rolled back or
  purged; one that did is covered by the sweep).  Entries read beyond ``limit`` (``COUNT``
  applies per stream) are handed back: re-added to their stream and acknowledged.
  Acknowledgements of leased entries are sent by a background thread, so the worker gets its
  jobs without waiting for the XACK round trip.
* **Backlog mode**: when a read fills ``limit`` (more entries are probably waiting), the next
  ``acquire`` first leases straight from the repository (``repository.lease``, as polling does)
  and returns what it got without touching Redis; for each job leased that way the background
  thread later reads and acknowledges one entry of that job's queue (one entry buys one lease;
  what is not there then is not carried over).  The first lease that finds nothing ends backlog
  mode and the worker blocks on the streams again.  Likewise a worker pool refills its threads in
  the statement that writes its completions (:meth:`~RedisStreamsDispatcher.leases_from`, as
  with polling) and tells :meth:`~RedisStreamsDispatcher.leased_directly`, which owes one entry
  per job leased.  This keeps a draining worker at polling's speed instead of paying a Redis
  round trip per lease.
* **Pending entries of dead consumers** (in the sweep pass): ``XAUTOCLAIM <stream> <group>
  <consumer> <claim_idle ms> 0-0 COUNT 100`` moves entries idle longer than ``claim_idle`` to this
  consumer, which acknowledges them; ids of entries whose message was trimmed or deleted
  (reported by Redis 7) are acknowledged too.  The claimed job is *not* run on the strength of the
  stream: stream idle time is never a lease.  If the job is still due, the sweep right after
  publishes it again; if it runs under a valid lease, the repository refuses a second lease; if
  that lease expires, the reaper returns the job and the sweep publishes it.
* **Sweep** (:meth:`~RedisStreamsDispatcher.maintain`, which the worker pool calls about once a
  second and ``acquire`` calls every ``sweep_interval``; it runs the pass only when it wins the
  ``SET {prefix}:sweep-lock NX PX <sweep_interval>`` lock, so one process per interval sweeps;
  :meth:`~RedisStreamsDispatcher.sweep` forces a pass): reclaims as above, then re-publishes the
  due queued/retrying jobs (``repository.due_jobs``, up to 1,000, at most ``maxlen`` per queue),
  each at most once per ``sweep_interval`` however many workers sweep
  (``SET {prefix}:swept:<id> 1 NX PX <interval>``).  A queue whose stream still holds entries
  not yet delivered to the group (its ``last-generated-id`` is past the group's
  ``last-delivered-id``) is skipped that round: its consumers are behind, and re-publishing would
  only add duplicates; once they catch up, anything missing is published.
* **Jobs due later**: ``notify`` of a job due in the future puts it on a local timer; a process
  that also acquires or runs ``maintain`` (a worker) publishes it when due.  The sweeping process
  also puts every job falling due before its next sweep on its own timer, so a job whose
  enqueuer kept no timer (the CLI, a process that exited) is published when due by the sweeping
  worker (within about a second if that worker is busy: ``maintain`` fires due timers too); the
  sweep itself is the safety net.
* **Bounded streams, and why trimming cannot lose a job**: every ``XADD`` trims its stream to about
  ``maxlen`` entries.  A trimmed entry is only a hint.  The job it named is still queued in the
  repository; the sweep re-publishes every due job nobody has leased once the queue's consumers
  have caught up, and a trimmed entry that was pending is reported deleted by XAUTOCLAIM and
  acknowledged.  So trimming costs latency for a backlog larger than ``maxlen``, never a job.
* **Self-healing**: on ``NOGROUP`` (Redis restarted without persistence, ``FLUSHALL``, stream
  deleted) the streams and group are recreated with ``XGROUP CREATE <stream> <group> 0 MKSTREAM``
  (``BUSYGROUP`` means another worker already did: success).  On any other Redis error the
  dispatcher backs off (50 ms doubling to 1 s), logs at most about one line a second, and while
  Redis is unreachable ``acquire`` leases due jobs straight from the repository
  (``repository.lease``), polling at the backoff interval, so jobs keep flowing; ``notify`` skips
  publishing during the backoff so enqueue is never slowed by a dead Redis.  A read ended by
  ``UNBLOCKED`` (the stream was deleted under it) is healed like NOGROUP.
* **Wake-up**: :meth:`~RedisStreamsDispatcher.wake` sends ``CLIENT UNBLOCK`` to the connections
  blocked in ``XREADGROUP``, so a blocked ``acquire`` returns at once (at worst after one ``block``
  slice, if the wake-up races the start of the read).

Queues and ``queues=None``: a consumer with ``queues=None`` reads the streams of every queue in the
registry set ``{prefix}:queues`` (fed by every publish and by the sweep; re-read at most every
``block`` seconds) plus the queues this process has published itself.

Ordering: the entries read together buy leases in the repository's lease order (priority first),
but a job whose entry sits deeper in the stream waits for it, so across a backlog priority is only
approximated; every job still runs.

Redis Cluster (``cluster=True``): every key of a prefix lives in the hash slot of ``{prefix}``, so
the dispatcher talks straight to the master that owns it, with exactly the commands above (one
``XREADGROUP`` over several streams, pipelines, ``CLIENT UNBLOCK`` of the reader's own connection).
A redirection (``MOVED``/``ASK``/``TRYAGAIN``), ``CLUSTERDOWN``, ``READONLY`` or connection error
sets a background thread looking for the slot's owner again; until it is found the dispatcher
counts as down, as above (workers lease from the repository).  See
:mod:`tether.adapters.redis_streams.cluster`.

Key layout: see :mod:`tether.adapters.redis_streams.keys`.  Requires Redis >= 6.2 (``XAUTOCLAIM``).
"""

from __future__ import annotations

import heapq
import logging
import os
import re
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import attrs
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.redis_streams.cluster import SlotRoute, check_cluster_url, needs_new_route
from tether.adapters.redis_streams.keys import StreamKeys, redact_url, validate_consumer, validate_name
from tether.domain.errors import (
    ConfigurationError,
    DispatcherUnavailable,
    JobNotFound,
    StorageUnavailable,
    ValidationError,
)
from tether.domain.job import Job
from tether.domain.validation import validate_int, validate_queue, validate_seconds
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

log = logging.getLogger("tether.dispatch.redis")

#: XAUTOCLAIM arrived in Redis 6.2.
MIN_REDIS_VERSION = (6, 2)
#: Backoff after a Redis error: starts here, doubles, capped at :data:`BACKOFF_CAP` (seconds).
BACKOFF_START, BACKOFF_CAP = 0.05, 1.0
#: Retry of an id the repository cannot see yet: starts here, doubles, capped at 1 s (seconds).
UNSEEN_RETRY_START = 0.01
#: At most this many due jobs are re-published per sweep.
SWEEP_LIMIT = 1000
#: At most this many pending entries are claimed per stream per maintain (XAUTOCLAIM COUNT x rounds).
CLAIM_COUNT, CLAIM_ROUNDS = 100, 10
#: The background acknowledger waits this long (seconds) after being woken, to batch its XACKs.
ACK_COALESCE = 0.01
#: At most this many future jobs wait on this process's local timer (the sweep covers the rest).
TIMER_LIMIT = 10_000
#: Reads up to ARGV[3] new entries of the stream KEYS[1] for group ARGV[1] as consumer ARGV[2] and
#: acknowledges them at once; returns how many.  Retires the entries owed by jobs leased without
#: one (see ``RedisStreamsDispatcher._retire_debts``) without sending them to the client.
RETIRE_SCRIPT = """
local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', KEYS[1], '>')
if not reply then return 0 end
local entries = reply[1][2]
local ids = {}
for i = 1, #entries do ids[#ids + 1] = entries[i][1] end
if #ids > 0 then redis.call('XACK', KEYS[1], ARGV[1], unpack(ids)) end
return #ids
"""
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
#: Seconds to wait for a TCP connection to Redis.
CONNECT_TIMEOUT = 1.0


def default_consumer_name() -> str:
    """``<hostname>-<pid>-<6 hex>``: unique per process start, so a restarted worker never inherits
    (or is confused with) the pending entries of its previous life."""
    host = re.sub(r"[^!-~]", "_", socket.gethostname() or "host")[:100]
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


def parse_version(text: str) -> tuple[int, ...]:
    """``"7.0.15"`` -> ``(7, 0, 15)``; non-numeric parts end the tuple."""
    parts: list[int] = []
    for piece in str(text).split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
    return tuple(parts)


def check_server_version(version: str, shown_url: str) -> None:
    """Raise ConfigurationError unless ``version`` is at least :data:`MIN_REDIS_VERSION`."""
    if parse_version(version) < MIN_REDIS_VERSION:
        need = ".".join(map(str, MIN_REDIS_VERSION))
        raise ConfigurationError(
            f"redis_url {shown_url}: the server runs Redis {version}; the Redis Streams dispatcher needs "
            f"Redis >= {need} (streams with XAUTOCLAIM)"
        )


@attrs.define
class HeldEntry:
    """A stream entry delivered to this consumer and deliberately left unacknowledged, to retry."""

    stream: str
    entry_id: str
    job_id: int
    first_seen: float  # time.monotonic()
    next_try: float
    tries: int = 0


class BlockingSession:
    """One thread's own connection for blocking reads, and its server-side client id (for
    ``CLIENT UNBLOCK``, sent over another connection of the same pool, so to the same server).
    The id is forgotten whenever the connection reconnects."""

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self.pool = pool
        self.client = redis.Redis(connection_pool=pool, single_connection_client=True)
        self._control = redis.Redis(connection_pool=pool)
        self.client_id: int | None = None
        assert self.client.connection is not None
        self.client.connection.register_connect_callback(self._on_connect)

    def _on_connect(self, connection: Any) -> None:
        self.client_id = None

    def ensure_id(self) -> None:
        if self.client_id is None:
            self.client_id = int(self.client.client_id())

    def unblock(self) -> None:
        """``CLIENT UNBLOCK`` this session's connection if it has an id (errors are swallowed: the
        read ends by itself within one block slice)."""
        client_id = self.client_id
        if client_id is None:
            return
        try:
            self._control.client_unblock(client_id)
        except redis.RedisError:
            pass

    def close(self) -> None:
        try:
            self.client.close()
        except redis.RedisError as exc:  # pragma: no cover - closing a broken socket
            log.debug("closing a blocking connection failed: %s", exc)


def _is_nogroup(exc: BaseException) -> bool:
    """NOGROUP (group or stream missing) or UNBLOCKED (the stream was deleted under a blocked read)."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(("NOGROUP", "UNBLOCKED"))


def _job_id_of(fields: Any) -> int | None:
    if not isinstance(fields, dict):
        return None
    raw = fields.get("id")
    try:
        job_id = int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return job_id if job_id > 0 else None


class RedisStreamsDispatcher(Dispatcher):
    """A :class:`~tether.ports.dispatcher.Dispatcher` on Redis Streams (see the module docstring).

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
        self._keys = StreamKeys(prefix)
        self._group = validate_name(group, "group")
        self._consumer = validate_consumer(consumer) if consumer is not None else default_consumer_name()
        self._block = validate_seconds(block, "block", allow_zero=False)
        self._claim_idle = validate_seconds(claim_idle, "claim_idle", allow_zero=False)
        self._sweep_interval = validate_seconds(sweep_interval, "sweep_interval", allow_zero=False)
        self._sweep_px = max(1, int(self._sweep_interval * 1000))  # sweep lock and swept markers, ms
        self._maxlen = validate_int(maxlen, "maxlen", 1, 2**62)
        if not isinstance(redis_url, str) or not redis_url:
            raise ConfigurationError(f"redis_url: must be a non-empty URL string, got {redis_url!r:.80}")
        if not isinstance(cluster, bool):
            raise ValidationError("cluster", f"must be True or False, got {cluster!r:.80}")
        self.url = redact_url(redis_url)
        _check_db_path(redis_url, self.url)
        pool_options: dict[str, Any] = {
            "decode_responses": True,
            "socket_connect_timeout": CONNECT_TIMEOUT,
            "socket_timeout": self._block + 5.0,
            "retry": Retry(NoBackoff(), 0),
        }
        self._route: SlotRoute | None = None
        try:
            if cluster:
                check_cluster_url(redis_url, self.url)
                self._route = SlotRoute(redis_url, self.url, self._keys.slot, pool_options, self._use_route, self._route_failed)
                self._pool = self._route.seed_pool()
            else:
                self._pool = redis.ConnectionPool.from_url(redis_url, **pool_options)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"redis_url {self.url}: {exc}") from None
        self._client = redis.Redis(connection_pool=self._pool)
        self._retire = self._client.register_script(RETIRE_SCRIPT)  # always called with client=<pipeline>
        self._publish_many = self._client.register_script(PUBLISH_SCRIPT)  # likewise
        self._retired_pools: list[redis.ConnectionPool] = []

        self._lock = threading.Condition(threading.Lock())
        self._wake_generation = 0
        self._closed = False
        self._ensured: set[str] = set()
        self._local_queues: set[str] = set()
        self._registry_cache: tuple[float, frozenset[str]] = (0.0, frozenset())
        self._registered: dict[str, float] = {}  # queue -> monotonic time of this process's last SADD
        self._held: list[HeldEntry] = []
        self._deferred_acks: dict[str, list[str]] = {}
        self._ack_wanted = threading.Event()
        self._backlog: dict[tuple[str, ...] | None, bool] = {}
        # queue -> ids of the jobs leased without spending an entry (backlog mode, refills), in order
        self._debts: dict[str, dict[int, None]] = {}
        self._acker: threading.Thread | None = None
        self._timers: list[tuple[datetime, int, str]] = []
        self._timed: set[tuple[datetime, int]] = set()  # (due, job id) on the timer: each once
        self._blocked: dict[int, BlockingSession] = {}
        self._sessions: weakref.WeakSet[BlockingSession] = weakref.WeakSet()
        self._local = threading.local()
        self._backoff = 0.0
        self._down_until = 0.0
        self._next_sweep = 0.0
        self._log_limited = RateLimitedLog(log)  # keys: "error" (Redis or the repository failing), "unseen"
        self._check_server(require_connection)

    # -- public attributes -----------------------------------------------------------------------
    def __repr__(self) -> str:
        """Where this dispatcher publishes and reads: URL (password hidden), prefix and group."""
        kind = ", cluster" if self._route is not None else ""
        return f"{type(self).__name__}({self.url!r}, prefix={self._keys.prefix!r}, group={self._group!r}{kind})"

    @property
    def consumer(self) -> str:
        """This process's consumer name in the group."""
        return self._consumer

    @property
    def group(self) -> str:
        """The consumer group name."""
        return self._group

    @property
    def keys(self) -> StreamKeys:
        """The key layout (stream names etc.)."""
        return self._keys

    @property
    def node(self) -> tuple[str, int] | None:
        """On a Redis Cluster, ``(host, port)`` of the master this dispatcher last found owning the
        hash slot of its prefix (None until found); None on a standalone server."""
        return self._route.address if self._route is not None else None

    # -- start-up --------------------------------------------------------------------------------
    def _check_server(self, require_connection: bool) -> None:
        if self._route is not None and not self._locate_at_start(require_connection):
            return
        try:
            info = self._client.info()
        except redis.AuthenticationError as exc:
            raise ConfigurationError(f"redis_url {self.url}: authentication failed ({exc})") from None
        except redis.ResponseError as exc:
            raise ConfigurationError(f"redis_url {self.url}: the server refused the connection set-up ({exc})") from None
        except redis.RedisError as exc:
            if require_connection:
                raise DispatcherUnavailable(f"redis_url {self.url}: cannot connect ({exc})") from None
            self._start_degraded("Redis", exc)
            return
        if self._route is None and str(info.get("cluster_enabled", "0")) == "1":
            raise ConfigurationError(
                f"redis_url {self.url}: the server is a Redis Cluster node; turn the cluster switch on "
                "(cluster=True in redis_options, TETHER_REDIS_CLUSTER=1 or --redis-cluster)"
            )
        check_server_version(str(info.get("redis_version", "0")), self.url)

    def _start_degraded(self, what: str, exc: redis.RedisError) -> None:
        """Unreachable at start without ``require_connection``: log it once and back off as after
        any Redis error (workers lease from the repository meanwhile)."""
        log.warning(
            "%s at %s unreachable at start (%s); until it answers, workers lease straight from the database "
            "and the sweep publishes what producers could not", what, self.url, exc,
        )
        self._record_failure(exc, quiet=True)

    def _locate_at_start(self, require_connection: bool) -> bool:
        """Find the slot's owner on the cluster; False (and degraded, retrying in the background)
        if no node answers and ``require_connection`` is off."""
        assert self._route is not None
        try:
            pool = self._route.locate()
        except redis.AuthenticationError as exc:
            raise ConfigurationError(f"redis_url {self.url}: authentication failed ({exc})") from None
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"redis_url {self.url}: {exc}") from None
        except redis.RedisError as exc:
            if require_connection:
                raise DispatcherUnavailable(f"redis_url {self.url}: cannot reach the Redis Cluster ({exc})") from None
            self._start_degraded("Redis Cluster", exc)
            self._route.invalidate()
            return False
        self._swap_pool(pool)
        return True

    # -- Redis Cluster: following the slot's owner ---------------------------------------------
    def _swap_pool(self, pool: redis.ConnectionPool) -> None:
        """Send every later command to ``pool``'s server; blocking sessions move on their next read."""
        with self._lock:
            old, self._pool = self._pool, pool
            self._client = redis.Redis(connection_pool=pool)
            self._retired_pools.append(old)
            self._ensured.clear()
        old.disconnect(inuse_connections=False)

    def _use_route(self, pool: redis.ConnectionPool) -> None:
        """From the route thread: the slot's owner answered at ``pool``.  A new owner is used at
        once; the same owner as before is used again after the current backoff."""
        if self._closed:
            pool.disconnect()
            return
        before = self._pool.connection_kwargs
        after = pool.connection_kwargs
        if (before.get("host"), before.get("port")) == (after.get("host"), after.get("port")):
            pool.disconnect()
            return
        self._swap_pool(pool)
        with self._lock:
            self._down_until = 0.0
        log.info(
            "Redis Cluster %s: slot %d of prefix %r is served by %s:%s now",
            self.url,
            self._keys.slot,
            self._keys.prefix,
            after.get("host"),
            after.get("port"),
        )

    def _route_failed(self, exc: BaseException) -> None:
        """From the route thread: the topology could not be read (or the owner did not answer)."""
        self._log_limited(
            "error",
            logging.WARNING,
            "Redis Cluster at %s: cannot find the master of slot %d yet (%s: %s); workers lease straight from the "
            "database meanwhile",
            self.url,
            self._keys.slot,
            type(exc).__name__,
            exc,
        )

    # -- error state -----------------------------------------------------------------------------
    def _record_failure(self, exc: BaseException, *, quiet: bool = False) -> None:
        if self._route is not None and needs_new_route(exc):
            self._route.invalidate()  # the slot may have moved, or its master failed over
        with self._lock:
            self._backoff = min(BACKOFF_CAP, max(BACKOFF_START, self._backoff * 2))
            self._down_until = time.monotonic() + self._backoff
            backoff = self._backoff
            self._ensured.clear()
        if not quiet:
            self._log_limited(
                "error",
                logging.WARNING,
                "Redis at %s failed (%s: %s); retrying in %.2fs; workers lease straight from the database meanwhile",
                self.url,
                type(exc).__name__,
                exc,
                backoff,
            )

    def _record_success(self) -> None:
        if self._backoff:
            with self._lock:
                was_down, self._backoff, self._down_until = self._backoff, 0.0, 0.0
            if was_down:
                log.info("Redis at %s answers again", self.url)

    def _is_down(self) -> bool:
        return time.monotonic() < self._down_until

    # -- publishing ------------------------------------------------------------------------------
    def notify(self, jobs: Sequence[Job]) -> None:
        """Publish the due jobs among ``jobs`` (called after their commit).  Never raises: a failure
        is logged at a bounded rate and left to the sweep.  Jobs due later are left to the sweep."""
        try:
            now = self._clock.now()
            due = [job for job in jobs if job.status.is_leasable and job.scheduled_at <= now]
            later = [job for job in jobs if job.status.is_leasable and job.scheduled_at > now]
            if later:
                self._remember_later(later)
            if not due or self._closed:
                return
            if self._is_down():
                self._log_limited(
                    "error",
                    logging.WARNING,
                    "Redis at %s is down: %d job(s) not published now; the sweep will publish them",
                    self.url,
                    len(due),
                )
                return
            self._publish((job.id, job.queue) for job in due)
        except redis.RedisError as exc:
            self._record_failure(exc)
        except Exception:  # never let a publish fail the (committed) enqueue
            log.exception("publishing %d job(s) failed; the sweep will publish them", len(jobs))

    def _publish(self, targets: Iterable[tuple[int, str]]) -> None:
        """XADD each ``(job id, queue)`` to its queue's stream, and SADD the queues to the registry
        unless this process did so in the last :data:`REGISTRY_REFRESH` seconds: one round trip.
        A single XADD is sent as a plain command (the enqueue-latency path); more go in a pipeline,
        where a stream with many ids gets them by :data:`PUBLISH_SCRIPT` (one entry per job either
        way: only the number of commands the client encodes changes)."""
        targets = list(targets)
        if not targets:
            return
        queues = {queue for _, queue in targets}
        clock = time.monotonic()
        with self._lock:
            stale = sorted(q for q in queues if clock - self._registered.get(q, -REGISTRY_REFRESH) >= REGISTRY_REFRESH)
        if len(targets) == 1 and not stale:
            job_id, queue = targets[0]
            self._client.xadd(self._keys.stream(queue), {"id": job_id}, maxlen=self._maxlen, approximate=True)
            return
        by_stream: dict[str, list[int]] = {}
        for job_id, queue in targets:
            by_stream.setdefault(self._keys.stream(queue), []).append(job_id)
        pipe = self._client.pipeline(transaction=False)
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

    # -- jobs due later, published by this process when due ----------------------------------------
    def _remember_later(self, jobs: Sequence[Job]) -> None:
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

    def _next_timer_in(self) -> float:
        """Seconds until the next local timer is due (by the clock port), or infinity."""
        with self._lock:
            if not self._timers:
                return float("inf")
            first = self._timers[0][0]
        return max(0.0, (first - self._clock.now()).total_seconds())

    def _publish_timers(self) -> None:
        with self._lock:
            if not self._timers:
                return
        now = self._clock.now()
        due: list[tuple[datetime, int, str]] = []
        with self._lock:
            while self._timers and self._timers[0][0] <= now:
                due.append(heapq.heappop(self._timers))
                self._timed.discard((due[-1][0], due[-1][1]))
        if not due or self._is_down():
            return  # while Redis is down, the fallback lease and later the sweep find them
        try:
            self._publish((job_id, queue) for _, job_id, queue in due)
        except redis.RedisError as exc:
            self._record_failure(exc)

    # -- queues and groups -----------------------------------------------------------------------
    def _known_queues(self, *, refresh: bool = False) -> set[str]:
        expires, cached = self._registry_cache
        if refresh or time.monotonic() >= expires:
            names = {str(q) for q in self._client.smembers(self._keys.registry)}  # type: ignore[union-attr]
            cached = frozenset(q for q in names if _valid_queue(q))
            self._registry_cache = (time.monotonic() + self._block, cached)
        with self._lock:
            return set(cached) | self._local_queues

    def _ensure_groups(self, streams: Sequence[str]) -> None:
        missing = [s for s in streams if s not in self._ensured]
        if not missing:
            return
        pipe = self._client.pipeline(transaction=False)
        for stream in missing:
            pipe.xgroup_create(stream, self._group, id="0", mkstream=True)
        for stream, result in zip(missing, pipe.execute(raise_on_error=False)):
            if isinstance(result, Exception) and not str(result).startswith("BUSYGROUP"):
                raise result  # BUSYGROUP: another worker created it first, which is success
            with self._lock:
                self._ensured.add(stream)

    # -- consuming -------------------------------------------------------------------------------
    def acquire(
        self,
        *,
        queues: Sequence[str] | None,
        worker_id: str,
        limit: int,
        lease_timeout: float,
        max_wait: float,
    ) -> list[Job]:
        """Block up to ``max_wait`` seconds for published jobs of ``queues`` (all registered queues
        if None) and return up to ``limit`` of them leased to ``worker_id`` for ``lease_timeout``
        seconds.  While Redis is unreachable, leases straight from the repository.

        Raises:
            ValidationError: a bad queue name.
            StorageUnavailable: the repository could not be reached (entries read stay pending here
                and are retried).
        """
        names = None if queues is None else sorted({validate_queue(q) for q in queues})
        if limit <= 0 or self._closed:
            return []
        deadline = time.monotonic() + max(0.0, float(max_wait))
        generation = self._wake_generation
        first = True
        while True:
            jobs = self._retry_held(names, worker_id, limit, lease_timeout)
            if jobs:
                return jobs
            self._maybe_sweep()
            self._publish_timers()
            now = time.monotonic()
            if self._wake_generation != generation or self._closed:
                return []
            remaining = deadline - now
            if not first and remaining <= 0:
                return []
            first = False
            if self._is_down():
                jobs = self._repository.lease(
                    queues=names, worker_id=worker_id, now=self._clock.now(), lease_timeout=lease_timeout, limit=limit
                )
                if jobs or remaining <= 0:
                    return jobs
                self._sleep(min(remaining, max(self._down_until - now, 0.005)), generation)
                continue
            backlog_key = None if names is None else tuple(names)
            if self._backlog.get(backlog_key):
                jobs = self._repository.lease(
                    queues=names, worker_id=worker_id, now=self._clock.now(), lease_timeout=lease_timeout, limit=limit
                )
                if jobs:
                    self._owe(jobs)
                    return jobs
                self._backlog[backlog_key] = False
            try:
                streams = [self._keys.stream(q) for q in (names if names is not None else sorted(self._known_queues()))]
                if not streams:
                    self._sleep(min(remaining, self._block), generation)
                    continue
                self._ensure_groups(streams)
                wait = min(remaining, self._block, self._next_held_try() - now, self._next_timer_in())
                entries = self._read(streams, limit, wait, generation)
            except redis.RedisError as exc:
                if _is_nogroup(exc):
                    with self._lock:
                        self._ensured.clear()
                    log.info("consumer group %r missing on %s (Redis lost its data?); recreating it", self._group, self.url)
                    continue
                self._record_failure(exc)
                continue
            except Exception:
                if self._closed:  # close() from another thread pulled the socket away mid-read
                    return []
                raise
            self._record_success()
            if entries:
                jobs = self._take(entries, worker_id, limit, lease_timeout)
                if limit > 1 and len(entries) >= limit and len(jobs) >= limit:
                    # more entries are probably waiting behind these (a read of one entry says
                    # little: a single-thread worker would pay an empty lease after every job)
                    self._backlog[backlog_key] = True
                if jobs:
                    return jobs

    def _sleep(self, seconds: float, generation: int) -> None:
        if seconds <= 0:
            return
        with self._lock:
            self._lock.wait_for(lambda: self._wake_generation != generation or self._closed, timeout=seconds)

    def _session(self) -> BlockingSession:
        session: BlockingSession | None = getattr(self._local, "session", None)
        if session is None or session.pool is not self._pool:
            if session is not None:  # the cluster slot moved to another node
                session.close()
            session = BlockingSession(self._pool)
            self._local.session = session
            self._sessions.add(session)
        return session

    def _read(self, streams: Sequence[str], limit: int, wait: float, generation: int) -> list[tuple[str, str, Any]]:
        """XREADGROUP new entries; returns (stream, entry id, fields) triples."""
        session = self._session()
        block_ms = int(wait * 1000) if wait > 0 else None
        if block_ms is not None:
            block_ms = max(1, block_ms)
            session.ensure_id()
        key = id(session)
        with self._lock:
            if self._wake_generation != generation:
                return []
            self._blocked[key] = session
        try:
            response = session.client.xreadgroup(
                self._group, self._consumer, {s: ">" for s in streams}, count=limit, block=block_ms
            )
        finally:
            with self._lock:
                self._blocked.pop(key, None)
        return list(_entries(response))

    def _take(
        self, entries: list[tuple[str, str, Any]], worker_id: str, limit: int, lease_timeout: float
    ) -> list[Job]:
        """Turn entries into leases, acknowledge them, hold the unseen, hand back the extras.

        Per stream, the first ``k`` entries (``k`` = what is left of ``limit``) cost one fenced
        batch lease, ``repository.lease(queues=[that queue], limit=k)``, which takes the best ``k``
        due jobs of the queue in lease order (so priority is honoured) in one statement.  When it
        returns ``k`` jobs, the ``k`` entries are spent.  When it returns fewer, the queue has no
        more due jobs; each entry whose own job was not among them is then checked by id
        (``lease_job``, which also catches a job that became visible meanwhile): an id the
        repository cannot see yet is held for a retry, any other outcome is acknowledged.

        Why an entry may lease another job of its queue: every due job that was published has an
        entry, each entry spends at most one lease, and a lease only takes due queued/retrying jobs;
        so a job whose entry was spent on another job is matched by that other job's entry, and
        anything left over (a lost or trimmed entry) is the sweep's.  Batching makes Redis
        dispatch drain as fast as polling on SQL repositories, where one lease per id would cost a
        statement per job."""
        leased: list[Job] = []
        acks: dict[str, list[str]] = {}
        handback: list[tuple[str, str, int]] = []
        held: list[HeldEntry] = []
        now = self._clock.now()
        failure: StorageUnavailable | None = None
        started = time.monotonic()
        by_stream: dict[str, list[tuple[str, int]]] = {}
        for stream, entry_id, fields in entries:
            job_id = _job_id_of(fields)
            if job_id is None:
                acks.setdefault(stream, []).append(entry_id)  # malformed: nothing to do but ack
            elif self._debts and self._pays_debt(stream, job_id):
                acks.setdefault(stream, []).append(entry_id)  # its job was leased without it
            else:
                by_stream.setdefault(stream, []).append((entry_id, job_id))
        for stream, items in by_stream.items():
            budget = limit - len(leased)
            take, extra = items[: max(budget, 0)], items[max(budget, 0) :]
            handback.extend((stream, entry_id, job_id) for entry_id, job_id in extra)
            if not take:
                continue
            if failure is None:
                try:
                    jobs = self._repository.lease(
                        queues=[self._keys.queue_of(stream)], worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=len(take)
                    )
                except StorageUnavailable as exc:
                    failure = exc
            if failure is not None:
                held.extend(HeldEntry(stream, e, j, started, started + BACKOFF_CAP) for e, j in take)
                continue
            leased.extend(jobs)
            if len(jobs) == len(take):
                acks.setdefault(stream, []).extend(e for e, _ in take)
                continue
            got = {job.id for job in jobs}
            for entry_id, job_id in take:
                if job_id in got:
                    acks.setdefault(stream, []).append(entry_id)
                    continue
                if len(leased) >= limit:
                    handback.append((stream, entry_id, job_id))
                    continue
                try:
                    outcome = self._lease_one(job_id, worker_id, now, lease_timeout)
                except StorageUnavailable as exc:
                    failure = exc
                    held.append(HeldEntry(stream, entry_id, job_id, started, started + BACKOFF_CAP))
                    continue
                if isinstance(outcome, Job):
                    leased.append(outcome)
                    acks.setdefault(stream, []).append(entry_id)
                elif outcome == "unseen":
                    held.append(HeldEntry(stream, entry_id, job_id, started, started + UNSEEN_RETRY_START))
                else:
                    acks.setdefault(stream, []).append(entry_id)
        if held:
            with self._lock:
                self._held.extend(held)
        self._finish(acks, handback, defer=bool(leased))
        if failure is not None and not leased:
            raise failure
        return leased

    def _lease_one(self, job_id: int, worker_id: str, now: datetime, lease_timeout: float) -> Job | str:
        """A leased Job, ``"unseen"`` (the repository has no such id yet) or ``"skip"``."""
        job = self._repository.lease_job(job_id, worker_id=worker_id, now=now, lease_timeout=lease_timeout)
        if job is not None:
            return job
        try:
            self._repository.get(job_id)
        except JobNotFound:
            return "unseen"
        return "skip"  # taken, finished or not due: the repository said no, and it is the truth

    def _finish(self, acks: dict[str, list[str]], handback: list[tuple[str, str, int]], *, defer: bool = False) -> None:
        """Hand back the extras (re-add, then ack) and acknowledge ``acks``.

        With ``defer`` the acknowledgements are sent by a background thread (batched with others),
        so leased jobs reach the worker without waiting for an XACK round trip.  That is safe: the
        jobs are already leased in the repository, and an entry left pending because this process
        died is claimed and acknowledged by another one after ``claim_idle``."""
        if defer and not handback:
            with self._lock:
                for stream, ids in acks.items():
                    self._deferred_acks.setdefault(stream, []).extend(ids)
            self._wake_acker()
            return
        if not acks and not handback:
            return
        try:
            pipe = self._client.pipeline(transaction=False)
            for stream, job_entry, job_id in handback:
                pipe.xadd(stream, {"id": job_id}, maxlen=self._maxlen, approximate=True)
                acks.setdefault(stream, []).append(job_entry)
            for stream, ids in acks.items():
                pipe.xack(stream, self._group, *ids)
            pipe.execute()
        except redis.RedisError as exc:
            # Unacknowledged entries stay pending; maintain() claims and acknowledges them later.
            self._record_failure(exc)

    def leases_from(self, repository: JobRepository) -> bool:
        """True for this dispatcher's own repository: a worker pool may refill its threads in the
        statement that writes its completions (``complete_and_lease``), as with polling, and tells
        :meth:`leased_directly`, which retires as many stream entries as in backlog mode.  A
        draining worker so pays no Redis round trip per lease."""
        return repository is self._repository

    def leased_directly(self, jobs: Sequence[Job]) -> None:
        """Jobs a worker pool leased from the repository itself: one entry of each one's queue is
        read and acknowledged in the background (see :meth:`_owe`).  Never raises."""
        if jobs and not self._closed:
            self._owe(jobs)

    def _owe(self, jobs: Sequence[Job]) -> None:
        """Jobs leased straight from the repository in backlog mode: retire as many entries of their
        queues' streams in the background (one entry buys one lease, see :meth:`_take`)."""
        with self._lock:
            for job in jobs:
                self._debts.setdefault(job.queue, {})[job.id] = None
        self._wake_acker()

    def _pays_debt(self, stream: str, job_id: int) -> bool:
        """True (and the debt is settled) when ``job_id`` was leased without spending an entry and
        this entry of its queue is its own: acknowledging it is that lease's entry, no lease by id."""
        queue = self._keys.queue_of(stream)
        with self._lock:
            owed = self._debts.get(queue)
            if owed is None or job_id not in owed:
                return False
            del owed[job_id]
            if not owed:
                del self._debts[queue]
            return True

    def _wake_acker(self) -> None:
        """Start the background acknowledger on first use, and wake it."""
        with self._lock:
            if self._acker is None and not self._closed:
                self._acker = threading.Thread(target=self._ack_loop, name="tether-redis-acker", daemon=True)
                self._acker.start()
        self._ack_wanted.set()

    def _retire_debts(self) -> None:
        """Read (without blocking) and acknowledge one entry per job leased without spending one
        (backlog mode, refills), server-side: one :data:`RETIRE_SCRIPT` call per queue in one
        pipeline, so a draining worker parses no entries.  Only what is there now: a debt with no
        entry to retire is dropped, never carried over."""
        with self._lock:
            if not self._debts:
                return
            debts, self._debts = self._debts, {}
        try:
            pipe = self._client.pipeline(transaction=False)
            for queue in sorted(debts):
                self._retire(keys=[self._keys.stream(queue)], args=[self._group, self._consumer, len(debts[queue])],
                             client=pipe)
            pipe.execute(raise_on_error=False)  # NOGROUP and the like: nothing to retire there
        except redis.RedisError as exc:
            self._record_failure(exc)

    def _ack_loop(self) -> None:
        while not self._closed:
            self._ack_wanted.wait()
            if not self._closed:
                time.sleep(ACK_COALESCE)  # gather what the next few leases add: one round trip for all
            self._ack_wanted.clear()
            self._flush_acks()
            self._retire_debts()

    def _flush_acks(self) -> None:
        with self._lock:
            if not self._deferred_acks:
                return
            acks, self._deferred_acks = self._deferred_acks, {}
        self._finish(acks, [])

    def _next_held_try(self) -> float:
        with self._lock:
            return min((h.next_try for h in self._held), default=float("inf"))

    def _retry_held(self, names: Sequence[str] | None, worker_id: str, limit: int, lease_timeout: float) -> list[Job]:
        now_m = time.monotonic()
        with self._lock:
            if not self._held:
                return []
            wanted = None if names is None else {self._keys.stream(q) for q in names}
            ready = [h for h in self._held if h.next_try <= now_m and (wanted is None or h.stream in wanted)]
            ready = ready[:limit]
            for h in ready:
                self._held.remove(h)
        if not ready:
            return []
        leased: list[Job] = []
        acks: dict[str, list[str]] = {}
        keep: list[HeldEntry] = []
        now = self._clock.now()
        failure: StorageUnavailable | None = None
        for h in ready:
            if failure is not None:
                keep.append(h)
                continue
            try:
                outcome = self._lease_one(h.job_id, worker_id, now, lease_timeout)
            except StorageUnavailable as exc:
                failure = exc
                h.next_try = now_m + BACKOFF_CAP
                keep.append(h)
                continue
            if isinstance(outcome, Job):
                leased.append(outcome)
            elif outcome == "unseen" and now_m - h.first_seen < self._claim_idle:
                h.tries += 1
                h.next_try = now_m + min(BACKOFF_CAP, UNSEEN_RETRY_START * 2**h.tries)
                keep.append(h)
                continue
            elif outcome == "unseen":
                self._log_limited(
                    "unseen",
                    logging.INFO,
                    "job %d was published but never became visible in %.0fs (rolled back or purged?); acknowledged",
                    h.job_id,
                    self._claim_idle,
                )
            acks.setdefault(h.stream, []).append(h.entry_id)
        if keep:
            with self._lock:
                self._held.extend(keep)
        self._finish(acks, [], defer=bool(leased))
        if failure is not None and not leased:
            raise failure
        return leased

    # -- maintenance -----------------------------------------------------------------------------
    def _maybe_sweep(self) -> None:
        """From acquire: at most once per ``sweep_interval`` per process, try :meth:`maintain`."""
        now_m = time.monotonic()
        with self._lock:
            if now_m < self._next_sweep or self._closed:
                return
            self._next_sweep = now_m + self._sweep_interval
        if self._is_down():
            return
        try:
            self.maintain(self._clock.now())
        except StorageUnavailable as exc:
            self._log_limited("error", logging.WARNING, "sweep skipped: the repository is unavailable (%s)", exc)

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
        self._upkeep(now, force=False)

    def sweep(self, now: datetime) -> None:
        """Run one reclaim-and-sweep pass now, whatever the cadence (tests, operators): claim and
        acknowledge entries idle longer than ``claim_idle`` (dead consumers, trimmed messages),
        then re-publish due queued/retrying jobs, each at most once per ``sweep_interval``.
        Redis errors are logged and swallowed.

        Raises:
            StorageUnavailable: the repository could not be read.
        """
        self._upkeep(now, force=True)

    def _upkeep(self, now: datetime, *, force: bool) -> None:
        """Send deferred acks, publish due timers, then reclaim and sweep if ``force`` or this
        process wins the sweep lock.  Redis errors are recorded (backoff, rate-limited log)."""
        if self._closed:
            return
        try:
            self._flush_acks()
            self._publish_timers()
            if force or self._client.set(self._keys.sweep_lock, self._consumer, nx=True, px=self._sweep_px):
                queues = self._known_queues(refresh=True)
                self._reclaim(queues)
                self._sweep(queues, now)
            self._record_success()
        except redis.RedisError as exc:
            self._record_failure(exc)

    def _reclaim(self, queues: Iterable[str]) -> None:
        """XAUTOCLAIM stale entries of every known stream and XACK them."""
        idle_ms = max(0, int(self._claim_idle * 1000))
        for queue in sorted(queues):
            stream = self._keys.stream(queue)
            start = "0-0"
            for _ in range(CLAIM_ROUNDS):
                try:
                    reply = self._client.xautoclaim(stream, self._group, self._consumer, idle_ms, start, count=CLAIM_COUNT)
                except redis.ResponseError as exc:
                    if _is_nogroup(exc):
                        break  # no group (yet, or lost): nothing pending
                    raise
                claimed, next_start, deleted = _autoclaim_parts(reply)
                stale = [*claimed, *deleted]
                if stale:
                    self._client.xack(stream, self._group, *stale)
                    with self._lock:
                        gone = set(stale)
                        self._held = [h for h in self._held if not (h.stream == stream and h.entry_id in gone)]
                if next_start in (None, "0-0"):
                    break
                start = next_start

    def _lagging_queues(self, queues: Sequence[str]) -> set[str]:
        """Queues whose stream holds entries not yet delivered to the group (consumers are behind,
        so re-publishing there only adds duplicates).  Compares the group's ``last-delivered-id``
        with the stream's ``last-generated-id``; the ``lag`` field of XINFO GROUPS is not used, as
        Redis cannot compute it reliably once undelivered entries were trimmed."""
        if not queues:
            return set()
        pipe = self._client.pipeline(transaction=False)
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
            elif _entry_key(mine[0].get("last-delivered-id")) < _entry_key(info.get("last-generated-id")):
                lagging.add(queue)
        return lagging

    def _sweep(self, queues: Iterable[str], now: datetime) -> None:
        """Re-publish due jobs nobody took, and put the jobs falling due before the next sweep on
        this process's timer, so that a job whose enqueuer kept no timer (a CLI call, a process
        that exited) is published when due rather than up to ``sweep_interval`` later."""
        known = sorted(queues)
        lagging = self._lagging_queues(known)
        if known and len(lagging) == len(known):
            return  # every queue's consumers are behind: re-publishing now would only duplicate
        # One read for both: the jobs due by the next sweep hold every job due now, in lease order,
        # unless the limit cut them short; only then is "due now" read on its own.
        horizon = now + timedelta(seconds=self._sweep_interval)
        upcoming = self._repository.due_jobs(now=horizon, queues=None, limit=SWEEP_LIMIT)
        soon = [j for j in upcoming if j.scheduled_at > now]
        if soon:
            self._remember_later(soon)
        if len(upcoming) < SWEEP_LIMIT:
            due_now = [j for j in upcoming if j.scheduled_at <= now]
        else:
            due_now = self._repository.due_jobs(now=now, queues=None, limit=SWEEP_LIMIT)
        due = [j for j in due_now if j.queue not in lagging]
        per_queue: dict[str, int] = {}
        kept: list[Job] = []
        for job in due:  # more than maxlen per stream would be trimmed at once: publish those next round
            if _valid_queue(job.queue) and per_queue.get(job.queue, 0) < self._maxlen:
                per_queue[job.queue] = per_queue.get(job.queue, 0) + 1
                kept.append(job)
        if not kept:
            return
        pipe = self._client.pipeline(transaction=False)
        for job in kept:
            pipe.set(self._keys.swept(job.id), 1, nx=True, px=self._sweep_px)
        fresh = [job for job, won in zip(kept, pipe.execute()) if won]
        self._publish((job.id, job.queue) for job in fresh)

    # -- wake-up and shutdown --------------------------------------------------------------------
    def wake(self) -> None:
        """Make every blocked :meth:`acquire` return soon (``CLIENT UNBLOCK`` on their connections)."""
        with self._lock:
            self._wake_generation += 1
            self._lock.notify_all()
            blocked = list(self._blocked.values())
        for session in blocked:
            session.unblock()

    def close(self) -> None:
        """Wake blocked readers and close every connection; the dispatcher is unusable afterwards."""
        self._flush_acks()
        self._closed = True
        self._ack_wanted.set()
        if self._acker is not None and self._acker is not threading.current_thread():
            self._acker.join(5.0)
        self.wake()
        if self._route is not None:
            self._route.close()
        for session in list(self._sessions):
            session.close()
        self._pool.disconnect()
        for pool in self._retired_pools:
            pool.disconnect()


def _check_db_path(url: str, shown: str) -> None:
    """redis-py silently ignores a database path that is not a number; refuse it instead."""
    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss"):
        path = parts.path.strip("/")
        if path and not path.isdigit():
            raise ConfigurationError(f"redis_url {shown}: the path must be a database number like /0, got /{path}")


def _entry_key(entry_id: Any) -> tuple[int, int]:
    """A stream entry id ``"<ms>-<seq>"`` as a sortable pair (``(0, 0)`` if absent or malformed)."""
    try:
        ms, _, seq = str(entry_id).partition("-")
        return int(ms), int(seq or 0)
    except ValueError:
        return (0, 0)


def _valid_queue(name: str) -> bool:
    try:
        validate_queue(name)
    except ValidationError:
        return False
    return True


def _entries(response: Any) -> Iterable[tuple[str, str, Any]]:
    """Flatten an XREADGROUP reply (RESP2 list or RESP3 dict) to (stream, entry id, fields)."""
    if not response:
        return
    pairs = response.items() if isinstance(response, dict) else response
    for stream, messages in pairs:
        if isinstance(messages, list) and len(messages) == 1 and isinstance(messages[0], list) and messages[0] and isinstance(messages[0][0], (list, tuple)):
            messages = messages[0]  # RESP3 shape: {stream: [[entries]]}
        for message in messages or ():
            if not message:
                continue
            entry_id, fields = message[0], message[1]
            yield str(stream), str(entry_id), fields


def _autoclaim_parts(reply: Any) -> tuple[list[str], str | None, list[str]]:
    """(claimed entry ids, next start id, deleted entry ids) of an XAUTOCLAIM reply
    ``[next, [(id, fields) | None, ...], [deleted id, ...]]`` (the third part exists from Redis 7)."""
    if not isinstance(reply, (list, tuple)) or len(reply) < 2:
        return [], None, []
    claimed = [str(m[0]) for m in (reply[1] or []) if m]
    deleted = [str(x) for x in reply[2]] if len(reply) > 2 and reply[2] else []
    return claimed, str(reply[0]), deleted


__all__ = ["MIN_REDIS_VERSION", "RedisStreamsDispatcher", "check_server_version", "default_consumer_name"]
