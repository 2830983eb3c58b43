"""A timer for the due times of jobs a worker was told of: fires a callback when each one comes.

A notification about a job due later (delayed, retried, snoozed) arrives when the job is written,
not when it is due; :class:`DueTimer` keeps the earliest :data:`MAX_PENDING` such times and calls
``fire`` from its own thread once the clock reaches each one, so an idle worker leases the job
within milliseconds of its due time instead of at its next poll.  Times further out than the
kept ones are dropped: the poll still finds those jobs.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable

from tether.ports.clock import Clock

log = logging.getLogger("tether.adapters.pg_notify")

#: Most due times kept at once (the earliest ones).
MAX_PENDING = 10_000
#: Longest single wait of the timer thread, in seconds (it re-reads the clock at least this often).
MAX_WAIT = 5.0


class DueTimer:
    """Calls ``fire()`` when ``clock`` reaches each due time given to :meth:`add`.

    Args:
        clock: the time source (the one the dispatcher leases with, so "due" means the same).
        fire: called from the timer's thread, with no lock held; must not raise (errors are logged).
    """

    def __init__(self, clock: Clock, fire: Callable[[], None]) -> None:
        self.clock = clock
        self.fire = fire
        self._due: list[float] = []  # heap of Unix seconds
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, due: float) -> None:
        """Fire at ``due`` (Unix seconds).  Starts the thread on first use; ignored after :meth:`stop`."""
        with self._cond:
            if self._stopped:
                return
            if len(self._due) >= MAX_PENDING:
                if due >= max(self._due):
                    return
                self._due.remove(max(self._due))
                heapq.heapify(self._due)
            heapq.heappush(self._due, due)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tether-due-timer", daemon=True)
                self._thread.start()
            self._cond.notify()

    def pending(self) -> int:
        """How many due times are waiting."""
        with self._cond:
            return len(self._due)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = self.clock.now().timestamp()
                fired = False
                while self._due and self._due[0] <= now:
                    heapq.heappop(self._due)
                    fired = True
                if not fired:
                    wait = min(self._due[0] - now, MAX_WAIT) if self._due else MAX_WAIT
                    self._cond.wait(wait)
                    continue
            try:
                self.fire()
            except Exception:  # pragma: no cover - fire never raises by contract
                log.exception("the due-time callback failed")

    def stop(self) -> None:
        """Stop the thread (joined for up to 1 s); pending times are dropped."""
        with self._cond:
            self._stopped = True
            self._due.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)


__all__ = ["MAX_PENDING", "DueTimer"]
