"""Whether Redis answers the Redis Streams dispatcher, and what the dispatcher does while it does not.

* **At start** (:meth:`RedisHealth.check_server`): the server must answer ``INFO`` as Redis >= 6.2
  (``XAUTOCLAIM``), and be a cluster node exactly when ``cluster`` is set; refused credentials,
  an older server or the wrong mode are a ConfigurationError.  A server that does not answer is a
  DispatcherUnavailable with ``require_connection``; without it the dispatcher logs that once and
  starts degraded, since Redis may just be restarting.
* **Backoff** (:meth:`RedisHealth.record_failure`): after any Redis error the dispatcher counts as
  down for 50 ms, doubling up to 1 s while errors go on, and logs at most about one line a second
  (the ``"error"`` key of the dispatcher's :class:`~tether.adapters.log_limits.RateLimitedLog`).
  The next read or upkeep that succeeds ends it (:meth:`RedisHealth.record_success`).
* **Degraded mode**: while :meth:`RedisHealth.is_down`, ``acquire`` leases due jobs straight from
  the repository (the database), polling at the backoff interval, so jobs keep flowing;
  ``notify`` skips publishing, so an enqueue is never slowed by a dead Redis, and the sweep
  publishes those jobs once Redis answers.
* **NOGROUP self-healing** (:meth:`RedisHealth.ensure_groups`): each stream and the consumer group
  are created on first use with ``XGROUP CREATE <stream> <group> 0 MKSTREAM`` (``BUSYGROUP``
  means another worker already did: success).  On ``NOGROUP`` (Redis restarted without
  persistence, ``FLUSHALL``, a stream deleted), or a read ended by ``UNBLOCKED`` (the stream was
  deleted under it), :meth:`RedisHealth.group_lost` forgets what was created, so the next read
  creates it again; any Redis error forgets it too.
* **Redis Cluster**: an error after which the prefix's hash slot may have moved asks the route
  (:class:`~tether.adapters.redis_streams.cluster.SlotRoute`) to find the slot's owner again; the
  owner it finds becomes the connection's pool.  Until then the dispatcher counts as down, as above.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence

import redis
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.redis_streams.cluster import SlotRoute, needs_new_route
from tether.adapters.redis_streams.connection import RedisConnection
from tether.adapters.redis_streams.settings import StreamSettings
from tether.domain.errors import ConfigurationError, DispatcherUnavailable

log = logging.getLogger("tether.dispatch.redis")

#: XAUTOCLAIM arrived in Redis 6.2.
MIN_REDIS_VERSION = (6, 2)
#: The attribute of the log record of a Redis unreachable at start: ``(what, url, error)``, e.g.
#: ``("Redis", "redis://127.0.0.1:6379/0", "Error 111 connecting ...")``.
UNREACHABLE_AT_START = "tether_redis_unreachable_at_start"
#: Backoff after a Redis error: starts here, doubles, capped at :data:`BACKOFF_CAP` (seconds).
BACKOFF_START, BACKOFF_CAP = 0.05, 1.0


def check_server_version(version: str, shown_url: str) -> None:
    """Raise ConfigurationError unless ``version`` is at least :data:`MIN_REDIS_VERSION`."""
    if parse_version(version) < MIN_REDIS_VERSION:
        need = ".".join(map(str, MIN_REDIS_VERSION))
        raise ConfigurationError(
            f"redis_url {shown_url}: the server runs Redis {version}; the Redis Streams dispatcher needs "
            f"Redis >= {need} (streams with XAUTOCLAIM)"
        )


def is_nogroup(exc: BaseException) -> bool:
    """NOGROUP (group or stream missing) or UNBLOCKED (the stream was deleted under a blocked read)."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(("NOGROUP", "UNBLOCKED"))


def parse_version(text: str) -> tuple[int, ...]:
    """``"7.0.15"`` -> ``(7, 0, 15)``; non-numeric parts end the tuple."""
    parts: list[int] = []
    for piece in str(text).split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
    return tuple(parts)


