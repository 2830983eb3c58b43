"""Worker threads driving dispatchers directly (no WorkerPool), for Redis outage and cluster tests.

Each thread has a dispatcher of its own (a consumer of its own, as separate processes would have),
completes every job it acquires and counts the run, so a test can assert "every job exactly once".
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from tether.adapters.clock import SystemClock


class DispatcherWorkers:
    """``count`` threads, each acquiring from its own ``make()`` dispatcher and completing what it got.

    Attributes:
        runs: job id -> how many times it was run.
        started: job id -> ``time.time()`` of its first run.
        errors: anything ``acquire`` or ``complete`` raised (a test asserts there were none).
    """

    def __init__(self, repo: Any, make: Callable[[], Any], count: int, *, queues: Sequence[str] | None = None,
                 limit: int = 4, lease_timeout: float = 60.0, clock: Any = None) -> None:
        self.repo = repo
        self.clock = clock if clock is not None else SystemClock()
        self.queues = None if queues is None else list(queues)
        self.limit, self.lease_timeout = limit, lease_timeout
        self.runs: Counter[int] = Counter()
        self.started: dict[int, float] = {}
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.dispatchers = [make() for _ in range(count)]
        self.threads = [threading.Thread(target=self._run, args=(d, f"w{i}"), daemon=True) for i, d in enumerate(self.dispatchers)]
        for thread in self.threads:
            thread.start()

    def _run(self, dispatcher: Any, worker_id: str) -> None:
        while not self.stop.is_set():
            try:
                jobs = dispatcher.acquire(queues=self.queues, worker_id=worker_id, limit=self.limit,
                                          lease_timeout=self.lease_timeout, max_wait=0.2)
                for job in jobs:
                    with self.lock:
                        self.runs[job.id] += 1
                        self.started.setdefault(job.id, time.time())
                    self.repo.complete(job.id, job.lease_token, now=self.clock.now())
            except Exception as exc:  # noqa: BLE001 - the test asserts there were none
                self.errors.append(exc)

    def wait_for(self, count: int, timeout: float) -> None:
        """Wait until ``count`` distinct jobs ran, or ``timeout`` seconds passed (the test then asserts)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and len(self.runs) < count:
            time.sleep(0.05)

    def shutdown(self) -> None:
        self.stop.set()
        for dispatcher in self.dispatchers:
            dispatcher.wake()
        for thread in self.threads:
            thread.join(30)
        for dispatcher in self.dispatchers:
            dispatcher.close()
