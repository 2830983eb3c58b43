"""Which Redis server the Redis Streams dispatcher talks to on a Redis Cluster.

Every key of one application carries the hash tag ``{prefix}`` (:mod:`tether.adapters.redis_streams.keys`),
so all of them live in one hash slot, owned by one master.  The dispatcher therefore talks to that
master directly, with plain connections: one ``XREADGROUP`` over all of a worker's streams, its
pipelines, and ``CLIENT UNBLOCK`` of a blocked reader's own connection id all work exactly as on a
standalone server.  (redis-py's ``RedisCluster`` client would route ``CLIENT ID`` and
``CLIENT UNBLOCK`` to an arbitrary node, and hands each command any pooled connection, so the
connection blocked in a read could not be named.)

:class:`SlotRoute` finds that master: redis-py's cluster topology reader (``RedisCluster`` /
``NodesManager``, ``CLUSTER SLOTS`` from the seed node of the URL and then from every node it
learned) gives the owner of the slot, which must answer ``PING`` before it is used.  When the
dispatcher sees a redirection (``MOVED``, ``ASK``, ``TRYAGAIN``), ``CLUSTERDOWN``, ``READONLY``
(the old master was demoted) or a connection error, its health keeper (:mod:`.health`) calls
:meth:`SlotRoute.invalidate`; a background thread then reads the topology again, retrying with
backoff (50 ms doubling to 1 s), and hands the new owner's connection pool back to it.  Until it succeeds the dispatcher
counts as down: workers lease straight from the repository and publishing is skipped, exactly as
when a standalone Redis is unreachable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.connection import parse_url
from redis.exceptions import AskError, ClusterDownError, ReadOnlyError, RedisClusterException, TryAgainError
from tether.domain.errors import ConfigurationError

log = logging.getLogger("tether.dispatch.redis")

#: Retry of a failed topology read: starts here, doubles, capped at :data:`RESOLVE_CAP` (seconds).
RESOLVE_START, RESOLVE_CAP = 0.05, 1.0


def needs_new_route(exc: BaseException) -> bool:
    """True for the errors after which the slot's owner may have changed: ``MOVED`` / ``ASK``
    (:class:`~redis.exceptions.AskError` and its subclass ``MovedError``), ``TRYAGAIN`` (a slot
    being migrated), ``CLUSTERDOWN`` / ``MASTERDOWN``, ``READONLY`` (the node became a replica), and
    connection errors and timeouts (the node died or was failed over)."""
    if isinstance(exc, redis.AuthenticationError):
        return False
    return isinstance(exc, (AskError, TryAgainError, ClusterDownError, ReadOnlyError, redis.ConnectionError, redis.TimeoutError))


def check_cluster_url(url: str, shown: str) -> None:
    """A cluster seed must be a TCP URL (``redis://`` or ``rediss://``) on database 0.

    Raises:
        ConfigurationError: a ``unix://`` URL or another database (naming the URL, password hidden).
    """
    try:
        options = parse_url(url)
    except ValueError as exc:
        raise ConfigurationError(f"redis_url {shown}: {exc}") from None
    if "path" in options:
        raise ConfigurationError(
            f"redis_url {shown}: a Redis Cluster is reached over TCP (redis:// or rediss://), not a unix socket"
        )
    if options.get("db", 0) != 0:
        raise ConfigurationError(f"redis_url {shown}: a Redis Cluster has only database 0, got database {options['db']}")


class SlotRoute:
    """Finds and follows the master that owns the hash slot of ``tag`` on the cluster of ``url``.

    Args:
        url: the seed node's URL (``redis://[[user]:password@]host:port[/0]`` or ``rediss://``);
            its credentials and TLS options are used for every node.
        shown: ``url`` with the password hidden, for messages.
        slot: the hash slot of the application's keys (:attr:`~tether.adapters.redis_streams.keys.StreamKeys.slot`).
        pool_options: keyword arguments of every node's :class:`redis.ConnectionPool` (timeouts,
            ``decode_responses``, ``retry``).
        on_route: called from the background thread with a fresh pool to the new owner.
        on_error: called with each failed topology read (for rate-limited logging).
    """

    def __init__(
        self,
        url: str,
        shown: str,
        slot: int,
        pool_options: dict[str, Any],
        on_route: Callable[[redis.ConnectionPool], None],
        on_error: Callable[[BaseException], None],
    ) -> None:
        self._url = url
        self._shown = shown
        self.slot = slot
        self._pool_options = pool_options
        self._on_route = on_route
        self._on_error = on_error
        self._cluster: RedisCluster | None = None
        self._wanted = threading.Event()
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.address: tuple[str, int] | None = None

    def seed_pool(self) -> redis.ConnectionPool:
        """A pool to the seed node of the URL (used until the owner is known)."""
        return redis.ConnectionPool.from_url(self._url, **self._pool_options)

    def pool_for(self, host: str, port: int) -> redis.ConnectionPool:
        """A pool to ``host:port`` with the URL's credentials and TLS options."""
        return redis.ConnectionPool(**{**self._pool_options, **parse_url(self._url), "host": host, "port": port})

    def locate(self) -> redis.ConnectionPool:
        """Read the topology and return a pool to the slot's owner, checked with ``PING``.

        Raises:
            ConfigurationError: the seed is not a cluster node, or refused the credentials.
            redis.RedisError: no node could be reached, the slot is not served, or the owner did
                not answer.
        """
        try:
            if self._cluster is None:
                self._cluster = RedisCluster.from_url(
                    self._url,
                    require_full_coverage=False,
                    socket_connect_timeout=self._pool_options.get("socket_connect_timeout"),
                    socket_timeout=self._pool_options.get("socket_connect_timeout"),
                )
            else:
                self._cluster.nodes_manager.initialize()
            node = self._cluster.nodes_manager.get_node_from_slot(self.slot)
        except RedisClusterException as exc:
            raise self._classify(exc) from None
        pool = self.pool_for(node.host, node.port)
        try:
            redis.Redis(connection_pool=pool).ping()
        except BaseException:
            pool.disconnect()
            raise
        self.address = (node.host, node.port)
        return pool

    def _classify(self, exc: RedisClusterException) -> BaseException:
        """A configuration mistake as ConfigurationError; anything else as a retryable error."""
        cause: BaseException | None = exc
        while cause is not None:
            if isinstance(cause, redis.AuthenticationError) or (
                isinstance(cause, redis.ResponseError) and str(cause).startswith(("WRONGPASS", "NOAUTH", "NOPERM"))
            ):
                return ConfigurationError(f"redis_url {self._shown}: authentication failed ({cause})")
            if isinstance(cause, RedisClusterException) and "not enabled" in str(cause):
                return ConfigurationError(
                    f"redis_url {self._shown}: the server is not a Redis Cluster node (cluster mode is off there); "
                    "drop the cluster switch (cluster=False, TETHER_REDIS_CLUSTER) to use it as a standalone server"
                )
            if isinstance(cause, (redis.ConnectionError, redis.TimeoutError)):
                return cause
            cause = cause.__cause__ or (cause.__context__ if cause.__context__ is not cause else None)
        return redis.ConnectionError(f"the cluster's topology could not be read: {exc}")

    def invalidate(self) -> None:
        """Ask the background thread to find the slot's owner again (soon, and only once)."""
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="tether-redis-route", daemon=True)
                self._thread.start()
        self._wanted.set()

    def _loop(self) -> None:
        delay = 0.0
        while not self._closed:
            self._wanted.wait()
            if self._closed:
                return
            self._wanted.clear()
            try:
                pool = self.locate()
            except BaseException as exc:  # noqa: BLE001 - every failure is retried with backoff
                try:
                    self._on_error(exc)
                except BaseException:  # noqa: BLE001, S110 - reporting never ends the thread
                    pass
                delay = min(RESOLVE_CAP, max(RESOLVE_START, delay * 2))
                self._wanted.set()
                self._stop.wait(delay)
                continue
            delay = 0.0
            if not self._closed:
                try:
                    self._on_route(pool)
                except BaseException:
                    log.exception("switching to the slot's new owner failed")

    def close(self) -> None:
        """Stop the background thread and close the topology reader's connections."""
        with self._lock:
            self._closed = True
        self._stop.set()
        self._wanted.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)
        if self._cluster is not None:
            try:
                self._cluster.close()
            except Exception as exc:  # noqa: BLE001 - closing broken sockets
                log.debug("closing the cluster topology reader failed: %s", exc)


__all__ = ["RESOLVE_CAP", "RESOLVE_START", "SlotRoute", "check_cluster_url", "needs_new_route"]
