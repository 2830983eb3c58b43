"""Rate-limited logging for code that may fail the same way many times a second.

During an outage every retry loop in Tether (the worker pool's threads, the maintenance loop, the
Redis Streams dispatcher, the SQL repository's transient-error retries, the database clock) fails
over and over; logging each failure would flood the log.  :class:`RateLimitedLog` lets at most one
line per period through for each key and counts the rest, so an outage costs a bounded number of
lines however many threads retry.

This is the one home of that logic.  It lives in the adapters layer, the lowest one that logs (the
domain is pure); it implements no port, so the application services (worker pool, maintenance) may
import it too: the import contract names this one exception to "only the container imports adapters".

Why not a library: the throttles for stdlib ``logging`` on PyPI were checked.  The newest,
log-rate-limit (last release January 2025), is a ``logging.Filter`` on a whole logger timed by the
wall clock (a clock step backwards silences it for as long as the step; no clock can be injected),
and updates its counters without a lock (concurrent threads lose counts); ratelimitingfilter,
logging-rate-limiter and log-throttling had no release since 2022.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tether.domain.validation import validate_seconds


class RateLimitedLog:
    """Logs at most one line per ``period`` seconds per key; thread-safe.

    A line held back is not logged but counted: the next line of its key that goes out ends with
    `` (N similar messages suppressed)``.  Keys are independent: a storm of one kind of failure
    never hides the first line of another.

    Args:
        logger: the logger lines go to.
        period: seconds between two lines of one key (a finite number >= 0; 0 lets every line
            through); default 1.0.
        clock: a monotonic time source in seconds (default :func:`time.monotonic`); tests inject
            a fake one, the database clock its own local source.

    Raises:
        ValidationError: ``period`` is not a finite number of seconds >= 0.
    """

    def __init__(
        self, logger: logging.Logger, period: float = 1.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.logger = logger
        self.period = validate_seconds(period, "period")
        self._clock = clock
        self._last: dict[str, float] = {}  # key -> clock() when its last line went out
        self._held: dict[str, int] = {}  # key -> lines held back since then
        self._lock = threading.Lock()

    def admit(self, key: str = "") -> int | None:
        """Decide whether a line of ``key`` may go out now, for callers that log it themselves
        (or build the message only when it goes out).

        Returns:
            None when a line of ``key`` went out less than ``period`` seconds ago: this one is held
            back and counted.  Otherwise the number of lines of ``key`` held back since the last
            one that went out (0 for none; the count starts again), and ``key``'s period starts now.
        """
        with self._lock:
            now = self._clock()
            last = self._last.get(key)
            if last is not None and now - last < self.period:
                self._held[key] = self._held.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._held.pop(key, 0)

    def __call__(self, key: str, level: int, message: str, *args: object, exc_info: bool = False) -> bool:
        """Log ``message % args`` at ``level`` (a :mod:`logging` level) unless :meth:`admit` holds
        it back; ``exc_info=True`` adds the exception being handled.  The record names the caller's
        line, not this module's.  True if the line went out."""
        held = self.admit(key)
        if held is None:
            return False
        if held:
            message = f"{message} ({held} similar messages suppressed)"
        self.logger.log(level, message, *args, exc_info=exc_info, stacklevel=2)
        return True


__all__ = ["RateLimitedLog"]
