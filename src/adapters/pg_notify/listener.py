"""The dedicated ``LISTEN`` connection: a thread that hands each notification of one channel to a callback.

The connection is psycopg's own, opened outside the engine's pool (a pooled connection would be
handed to other work, and ``LISTEN`` belongs to a session).  The thread waits on
``Connection.notifies(timeout=...)``; every :data:`CHECK_EVERY` seconds without a notification it
sends ``SELECT 1``, so a connection that died silently is noticed.  After a loss (a restart, a
``pg_terminate_backend``, a network failure) it reconnects with doubling backoff from
:data:`MIN_BACKOFF` to :data:`MAX_BACKOFF` seconds, logging one warning when the episode starts
and one line when it ends; after every (re)connection it calls ``on_connected``, so the owner
polls once and nothing committed while no one listened is left waiting for the next poll.

A pooler in transaction mode (PgBouncer's ``pool_mode = transaction``) cannot carry ``LISTEN``:
the listener must reach PostgreSQL directly or through a session-mode pool.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

log = logging.getLogger("tether.adapters.pg_notify")

#: Seconds between two liveness checks (``SELECT 1``) of an idle listening connection.
CHECK_EVERY = 15.0
#: Longest wait for notifications before the thread looks at its stop flag again, in seconds.
WAIT_SLICE = 0.25
#: First and longest wait before reconnecting after a loss, in seconds.
MIN_BACKOFF = 0.05
MAX_BACKOFF = 5.0


class PgListener:
    """``LISTEN`` on ``channel`` in a thread of its own (see the module docstring).

    Args:
        connect: opens a new psycopg connection (called again after each loss); the listener sets
            it to autocommit and closes it.
        channel: the channel name (lowercase, at most 63 bytes; quoted as given).
        on_notify: called with each notification's payload text, on the listener's thread; must
            not block for long or raise (errors are logged).
        on_connected: called after each successful ``LISTEN`` (the first and every re-established one).
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        channel: str,
        *,
        on_notify: Callable[[str], None],
        on_connected: Callable[[], None],
    ) -> None:
        self._connect = connect
        self.channel = channel
        self.on_notify = on_notify
        self.on_connected = on_connected
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._backend_pid: int | None = None
        #: How many times the connection was (re)established.
        self.connections = 0

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the listening connection, None while not listening."""
        return self._backend_pid if self._listening.is_set() else None

    def start(self) -> None:
        """Start the thread (once; later calls do nothing)."""
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="tether-pg-listener", daemon=True)
            self._thread.start()

    def wait_listening(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds until ``LISTEN`` is in place; True if it is."""
        return self._listening.wait(timeout)

    def _run(self) -> None:
        backoff = MIN_BACKOFF
        lost_at: float | None = None
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._connect()
                conn.autocommit = True
                conn.execute(f'LISTEN "{self.channel}"')
                self._backend_pid = conn.info.backend_pid
                self.connections += 1
                self._listening.set()
                if lost_at is not None:
                    log.warning("LISTEN on %s re-established after %.1f s", self.channel, time.monotonic() - lost_at)
                    lost_at = None
                backoff = MIN_BACKOFF
                self._call(self.on_connected)
                self._listen(conn)
            except (psycopg.Error, OSError) as error:
                self._listening.clear()
                if self._stop.is_set():
                    break
                if lost_at is None:
                    lost_at = time.monotonic()
                    log.warning("LISTEN on %s lost (%s); reconnecting with backoff, polling meanwhile",
                                self.channel, str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            finally:
                self._listening.clear()
                if conn is not None:
                    with contextlib.suppress(psycopg.Error, OSError):  # closing a broken connection
                        conn.close()

    def _listen(self, conn: Any) -> None:
        checked = time.monotonic()
        while not self._stop.is_set():
            got = False
            for notification in conn.notifies(timeout=WAIT_SLICE):
                got = True
                self._call(self.on_notify, notification.payload)
            if got:
                checked = time.monotonic()
            elif time.monotonic() - checked >= CHECK_EVERY:
                conn.execute("SELECT 1")
                checked = time.monotonic()

    @staticmethod
    def _call(callback: Callable[..., None], *args: Any) -> None:
        try:
            callback(*args)
        except Exception:
            log.exception("a LISTEN callback failed")

    def stop(self) -> None:
        """Stop listening and close the connection (the thread is joined for up to 2 s)."""
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)


__all__ = ["CHECK_EVERY", "MAX_BACKOFF", "MIN_BACKOFF", "PgListener"]
