"""Keeping a worker pool's internal threads alive: loops that outlive any exception, and a check
that restarts a thread that died anyway.

A pool's internal threads (``tether-acquire``, ``tether-complete``, ``tether-heartbeat``,
``tether-maintenance``, ``tether-timeouts``) call adapters and hooks that may raise anything,
``BaseException`` subclasses such as ``asyncio.CancelledError`` included.  Each loop catches
everything per pass (:func:`survivable` says what a catch may swallow); as a second line each runs
in a :class:`SupervisedThread`, whose outermost frame restarts the loop after a crash, with a
backoff (:data:`RESTART_BACKOFF`).  As a third line the pool's :class:`Supervisor` looks at its
threads (:meth:`Supervisor.check_once`, from :meth:`WorkerPool.run`'s loop and after each
heartbeat pass) and starts a new thread for one that ended while its part was not stopping; if
no thread can be started it asks the pool to stop, with a clear error.  So a pool never hangs
for want of a thread, and ``run(stop_when_idle=True)`` returns.

Only the process's own ``SystemExit`` and ``KeyboardInterrupt`` on the main thread stop it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("tether.worker")

#: Pause before a crashed loop runs again, in seconds: doubles from the first to the second value
#: while it keeps crashing, and starts over once a run lasted longer than the second value.
RESTART_BACKOFF = (0.05, 5.0)


def survivable(exc: BaseException) -> bool:
    """False only for ``SystemExit`` or ``KeyboardInterrupt`` raised on the main thread (the
    process's own stop, to be re-raised); anything else a loop logs and outlives."""
    return not (
        isinstance(exc, (SystemExit, KeyboardInterrupt)) and threading.current_thread() is threading.main_thread()
    )


class SupervisedThread:
    """A daemon thread running ``loop`` until it returns; a crash restarts it (see the module docstring).

    Args:
        name: the thread's name.
        loop: the part's loop; it returns when its part stops.
        stopped: True once the part was asked to stop (a crash then ends the thread, no restart).

    Attributes:
        crashes: how many times ``loop`` raised so far.
        restarts: how many new threads :meth:`revive` started.
    """

    def __init__(self, name: str, loop: Callable[[], None], *, stopped: Callable[[], bool]) -> None:
        self.name = name
        self._loop = loop
        self._stopped = stopped
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = False
        self._ended = False  # the loop returned (or crashed while stopping): nothing to revive
        self.crashes = 0
        self.restarts = 0

    @property
    def ident(self) -> int | None:
        """The running thread's id, or None before :meth:`start`."""
        return self._thread.ident

    def start(self) -> None:
        """Start the thread."""
        self._started = True
        self._thread.start()

    def is_alive(self) -> bool:
        """True while the thread runs."""
        return self._thread.is_alive()

    def is_current(self) -> bool:
        """True when called from this thread."""
        return self._thread is threading.current_thread()

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` seconds for the thread to end (not from the thread itself)."""
        if self._started and not self.is_current():
            self._thread.join(timeout)

    def dead(self) -> bool:
        """True when the thread ended although its part was not stopping (it died)."""
        return self._started and not self._ended and not self._thread.is_alive() and not self._stopped()

    def revive(self) -> None:
        """Start a new thread running the loop (after :meth:`dead`).

        Raises:
            RuntimeError: no thread could be started.
        """
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        self.restarts += 1

    def _main(self) -> None:
        delay = 0.0
        while True:
            began = time.monotonic()
            try:
                self._loop()
            except BaseException as exc:  # noqa: BLE001 - an internal thread never dies of an exception
                self.crashes += 1
                if self._stopped():
                    self._ended = True
                    return
                if time.monotonic() - began > RESTART_BACKOFF[1]:
                    delay = 0.0
                delay = min(max(delay * 2, RESTART_BACKOFF[0]), RESTART_BACKOFF[1])
                _log_crash(self.name, exc, delay)
                time.sleep(delay)
                continue
            self._ended = True
            return


def _log_crash(name: str, exc: BaseException, delay: float) -> None:
    logger.error("thread %s: its loop raised %s; running it again in %.2f s", name, type(exc).__name__, delay,
                 exc_info=exc)


class Supervisor:
    """The internal threads of one pool, and the check that restarts the ones that died.

    Args:
        worker_id: for logs.
        give_up: called (once) when a dead thread cannot be started again: the pool stops.
    """

    def __init__(self, worker_id: str, give_up: Callable[[str], None]) -> None:
        self._worker_id = worker_id
        self._give_up = give_up
        self._threads: list[SupervisedThread] = []
        self._lock = threading.Lock()
        self._failed = False

    def thread(self, name: str, loop: Callable[[], None], *, stopped: Callable[[], bool]) -> SupervisedThread:
        """A :class:`SupervisedThread` this supervisor watches (not started)."""
        supervised = SupervisedThread(name, loop, stopped=stopped)
        with self._lock:
            self._threads.append(supervised)
        return supervised

    def check_once(self) -> list[str]:
        """Start a new thread for each watched one that died; returns their names.  Never raises."""
        revived: list[str] = []
        with self._lock:
            threads = list(self._threads)
        for supervised in threads:
            if not supervised.dead():
                continue
            try:
                supervised.revive()
            except BaseException as exc:  # noqa: BLE001 - e.g. "can't start new thread"
                if not self._failed:
                    self._failed = True
                    message = (f"worker {self._worker_id}: its thread {supervised.name} died and could not be started "
                               f"again ({type(exc).__name__}: {exc}); the pool stops")
                    logger.critical(message)
                    self._give_up(message)
                continue
            logger.error("worker %s: its thread %s had died; a new one runs it now", self._worker_id, supervised.name)
            revived.append(supervised.name)
        return revived

    def threads(self) -> list[SupervisedThread]:
        """The watched threads."""
        with self._lock:
            return list(self._threads)


__all__ = ["RESTART_BACKOFF", "SupervisedThread", "Supervisor", "survivable"]
