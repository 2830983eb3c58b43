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
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import attrs

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
