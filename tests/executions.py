"""Which jobs a worker pool's handlers ran, and how often, for drain tests that disturb the pool
(connections killed, the server restarted): "every job exactly once" is checked from what the
handlers did, not from the pool's own statistics.

Usage::

    executions = Executions()

    @app.handler("t.record")
    def record(payload, ctx):
        executions.record(ctx.job.id)

    ...  # start the pool, disturb it
    executions.wait_for_drain(app, JOBS, timeout=90)
    executions.assert_each_ran_once(app, job_ids)
"""

from __future__ import annotations

import collections
import threading
import time

from tether.domain.job import JobStatus
from tether.entrypoints.service import Tether


class Executions:
    """A thread-safe count of handler runs per job id."""

    def __init__(self) -> None:
        self._runs: collections.Counter[int] = collections.Counter()
        self._lock = threading.Lock()

    def record(self, job_id: int) -> None:
        """Count one run of job ``job_id`` (call it from the handler)."""
        with self._lock:
            self._runs[job_id] += 1

    def __len__(self) -> int:
        """How many distinct jobs ran at least once."""
        with self._lock:
            return len(self._runs)

    def wait_for_drain(self, app: Tether, jobs: int, timeout: float) -> None:
        """Poll every 0.2 s until ``jobs`` distinct jobs ran and ``app`` counts ``jobs`` completed,
        or ``timeout`` seconds passed (a bound against hanging: it raises nothing, the assertions
        that follow say what is missing)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self) >= jobs and app.counts()[JobStatus.COMPLETED] == jobs:
                return
            time.sleep(0.2)

    def assert_each_ran_once(self, app: Tether, job_ids: set[int]) -> None:
        """Every job of ``job_ids`` completed, at its first attempt, its handler ran exactly once,
        and nothing is left running, queued, retrying or dead."""
        counts = app.counts()
        assert counts[JobStatus.COMPLETED] == len(job_ids), counts
        assert counts[JobStatus.RUNNING] == counts[JobStatus.QUEUED] == counts[JobStatus.RETRYING] == 0, counts
        assert counts[JobStatus.DEAD] == 0, counts
        with self._lock:
            runs = dict(self._runs)
        assert set(runs) == job_ids
        assert [n for n in runs.values() if n != 1] == []
        assert {job.attempts for job in app.list(status=JobStatus.COMPLETED, limit=len(job_ids))} == {1}
