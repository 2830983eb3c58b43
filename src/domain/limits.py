"""The ranges of numbers and times Tether accepts, the same on every store.

Each bound is what every repository (memory, SQLite, PostgreSQL) can store and read back exactly,
and what the arithmetic on it (``now + delay``, ``now + lease_timeout``) can compute without
overflow; a value outside is refused with a :class:`~tether.domain.errors.ValidationError` naming
the field, before anything is written.

- ``priority``: a 32-bit signed integer, -2,147,483,648 to 2,147,483,647 (the SQL ``INTEGER``
  column).
- ``max_attempts``: 1 to 10,000.
- durations in seconds (``delay``, ``lease_timeout``, intervals, a retry policy's base and cap):
  finite, at most :data:`MAX_SECONDS` (100 years of 365.25 days, 3,155,760,000 s).
- a job's due time (``run_at``, or ``now + delay``): within 100 years of ``now``, either side
  (an earlier ``run_at`` means "due now"); and any datetime must be expressible in UTC (a
  ``run_at`` of 9999-12-31 23:00 at UTC-5 is year 10000 in UTC, and is refused).
- integers in a payload: at most :data:`MAX_INT_DIGITS` (4,300) decimal digits, Python's default
  int-to-str limit, so that every process can decode what another stored (lower where the process
  set a lower limit with ``sys.set_int_max_str_digits``).
"""

from __future__ import annotations

import sys
from datetime import timedelta

PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1
MAX_ATTEMPTS_LIMIT = 10_000
#: The longest duration, in seconds, Tether accepts anywhere (100 years of 365.25 days).  Below
#: ``threading.TIMEOUT_MAX`` (about 292 years), so any of them can also be waited on.
MAX_SECONDS = 36_525 * 86_400
#: How far from ``now`` a job's due time may lie, either side.
MAX_SCHEDULE_DISTANCE = timedelta(seconds=MAX_SECONDS)
#: The most decimal digits of an integer in a payload.
MAX_INT_DIGITS = 4_300


def int_digit_limit() -> int:
    """The most decimal digits of a payload integer in this process: :data:`MAX_INT_DIGITS`, or
    less where ``sys.set_int_max_str_digits`` set a lower limit (0 there means no limit)."""
    process = sys.get_int_max_str_digits()
    return min(MAX_INT_DIGITS, process) if process > 0 else MAX_INT_DIGITS


__all__ = [
    "MAX_ATTEMPTS_LIMIT",
    "MAX_INT_DIGITS",
    "MAX_SCHEDULE_DISTANCE",
    "MAX_SECONDS",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "int_digit_limit",
]
