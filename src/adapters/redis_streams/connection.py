"""The Redis Streams dispatcher's connection to Redis: the pool every command goes through, and each
reader thread's own connection for blocking reads.

Every command is sent through :attr:`RedisConnection.client`, on :attr:`RedisConnection.pool`.  On
a Redis Cluster that pool is replaced whenever the master owning the prefix's hash slot changes
(:meth:`RedisConnection.swap_pool`, called by :mod:`.health` as :mod:`.cluster` finds the owner);
the pools left behind are closed with the dispatcher.  A blocking ``XREADGROUP`` runs on its
thread's own connection (:class:`BlockingSession`), whose server-side client id lets another
thread end the read at once with ``CLIENT UNBLOCK``.

No command retries by itself (``Retry(NoBackoff(), 0)``): a failure goes straight to the
dispatcher's backoff (:mod:`.health`), which decides when Redis is tried again.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from tether.adapters.redis_streams.cluster import check_cluster_url
from tether.adapters.redis_streams.keys import redact_url
from tether.domain.errors import ConfigurationError, ValidationError

log = logging.getLogger("tether.dispatch.redis")

#: Seconds to wait for a TCP connection to Redis.
CONNECT_TIMEOUT = 1.0


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


class RedisConnection:
    """The connection pool of one dispatcher, and the blocking sessions of its reader threads.

    Args:
        redis_url: ``redis://[[user]:password@]host:port/db``, ``rediss://...`` or ``unix://...``.
        cluster: ``redis_url`` names a seed node of a Redis Cluster (``redis://`` or ``rediss://``,
            database 0 only); the pool starts on the seed until :mod:`.health` finds the owner.
        socket_timeout: seconds a command may take before it fails (the longest blocking read
            plus a margin).

    Attributes:
        url: ``redis_url`` with its password replaced by ``***``, for messages and logs.
        options: keyword arguments of every pool (the cluster route builds its node pools with them).
        pool: the pool commands go to now; ``client`` sends on it.
        closed: set once by the dispatcher's ``close``; every part stops when it sees it.

    Raises:
        ConfigurationError: ``redis_url`` is empty, does not parse, has a database path that is not a
            number, or does not fit ``cluster`` (naming the URL, password hidden).
        ValidationError: ``cluster`` is not a bool.
    """

    def __init__(self, redis_url: str, *, cluster: bool, socket_timeout: float) -> None:
        if not isinstance(redis_url, str) or not redis_url:
            raise ConfigurationError(f"redis_url: must be a non-empty URL string, got {redis_url!r:.80}")
        if not isinstance(cluster, bool):
            raise ValidationError("cluster", f"must be True or False, got {cluster!r:.80}")
        self.url = redact_url(redis_url)
        check_db_path(redis_url, self.url)
        self.options: dict[str, Any] = {
            "decode_responses": True,
            "socket_connect_timeout": CONNECT_TIMEOUT,
            "socket_timeout": socket_timeout,
            "retry": Retry(NoBackoff(), 0),
        }
        try:
            if cluster:
                check_cluster_url(redis_url, self.url)
            self.pool: redis.ConnectionPool = redis.ConnectionPool.from_url(redis_url, **self.options)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"redis_url {self.url}: {exc}") from None
        self.client = redis.Redis(connection_pool=self.pool)
        self.closed = False
        self._lock = threading.Lock()
        self._retired_pools: list[redis.ConnectionPool] = []
        self._local = threading.local()
        self._sessions: weakref.WeakSet[BlockingSession] = weakref.WeakSet()

    def session(self) -> BlockingSession:
        """The calling thread's blocking session on the current pool (a new one after the pool moved)."""
        session: BlockingSession | None = getattr(self._local, "session", None)
        if session is None or session.pool is not self.pool:
            if session is not None:  # the cluster slot moved to another node
                session.close()
            session = BlockingSession(self.pool)
            self._local.session = session
            self._sessions.add(session)
        return session

    def swap_pool(self, pool: redis.ConnectionPool) -> None:
        """Send every later command to ``pool``'s server; blocking sessions move on their next read."""
        with self._lock:
            old, self.pool = self.pool, pool
            self.client = redis.Redis(connection_pool=pool)
            self._retired_pools.append(old)
        old.disconnect(inuse_connections=False)

    def same_server(self, pool: redis.ConnectionPool) -> bool:
        """True if ``pool`` reaches the host and port the current pool does."""
        before, after = self.pool.connection_kwargs, pool.connection_kwargs
        return (before.get("host"), before.get("port")) == (after.get("host"), after.get("port"))

    def close(self) -> None:
        """Close every blocking session and every pool, current and retired."""
        for session in list(self._sessions):
            session.close()
        self.pool.disconnect()
        for pool in self._retired_pools:
            pool.disconnect()


def check_db_path(url: str, shown: str) -> None:
    """redis-py silently ignores a database path that is not a number; refuse it instead.

    Raises:
        ConfigurationError: a ``redis://`` or ``rediss://`` path like ``/cache`` (naming ``shown``).
    """
    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss"):
        path = parts.path.strip("/")
        if path and not path.isdigit():
            raise ConfigurationError(f"redis_url {shown}: the path must be a database number like /0, got /{path}")


__all__ = ["CONNECT_TIMEOUT", "BlockingSession", "RedisConnection", "check_db_path"]
