"""Rate-limited logging for background loops that may fail the same way many times a second.

A worker pool's threads (acquiring, heartbeats, writing outcomes, maintenance) retry storage
trouble in a loop; logging every failed try would flood the log during an outage.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any


class RateLimitedLog:
    """Logs at most one line per ``period`` seconds (``time.monotonic()``) per key, and adds to
    the next line let through how many lines of that key it held back.  Thread-safe.

    Args:
        log: the logger to write to.
        period: seconds between two lines of the same key (default 1.0).
    """

    def __init__(self, log: logging.Logger, period: float = 1.0) -> None:
        self._log = log
        self._period = period
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, key: str, level: int, message: str, *args: Any, exc_info: bool = False) -> None:
        """Log ``message % args`` at ``level`` unless a line of ``key`` went out less than
        ``period`` seconds ago; ``exc_info=True`` adds the exception being handled."""
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -self._period) < self._period:
                self._held[key] = self._held.get(key, 0) + 1
                return
            self._last[key] = now
            held = self._held.pop(key, 0)
        if held:
            message += f" ({held} similar messages suppressed)"
        self._log.log(level, message, *args, exc_info=exc_info)


__all__ = ["RateLimitedLog"]
