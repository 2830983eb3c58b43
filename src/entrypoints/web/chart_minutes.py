"""The chart's minutes, read incrementally: a minute that ended :data:`SETTLE` ago is read once and
kept, so each refresh of the chart reads the store's last few minutes only, not its whole hour.

A job's ``finished_at`` is the time its worker wrote its outcome (its clock, when the write was
made): a minute that closed :data:`SETTLE` ago no longer gains rows, unless a worker's clock lags
the dashboard's by more than that.  To bound what such a late row, a purge or a retried dead job
can leave wrong, the whole hour is read again every :data:`FULL_READ_EVERY` seconds.

Each read is the port's :meth:`~tether.ports.overview.JobOverview.finished_per_minute` (at most
``max_rows`` rows, the newest); when one stops there, the minutes at and before the oldest one it
counted may be short, and the chart says so (``Throughput.capped``) until they leave the hour.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from tether.domain.overview import FinishedMinute, Throughput, minute_of, throughput_since
from tether.ports.overview import JobOverview

#: How long after its end a minute is taken as final and kept.
SETTLE = timedelta(minutes=2)
#: Seconds between two reads of the whole hour.
FULL_READ_EVERY = 300.0
ONE_MINUTE = timedelta(minutes=1)


class ChartMinutes:
    """The finished jobs per minute of the hour up to ``now`` (see the module docstring); not
    thread-safe: the caller holds a lock around :meth:`read`.

    Args:
        overview: the store's overview port.
        max_rows: the most rows one read counts.
        monotonic: seconds of a monotonic clock (for :data:`FULL_READ_EVERY`; tests pass their own).
    """

    def __init__(self, overview: JobOverview, *, max_rows: int, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.overview = overview
        self.max_rows = max_rows
        self.monotonic = monotonic
        self.reads: list[datetime] = []  # the ``since`` of each read, newest last (the last few, for tests)
        self._kept: dict[datetime, FinishedMinute] = {}
        self._until: datetime | None = None  # every kept minute is before it; the next read starts there
        self._exact_from: datetime | None = None  # minutes before it may be short (a read stopped at max_rows)
        self._start: datetime | None = None  # the hour's first minute at the last read
        self._full_at = -math.inf

    def read(self, now: datetime) -> Throughput:
        """The chart at ``now`` (aware UTC): the kept minutes and a read of the minutes since them."""
        start = throughput_since(now)
        settled = minute_of(now - SETTLE)  # minutes before it are final
        clock = self.monotonic()
        full = (
            self._until is None
            or self._until > settled  # the clock went back
            or self._start is None or start < self._start
            or clock - self._full_at >= FULL_READ_EVERY
        )
        if full:
            self._kept.clear()
            self._exact_from = start
            self._full_at = clock
        since = start if full or self._until is None else self._until
        self._start = start
        self.reads = [*self.reads[-9:], since]
        got = self.overview.finished_per_minute(since=since, max_rows=self.max_rows)
        if got.capped:
            oldest = got.minutes[0].minute if got.minutes else since
            self._exact_from = oldest + ONE_MINUTE
        fresh = []
        for minute in got.minutes:
            if minute.minute < settled:
                self._kept[minute.minute] = minute
            else:
                fresh.append(minute)
        self._until = settled
        for minute in [m for m in self._kept if m < start]:
            del self._kept[minute]
        kept = [self._kept[m] for m in sorted(self._kept)]
        assert self._exact_from is not None
        return Throughput((*kept, *fresh), capped=self._exact_from > start)


__all__ = ["FULL_READ_EVERY", "SETTLE", "ChartMinutes"]
