"""Retry policy: exponential backoff with a cap, and a jitter that stays under the cap.

Backoff before jitter for attempt ``n`` (the attempt that just failed, counted from 1) is
``min(base * 2 ** (n - 1), cap)`` seconds; with the defaults (base 1 s, cap 300 s) that is
1, 2, 4, ... 256, 300, 300 ... (case C14).  It is computed without overflow for any ``n``; an
attempt of 0 or less is treated as 1.

Jitter rule: the delay actually used is ``m * (1 + j * r)`` with ``r`` uniform in [0, 1),
``j`` the policy's ``jitter`` (0.25 by default) and ``m = min(base * 2 ** (n - 1), cap / (1 + j))``,
the shortest delay (:meth:`RetryPolicy.shortest_delay`).  So a retry never runs earlier than ``m``
and never later than ``cap`` seconds after the failure (jitter included: attempt 10 of the default
policy waits between 240 and 300 s), and jobs that failed together spread over a quarter of their
backoff (1,000 jobs failing their third attempt at once come back over 4-5 s, about a second).
With ``jitter=0`` the delay is exactly the backoff.  ``r`` is passed in, so the rule is pure and
testable.

Accepted values: ``base_seconds`` and ``cap_seconds`` from just above 0 to
:data:`~tether.domain.limits.MAX_SECONDS` (100 years), ``cap >= base``; ``jitter`` in [0, 1].
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import attrs
from tether.domain.errors import ValidationError, shown
from tether.domain.limits import MAX_SECONDS

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_JITTER = 0.25


def _check_seconds(instance: object, attribute: attrs.Attribute, value: float) -> None:  # type: ignore[type-arg]
    if not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
        raise ValidationError(f"retry_policy.{attribute.name}", f"must be a finite number of seconds > 0, got {shown(value)}")
    if value > MAX_SECONDS:
        raise ValidationError(
            f"retry_policy.{attribute.name}", f"must be at most {MAX_SECONDS:,} seconds (100 years), got {shown(value)}"
        )


def _check_jitter(instance: object, attribute: attrs.Attribute, value: float) -> None:  # type: ignore[type-arg]
    if not (isinstance(value, (int, float)) and 0 <= value <= 1):
        raise ValidationError("retry_policy.jitter", f"must be a fraction in [0, 1], got {shown(value)}")


@attrs.frozen
class RetryPolicy:
    """How long a failed job waits before its next attempt.

    Attributes:
        base_seconds: backoff of the first retry, in seconds (> 0, at most 100 years).
        cap_seconds: the longest wait, jitter included, in seconds (>= base, at most 100 years).
        jitter: the spread, a fraction in [0, 1]: delays fall in ``[m, m * (1 + jitter))`` with
            ``m`` the :meth:`shortest_delay` (0 disables jitter).

    Raises:
        ValidationError: a value outside those ranges, naming it (``retry_policy.cap_seconds``).
    """

    base_seconds: float = attrs.field(default=1.0, validator=_check_seconds)
    cap_seconds: float = attrs.field(default=300.0, validator=_check_seconds)
    jitter: float = attrs.field(default=DEFAULT_JITTER, validator=_check_jitter)

    def __attrs_post_init__(self) -> None:
        if self.cap_seconds < self.base_seconds:
            raise ValidationError("retry_policy.cap_seconds", f"must be >= base_seconds ({self.base_seconds}), got {self.cap_seconds}")

    def _doubled(self, attempt: int, limit: float) -> float:
        """``min(base * 2 ** (attempt - 1), limit)`` without overflow for any ``attempt``."""
        exponent = max(int(attempt), 1) - 1
        # Doubling reaches the limit once exponent >= log2(limit / base); from there on the answer
        # is the limit, so ldexp only ever sees exponents whose result is at most about the limit
        # (2 ** 1024 would overflow a float; attempt counts may be any size).
        if exponent >= math.log2(limit) - math.log2(self.base_seconds):
            return float(limit)
        return float(min(math.ldexp(self.base_seconds, exponent), limit))

    def backoff(self, attempt: int) -> float:
        """Backoff in seconds before jitter after failed attempt ``attempt`` (1-based; <= 0 counts
        as 1): ``min(base * 2 ** (attempt - 1), cap)``, the delay of a policy without jitter."""
        return self._doubled(attempt, self.cap_seconds)

    def shortest_delay(self, attempt: int) -> float:
        """``m``, the least delay in seconds after failed attempt ``attempt``:
        ``min(base * 2 ** (attempt - 1), cap / (1 + jitter))``, so that ``m * (1 + jitter)`` stays
        within the cap."""
        return self._doubled(attempt, self.cap_seconds / (1.0 + self.jitter))

    def delay(self, attempt: int, r: float) -> float:
        """Delay in seconds with jitter: ``m * (1 + jitter * r)`` with ``m`` the
        :meth:`shortest_delay`; ``r`` in [0, 1) (clamped to [0, 1], NaN counts as 0).  Never
        below ``m``, never above ``cap_seconds``."""
        r = float(r)
        r = min(r, 1.0) if r > 0.0 else 0.0
        return min(self.shortest_delay(attempt) * (1.0 + self.jitter * r), float(self.cap_seconds))

    def retry_at(self, attempt: int, now: datetime, r: float) -> datetime:
        """The instant (aware UTC) the next attempt becomes due: ``now + delay(attempt, r)``."""
        return now + timedelta(seconds=self.delay(attempt, r))