class RedisHealth:
    """The health of one dispatcher's connection: start-up checks, backoff, the streams whose group
    exists and, on a Redis Cluster, the route to the slot's owner (see the module docstring).

    Args:
        settings: the dispatcher's settings (group; the prefix's hash slot to follow).
        connection: the connection whose pool this follows and whose client checks the server.
        redis_url: the URL as given (a cluster route reads its credentials and TLS options).
        cluster: follow the owner of the prefix's hash slot on a Redis Cluster.
        limited_log: the dispatcher's rate-limited log (key ``"error"``).

    Attributes:
        route: the cluster route, or None on a standalone server.
        down_until: :func:`time.monotonic` time until which Redis counts as down (0.0: up).
    """

    def __init__(
        self,
        settings: StreamSettings,
        connection: RedisConnection,
        redis_url: str,
        *,
        cluster: bool,
        limited_log: RateLimitedLog,
    ) -> None:
        self._connection = connection
        self._group = settings.group
        self._keys = keys = settings.keys
        self._log_limited = limited_log
        self._lock = threading.Lock()
        self._backoff = 0.0
        self.down_until = 0.0
        self._ensured: set[str] = set()
        self.route: SlotRoute | None = None
        if cluster:
            self.route = SlotRoute(redis_url, connection.url, keys.slot, connection.options, self._use_route, self._route_failed)

    # -- start-up --------------------------------------------------------------------------------
    def check_server(self, require_connection: bool) -> None:
        """Check the server once at start (see the module docstring).

        Raises:
            ConfigurationError: refused credentials or set-up, Redis < 6.2, or a cluster node
                without ``cluster`` (with it, a server that is no cluster node).
            DispatcherUnavailable: no answer, with ``require_connection``.
        """
        url = self._connection.url
        if self.route is not None and not self._locate_at_start(require_connection):
            return
        try:
            info = self._connection.client.info()
        except redis.AuthenticationError as exc:
            raise ConfigurationError(f"redis_url {url}: authentication failed ({exc})") from None
        except redis.ResponseError as exc:
            raise ConfigurationError(f"redis_url {url}: the server refused the connection set-up ({exc})") from None
        except redis.RedisError as exc:
            if require_connection:
                raise DispatcherUnavailable(f"redis_url {url}: cannot connect ({exc})") from None
            self._start_degraded("Redis", exc)
            return
        if self.route is None and str(info.get("cluster_enabled", "0")) == "1":
            raise ConfigurationError(
                f"redis_url {url}: the server is a Redis Cluster node; turn the cluster switch on "
                "(cluster=True in redis_options, TETHER_REDIS_CLUSTER=1 or --redis-cluster)"
            )
        check_server_version(str(info.get("redis_version", "0")), url)

    def _start_degraded(self, what: str, exc: redis.RedisError) -> None:
        """Unreachable at start without ``require_connection``: log it once and back off as after
        any Redis error (workers lease from the repository meanwhile).  The record carries
        :data:`UNREACHABLE_AT_START` (``what``, the URL with its password hidden, the error's text),
        so a program that says it in its own words (the ``tether`` command) can tell it apart."""
        log.warning(
            "%s at %s unreachable at start (%s); until it answers, workers lease straight from the database "
            "and the sweep publishes what producers could not", what, self._connection.url, exc,
            extra={UNREACHABLE_AT_START: (what, self._connection.url, str(exc))},
        )
        self.record_failure(exc, quiet=True)

    def _locate_at_start(self, require_connection: bool) -> bool:
        """Find the slot's owner on the cluster; False (and degraded, retrying in the background)
        if no node answers and ``require_connection`` is off."""
        assert self.route is not None
        url = self._connection.url
        try:
            pool = self.route.locate()
        except redis.AuthenticationError as exc:
            raise ConfigurationError(f"redis_url {url}: authentication failed ({exc})") from None
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"redis_url {url}: {exc}") from None
        except redis.RedisError as exc:
            if require_connection:
                raise DispatcherUnavailable(f"redis_url {url}: cannot reach the Redis Cluster ({exc})") from None
            self._start_degraded("Redis Cluster", exc)
            self.route.invalidate()
            return False
        self._move_to(pool)
        return True

    # -- Redis Cluster: following the slot's owner ---------------------------------------------
    def _move_to(self, pool: redis.ConnectionPool) -> None:
        """Send every later command to ``pool``'s server, whose streams and group are not known yet."""
        self._connection.swap_pool(pool)
        with self._lock:
            self._ensured.clear()

    def _use_route(self, pool: redis.ConnectionPool) -> None:
        """From the route thread: the slot's owner answered at ``pool``.  A new owner is used at
        once; the same owner as before is used again after the current backoff."""
        if self._connection.closed or self._connection.same_server(pool):
            pool.disconnect()
            return
        self._move_to(pool)
        with self._lock:
            self.down_until = 0.0
        after = pool.connection_kwargs
        log.info(
            "Redis Cluster %s: slot %d of prefix %r is served by %s:%s now",
            self._connection.url,
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
            self._connection.url,
            self._keys.slot,
            type(exc).__name__,
            exc,
        )

    # -- backoff ---------------------------------------------------------------------------------
    def is_down(self) -> bool:
        """True during the backoff after a Redis error (degraded mode)."""
        return time.monotonic() < self.down_until

    def record_failure(self, exc: BaseException, *, quiet: bool = False) -> None:
        """Back off after ``exc`` (and look for the slot's owner again if it may have moved); logs
        at a bounded rate unless ``quiet``."""
        if self.route is not None and needs_new_route(exc):
            self.route.invalidate()  # the slot may have moved, or its master failed over
        with self._lock:
            self._backoff = min(BACKOFF_CAP, max(BACKOFF_START, self._backoff * 2))
            self.down_until = time.monotonic() + self._backoff
            backoff = self._backoff
            self._ensured.clear()
        if not quiet:
            self._log_limited(
                "error",
                logging.WARNING,
                "Redis at %s failed (%s: %s); retrying in %.2fs; workers lease straight from the database meanwhile",
                self._connection.url,
                type(exc).__name__,
                exc,
                backoff,
            )

    def record_success(self) -> None:
        """End the backoff, if any (logged once)."""
        if self._backoff:
            with self._lock:
                was_down, self._backoff, self.down_until = self._backoff, 0.0, 0.0
            if was_down:
                log.info("Redis at %s answers again", self._connection.url)

    # -- consumer groups -------------------------------------------------------------------------
    def ensure_groups(self, streams: Sequence[str]) -> None:
        """Create each stream of ``streams`` and its consumer group unless done since the last
        error (one pipeline; nothing is sent when all are known).

        Raises:
            redis.RedisError: any error but ``BUSYGROUP``.
        """
        missing = [s for s in streams if s not in self._ensured]
        if not missing:
            return
        pipe = self._connection.client.pipeline(transaction=False)
        for stream in missing:
            pipe.xgroup_create(stream, self._group, id="0", mkstream=True)
        for stream, result in zip(missing, pipe.execute(raise_on_error=False)):
            if isinstance(result, Exception) and not str(result).startswith("BUSYGROUP"):
                raise result  # BUSYGROUP: another worker created it first, which is success
            with self._lock:
                self._ensured.add(stream)

    def group_lost(self) -> None:
        """A read met NOGROUP or UNBLOCKED: forget every stream's group, so the next read recreates them."""
        with self._lock:
            self._ensured.clear()
        log.info("consumer group %r missing on %s (Redis lost its data?); recreating it", self._group, self._connection.url)

    def close(self) -> None:
        """Stop following the cluster's slot owner (nothing to do on a standalone server)."""
        if self.route is not None:
            self.route.close()


__all__ = [
    "BACKOFF_CAP",
    "BACKOFF_START",
    "MIN_REDIS_VERSION",
    "RedisHealth",
    "check_server_version",
    "is_nogroup",
    "parse_version",
]
