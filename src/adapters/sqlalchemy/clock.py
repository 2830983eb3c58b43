"""``DatabaseClock``: the database server's clock, read locally (no round trip per ``now()``).

Why: every time Tether stores or compares (``scheduled_at``, ``lease_expires_at``,
``finished_at``, the reaper's "expired before now") is the ``now`` the caller passes from its
:class:`~tether.ports.clock.Clock`.  With the machine's wall clock, a worker whose clock runs
fast leases delayed jobs early and reaps other workers' live leases; one running slow leaves due
jobs waiting.  With a ``DatabaseClock`` every producer and worker on one PostgreSQL server uses
that server's clock, so they agree on "now" to within a round trip, whatever their own machines'
clocks say.

How: the clock measures the offset between the server's ``clock_timestamp()`` (the real time
of the statement, not the transaction start) and a local monotonic source, NTP-style: it takes
:data:`SAMPLES` readings on one connection, keeps the one with the shortest round trip and
places the server's reading at that round trip's midpoint (error at most half the round trip).
``now()`` is then ``local() + offset``: no I/O.  The offset is measured again in the calling
thread once it is older than ``refresh_interval`` seconds (one caller pays one round trip;
concurrent callers do not wait for it), except on a thread running an event loop (the async
API's callers): there the measurement runs on a short-lived thread of its own, so no ``now()``
ever blocks a loop.  Because the local source is monotonic, a step of the
machine's wall clock (NTP, an operator, a suspended VM) does not move ``now()``.

Guarantees: ``now()`` is timezone-aware UTC and never goes backwards, across threads: when a
new measurement would move time back, ``now()`` holds at the last value it returned until the
corrected clock passes it.  A failed measurement keeps the last offset (the clock keeps
running), is logged at most once per :data:`LOG_EVERY` seconds, and is tried again after
``retry_interval`` seconds.  If even the first measurement fails, the clock starts from the
machine's wall clock and switches to the server's at the first measurement that succeeds.

SQLite needs none of this: its database is a file on one machine, so every process using it
reads the same system clock; :class:`~tether.adapters.clock.SystemClock` is the time source there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import create_engine
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.pool import NullPool
from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import ConfigurationError
from tether.domain.timeutil import UTC
from tether.ports.clock import Clock

log = logging.getLogger(__name__)

#: Readings per measurement; the one with the shortest round trip is kept.
SAMPLES = 3
#: Seconds between two warnings about failed measurements (later ones are counted, not logged).
LOG_EVERY = 60.0
#: The statement read: the server's real current time (``now()`` would be the transaction start).
QUERY = "SELECT clock_timestamp()"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _boot_time() -> float:
    """Seconds since boot, counting time spent suspended (Linux ``CLOCK_BOOTTIME``)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


#: The default local source: monotonic and, where the OS offers it, still counting while the
#: machine is suspended, so a resumed laptop or VM is not behind until the next measurement.
LOCAL_SOURCE: Callable[[], float] = _boot_time if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic


