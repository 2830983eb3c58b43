"""Clock adapters: the system clock, and a fake one for tests and the test kit."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from tether.domain.timeutil import UTC, ensure_utc
from tether.ports.clock import Clock


class SystemClock(Clock):
    """The machine's wall clock: ``now()`` is ``datetime.now(UTC)``, timezone-aware UTC (it may
    step when the system time is set)."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock(Clock):
    """A clock that moves only when told to; thread-safe.

    Args:
        start: the initial instant (aware; converted to UTC). Defaults to 2026-01-01T00:00:00Z.

    Raises:
        ValidationError: ``start`` is not a timezone-aware datetime.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = ensure_utc(start, "start") if start is not None else datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0.0, **kwargs: float) -> datetime:
        """Move forward by ``seconds`` (plus ``timedelta`` keywords such as ``minutes=16``); returns
        the new now (aware UTC).

        Raises:
            ValueError: the step is negative (a FakeClock never moves backwards).
        """
        step = timedelta(seconds=seconds, **kwargs)
        if step < timedelta(0):
            raise ValueError("a FakeClock never moves backwards")
        with self._lock:
            self._now += step
            return self._now

    def set(self, instant: datetime) -> None:
        """Jump to ``instant`` (aware; converted to UTC).

        Raises:
            ValidationError: ``instant`` is not a timezone-aware datetime.
            ValueError: ``instant`` is earlier than now.
        """
        instant = ensure_utc(instant, "instant")
        with self._lock:
            if instant < self._now:
                raise ValueError("a FakeClock never moves backwards")
            self._now = instant
