"""What each ``tether demo`` job does, and which jobs the demo makes fail on purpose.

One job per file: read it, compute its SHA-256, line count and word count, and append the result
to a JSON Lines file.  The failure plan is a pure function of the file's path relative to the
tree's root, so every run (and the end-to-end test) knows in advance how each job must end:

- ``bucket = int.from_bytes(sha256(relative_path_utf8).digest()[:4], "big") % 1000``
- bucket 0-4 (0.5 %): fails permanently (``PermanentError``) -> ``dead`` after 1 attempt;
- bucket 5-34 (3 %): fails transiently on attempts 1 and 2, succeeds on attempt 3;
- bucket 35-104 (7 %): fails transiently on attempt 1, succeeds on attempt 2;
- otherwise: succeeds on attempt 1.

So about 10 % of jobs fail their first attempt and 3 % their second too; with the default
``max_attempts`` of 3 every transient failure still ends ``completed``, and only the 0.5 %
end ``dead``.  ``relative_path`` uses ``/`` separators on every platform.

:func:`make_handler` builds the job's handler; it reports each start to a
:class:`LatencyRecorder`, whose figures the summary gives.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from tether.domain.errors import PermanentError
from tether.ports.clock import Clock

if TYPE_CHECKING:
    from tether.entrypoints.context import JobContext

PERMANENT_BELOW = 5
TWICE_BELOW = 35
ONCE_BELOW = 105
BUCKETS = 1000


@attrs.frozen
class FailurePlan:
    """How the demo job for one file is made to behave.

    Attributes:
        permanent: the job raises PermanentError on its first attempt and ends dead.
        transient_failures: how many first attempts (0, 1 or 2) fail with a transient error.
    """

    permanent: bool
    transient_failures: int


def failure_bucket(relative_path: str) -> int:
    """The path's bucket in ``[0, 1000)`` (see the module docstring)."""
    digest = hashlib.sha256(relative_path.encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:4], "big") % BUCKETS


def failure_plan(relative_path: str) -> FailurePlan:
    """The :class:`FailurePlan` of the file at ``relative_path`` (``/``-separated, from the root)."""
    bucket = failure_bucket(relative_path)
    if bucket < PERMANENT_BELOW:
        return FailurePlan(permanent=True, transient_failures=0)
    if bucket < TWICE_BELOW:
        return FailurePlan(permanent=False, transient_failures=2)
    if bucket < ONCE_BELOW:
        return FailurePlan(permanent=False, transient_failures=1)
    return FailurePlan(permanent=False, transient_failures=0)


class PlannedFailure(Exception):
    """The transient failure the demo plants on a job's early attempts."""


def file_stats(path: str | Path) -> dict[str, Any]:
    """SHA-256 (hex), size in bytes, line count and word count of the file at ``path``.

    Lines: ``len(data.splitlines())`` over the raw bytes (a last line without a newline counts;
    ``\\n``, ``\\r\\n`` and ``\\r`` end lines).  Words: ``len(data.split())``, runs of bytes
    between ASCII whitespace.

    Raises:
        OSError: the file cannot be read (the job then fails and is retried like any error).
    """
    data = Path(path).read_bytes()
    return {
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "lines": len(data.splitlines()),
        "words": len(data.split()),
    }


class ResultsFile:
    """An append-only JSON Lines file of per-file results, safe to write from many threads.

    Delivery is at least once, so a file can appear more than once (a job whose lease was lost
    after it wrote); :meth:`read` keeps the last record of each path.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> None:
        """Write one record as a line and flush it."""
        line = json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)

    def read(self) -> dict[str, dict[str, Any]]:
        """Every record by its ``path``, the last one winning; an empty dict if there is no file."""
        records: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return records
        with self.path.open(encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line:
                    record = json.loads(line)
                    records[record["path"]] = record
        return records


class LatencyRecorder:
    """Enqueue-to-start latencies of the jobs this run enqueued, each measured at its first start.

    Jobs enqueued by an earlier run (left unfinished, or put back by ``tether retry``) are not
    measured: their ``created_at`` is that earlier enqueue, so the time to their start here would
    say nothing about this run.  Thread-safe.

    Attributes:
        latencies: seconds from enqueue to first start, one per measured job, in start order.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._not_started: set[int] = set()
        self.latencies: list[float] = []

    def enqueued(self, job_ids: Iterable[int]) -> None:
        """Measure these jobs (created by this run) at their first start."""
        with self._lock:
            self._not_started.update(job_ids)

    def started(self, job_id: int, seconds: float) -> None:
        """Job ``job_id`` started ``seconds`` after its enqueue; kept only for its first start
        and only if this run enqueued it."""
        with self._lock:
            if job_id in self._not_started:
                self._not_started.discard(job_id)
                self.latencies.append(seconds)


def make_handler(results: ResultsFile, recorder: LatencyRecorder, clock: Clock) -> Callable[[dict[str, Any], JobContext], None]:
    """The ``demo.file_stats`` handler over ``results``; it reports each start to ``recorder``
    (time since enqueue, measured on ``clock``: the app's own, the one ``created_at`` came from).

    The handler takes the payload ``{"path": absolute path, "rel": path from the root}`` and
    raises PermanentError or :class:`PlannedFailure` where the :func:`failure_plan` says so.
    """

    def file_stats_job(payload: dict[str, Any], ctx: JobContext) -> None:
        started = clock.now()
        job = ctx.job
        recorder.started(job.id, (started - job.created_at).total_seconds())
        plan = failure_plan(payload["rel"])
        if plan.permanent:
            raise PermanentError("planned permanent failure (demo)")
        if job.attempts <= plan.transient_failures:
            raise PlannedFailure(f"planned transient failure on attempt {job.attempts} (demo)")
        stats = file_stats(payload["path"])
        results.append(
            {
                "path": payload["path"],
                "rel": payload["rel"],
                "job_id": job.id,
                "attempt": job.attempts,
                **stats,
            }
        )

    return file_stats_job


__all__ = [
    "BUCKETS",
    "ONCE_BELOW",
    "PERMANENT_BELOW",
    "TWICE_BELOW",
    "FailurePlan",
    "LatencyRecorder",
    "PlannedFailure",
    "ResultsFile",
    "failure_bucket",
    "failure_plan",
    "file_stats",
    "make_handler",
]