class DatabaseClock(Clock):
    """The database server's clock as a :class:`~tether.ports.clock.Clock` (PostgreSQL).

    Args:
        engine: a SQLAlchemy engine on the server; a measurement checks out one connection for
            :data:`SAMPLES` short statements (:meth:`from_url` makes an engine of its own, as the
            container does).
        refresh_interval: seconds after which the offset is measured again (> 0; default 30).
        retry_interval: seconds before a failed measurement is tried again (> 0; default
            ``min(refresh_interval, 5)``).
        local: the local monotonic source, in seconds (default :data:`LOCAL_SOURCE`:
            ``CLOCK_BOOTTIME`` on Linux, else :func:`time.monotonic`); tests inject a skewed one.
        wall: the local wall clock, in seconds since the epoch, used only until the first
            measurement succeeds (default :func:`time.time`).

    The first measurement runs in the constructor.

    Raises:
        ConfigurationError: a non-positive interval.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        refresh_interval: float = 30.0,
        retry_interval: float | None = None,
        local: Callable[[], float] = LOCAL_SOURCE,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not refresh_interval > 0:
            raise ConfigurationError(f"refresh_interval: must be > 0 seconds, got {refresh_interval!r}")
        retry = min(refresh_interval, 5.0) if retry_interval is None else retry_interval
        if not retry > 0:
            raise ConfigurationError(f"retry_interval: must be > 0 seconds, got {retry_interval!r}")
        self._engine = engine
        self.refresh_interval = float(refresh_interval)
        self.retry_interval = float(retry)
        self._local = local
        self._lock = threading.Lock()  # guards _offset, _last, _next_refresh
        self._refreshing = threading.Lock()  # held by the one thread measuring
        self._offset = wall() - local()  # seconds: epoch time = local() + offset
        self._last = float("-inf")  # the last value now() returned (epoch seconds)
        self._next_refresh = float("-inf")
        self._synced = False
        self._background = False  # a measurement runs on a thread of its own (see now())
        self._round_trip: float | None = None
        self._failures = 0
        self._warnings = RateLimitedLog(log, LOG_EVERY, clock=local)
        self.refresh()

    @classmethod
    def from_url(
        cls,
        url: str | URL,
        *,
        refresh_interval: float = 30.0,
        retry_interval: float | None = None,
        connect_timeout: float = 5.0,
        application_name: str = "tether-clock",
    ) -> DatabaseClock:
        """A clock with its own connections to ``url`` (``postgresql+psycopg://``), independent of
        the repository's pool: a measurement never waits for a pooled connection held by a busy
        worker, and no connection is kept open between measurements (one short connection per
        ``refresh_interval``).  ``connect_timeout`` (seconds) bounds how long a measurement can
        hold up its caller when the server is unreachable; the intervals as for the constructor.
        """
        engine = create_engine(
            make_url(url),
            poolclass=NullPool,
            connect_args={"connect_timeout": max(1, int(connect_timeout)), "application_name": application_name},
        )
        return cls(engine, refresh_interval=refresh_interval, retry_interval=retry_interval)

    # -- reading ---------------------------------------------------------------------------------
    def now(self) -> datetime:
        """The server's current time as seen from here: aware UTC, never earlier than a value
        returned before (by any thread).  Measures the offset again first when it is stale."""
        if self._local() >= self._next_refresh:
            if asyncio._get_running_loop() is None:
                self._refresh_if_free()
            else:  # never a round trip on an event loop
                self._refresh_in_background()
        with self._lock:
            value = max(self._local() + self._offset, self._last)
            self._last = value
        return _EPOCH + timedelta(seconds=value)

    @property
    def offset(self) -> float:
        """Seconds to add to the local monotonic source to get epoch time on the server."""
        with self._lock:
            return self._offset

    @property
    def round_trip(self) -> float | None:
        """Round trip of the kept reading of the last successful measurement (seconds), or None."""
        with self._lock:
            return self._round_trip

    @property
    def synced(self) -> bool:
        """True once a measurement against the server succeeded."""
        with self._lock:
            return self._synced

    # -- measuring -------------------------------------------------------------------------------
    def _refresh_in_background(self) -> None:
        """Measure on a thread of its own (one at a time); the caller reads the current offset."""
        with self._lock:
            if self._background:
                return
            self._background = True

        def measure() -> None:
            try:
                self._refresh_if_free()
            finally:
                with self._lock:
                    self._background = False

        threading.Thread(target=measure, name="tether-clock-refresh", daemon=True).start()

    def _refresh_if_free(self) -> None:
        if not self._refreshing.acquire(blocking=False):
            return  # another thread is measuring: use the current offset meanwhile
        try:
            if self._local() >= self._next_refresh:
                self._measure_or_keep()
        finally:
            self._refreshing.release()

    def refresh(self) -> bool:
        """Measure the offset now (blocking); True on success, False when it failed and the last
        offset was kept."""
        with self._refreshing:
            return self._measure_or_keep()

    def _measure_or_keep(self) -> bool:
        try:
            offset, round_trip = self._measure()
        except Exception as error:  # noqa: BLE001 - any failure keeps the last offset
            self._failed(error)
            return False
        with self._lock:
            self._offset = offset
            self._round_trip = round_trip
            self._synced = True
            self._next_refresh = self._local() + self.refresh_interval
            recovered, self._failures = self._failures, 0
        if recovered:
            log.info("database clock: measuring again after %d failed attempt(s); offset %+.3f s", recovered, offset)
        return True

    def _measure(self) -> tuple[float, float]:
        best: tuple[float, float] | None = None  # (round trip, offset)
        with self._engine.connect() as conn:
            for _ in range(SAMPLES):
                sent = self._local()
                server = conn.exec_driver_sql(QUERY).scalar_one()
                received = self._local()
                if not isinstance(server, datetime) or server.tzinfo is None:
                    raise TypeError(f"{QUERY} returned {server!r}, not an aware datetime")
                round_trip = received - sent
                offset = (server - _EPOCH).total_seconds() - (sent + received) / 2
                if best is None or round_trip < best[0]:
                    best = (round_trip, offset)
        assert best is not None
        return best[1], best[0]

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            self._failures += 1
            self._next_refresh = self._local() + self.retry_interval
            failures, synced = self._failures, self._synced
        if self._warnings.admit() is not None:
            first = str(getattr(error, "orig", None) or error).strip().splitlines()
            reason = first[0] if first else type(error).__name__
            log.warning(
                "database clock: could not read the server's time (%s); keeping the %s offset "
                "(%d failure(s) in a row, next try in %.1f s)",
                reason,
                "last measured" if synced else "local wall clock's",
                failures,
                self.retry_interval,
            )


__all__ = ["LOCAL_SOURCE", "LOG_EVERY", "QUERY", "SAMPLES", "DatabaseClock"]
