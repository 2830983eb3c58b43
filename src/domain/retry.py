"""Retry policy: exponential backoff with a cap, plus additive jitter.

Backoff before jitter for attempt ``n`` (the attempt that just failed, counted from 1) is
``min(base * 2 ** (n - 1), cap)`` seconds; with the defaults (base 1 s, cap 300 s) that is
1, 2, 4, ... 256, 300, 300 ... (case C14).  It is computed without overflow for any ``n``; an
attempt of 0 or less is treated as 1.

Jitter rule: the delay actually used is ``backoff(n) * (1 + jitter * r)`` with ``r`` uniform in
[0, 1), so jitter only ever *adds* (up to 10 % by default).  A retry therefore never runs earlier
than the documented backoff, and retries of many jobs that failed together spread out instead of
arriving as one herd.  ``r`` is passed in, so the rule is pure and testable.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import attrs
from tether.domain.errors import ValidationError

DEFAULT_MAX_ATTEMPTS = 3


def _check_base(instance: object, attribute: attrs.Attribute, value: float) -> None:  # type: ignore[type-arg]
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValidationError(f"retry_policy.{attribute.name}", f"must be a finite number of seconds > 0, got {value!r}")


def _check_jitter(instance: object, attribute: attrs.Attribute, value: float) -> None:  # type: ignore[type-arg]
    if not (isinstance(value, (int, float)) and 0 <= value <= 1):
        raise ValidationError("retry_policy.jitter", f"must be a fraction in [0, 1], got {value!r}")


@attrs.frozen
class RetryPolicy:
    """How long a failed job waits before its next attempt.

    Attributes:
        base_seconds: backoff of the first retry, in seconds (> 0).
        cap_seconds: the backoff never exceeds this, in seconds, before jitter (>= base).
        jitter: fraction added on top of the backoff at most (0 disables jitter).
    """

    base_seconds: float = attrs.field(default=1.0, validator=_check_base)
    cap_seconds: float = attrs.field(default=300.0, validator=_check_base)
    jitter: float = attrs.field(default=0.1, validator=_check_jitter)

    def __attrs_post_init__(self) -> None:
        if self.cap_seconds < self.base_seconds:
            raise ValidationError("retry_policy.cap_seconds", f"must be >= base_seconds ({self.base_seconds}), got {self.cap_seconds}")

    def backoff(self, attempt: int) -> float:
        """Backoff in seconds before jitter after failed attempt ``attempt`` (1-based)."""
        exponent = max(int(attempt), 1) - 1
        # 2 ** 1100 would overflow a float; any exponent that large is past every cap anyway.
        if exponent > 1000:
            return float(self.cap_seconds)
        return float(min(math.ldexp(self.base_seconds, exponent), self.cap_seconds))

    def delay(self, attempt: int, r: float) -> float:
        """Delay in seconds with jitter: ``backoff(attempt) * (1 + jitter * r)``, ``r`` in [0, 1)."""
        r = min(max(float(r), 0.0), 1.0)
        return self.backoff(attempt) * (1.0 + self.jitter * r)

    def retry_at(self, attempt: int, now: datetime, r: float) -> datetime:
        """The instant (aware UTC) the next attempt becomes due: ``now + delay(attempt, r)``."""
        return now + timedelta(seconds=self.delay(attempt, r))
