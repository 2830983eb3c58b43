"""``Snooze``: what a handler raises to run its job again later, without it counting as a failure."""

from __future__ import annotations

from datetime import timedelta

from tether.domain.validation import validate_snooze_seconds


class Snooze(Exception):
    """Raise from a handler to give the job back and run it again ``seconds`` from now.

    The job goes back to ``queued``, due ``seconds`` later, with this attempt given back (it does
    not count against ``max_attempts``, and the next run's ``ctx.attempt`` is this run's number
    again) and ``last_error`` left as it was: a snooze is not a failure.  Like every outcome, it is a write fenced by the lease; a job whose cancellation was
    requested ends ``cancelled`` instead.

    Example: ``raise tether.Snooze(30)`` while a rate limit or a resource is not ready yet.

    Args:
        seconds: how long to wait, in seconds (a number or a timedelta), from 0 to
            :data:`~tether.domain.validation.SNOOZE_MAX_SECONDS` (a year).

    Raises:
        ValidationError (field ``seconds``): a negative, non-finite or too long delay, or not a number.
    """

    def __init__(self, seconds: float | timedelta) -> None:
        #: The validated delay, in seconds.
        self.seconds: float = validate_snooze_seconds(seconds)
        super().__init__(f"snoozed for {self.seconds:g} s")


__all__ = ["Snooze"]
