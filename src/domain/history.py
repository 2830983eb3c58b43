"""Attempt history: how each attempt of a job ended, kept on the job, bounded.

Every write that ends an attempt (a holder's complete, fail, dead-letter, release or snooze, and
the reaper's take-back of an expired lease) appends one :class:`Attempt` to ``Job.history``, in
the same write as the state change it records; the oldest entries are dropped beyond
:data:`HISTORY_LIMIT`.  An operator's cancel of a waiting job ends no attempt and adds nothing; a
cancel of a running job adds its entry (``cancelled``) when the attempt ends.  A manual retry keeps
the history (attempt numbers then count from 1 again, as ``attempts`` does; :func:`after_retry`
tells which entries follow one).

The outcome of an attempt (:class:`AttemptOutcome`) says what ended it:

==============  =============================================================================
``completed``   the handler returned
``failed``      the handler failed; the job is ``retrying``
``dead``        the handler failed and the job is ``dead`` (attempts used up, a permanent
                error, or dead-lettered)
``timed_out``   the handler ran past its time limit (the error is ``JobTimeout: ...``), whether
                the job then retries or is dead
``lease_lost``  the lease expired without a heartbeat and the reaper took the job back (its
                worker was lost), whether the job then retries or is dead
``released``    the worker gave the job back at shutdown (the attempt does not count)
``snoozed``     the handler raised ``Snooze``, or the worker had no handler for the job's type
                (the attempt does not count)
``cancelled``   an operator cancelled the job while the attempt ran: whatever ended it
==============  =============================================================================
"""

from __future__ import annotations

import enum
from datetime import datetime

import attrs
from tether.domain.failure import sanitize_text

#: Attempts kept per job: the newest this many (an attempt beyond it drops the oldest entry).
HISTORY_LIMIT = 20
#: Characters of an attempt's error kept in its entry (``last_error`` keeps more of the last one).
HISTORY_ERROR_CHARS = 500
#: How the error text of a timed-out attempt begins (``describe_failure`` of ``JobTimeout``).
TIMEOUT_ERROR_PREFIX = "JobTimeout:"


class AttemptOutcome(enum.StrEnum):
    """What ended one attempt (see the module docstring for each)."""

    COMPLETED = "completed"
    FAILED = "failed"
    DEAD = "dead"
    TIMED_OUT = "timed_out"
    LEASE_LOST = "lease_lost"
    RELEASED = "released"
    SNOOZED = "snoozed"
    CANCELLED = "cancelled"


@attrs.frozen
class Attempt:
    """One ended attempt of a job, as ``Job.history`` keeps it.

    Attributes:
        number: the attempt's number (``attempts`` while it ran: 1 for the first lease).
        worker_id: the worker that held the lease (informational, as ``leased_by``), or None.
        started_at: when its lease was taken (aware UTC), or None if unknown.
        ended_at: when its outcome was written (aware UTC).
        outcome: see :class:`AttemptOutcome`.
        error: the failure text (at most :data:`HISTORY_ERROR_CHARS` characters), or None.

    The lease token is never part of it.
    """

    number: int
    worker_id: str | None
    started_at: datetime | None
    ended_at: datetime
    outcome: AttemptOutcome
    error: str | None = None


def attempt_error(error: str) -> str:
    """``error`` as an attempt's entry keeps it: sanitized, at most :data:`HISTORY_ERROR_CHARS`."""
    return sanitize_text(error, HISTORY_ERROR_CHARS)


def failure_outcomes(error: str) -> tuple[AttemptOutcome, AttemptOutcome]:
    """The outcome of a failed attempt with ``error``: ``(if the job retries, if it is dead)``;
    ``timed_out`` both ways for a time limit's failure (``error`` starts with
    :data:`TIMEOUT_ERROR_PREFIX`), else ``failed`` and ``dead``."""
    if error.startswith(TIMEOUT_ERROR_PREFIX):
        return AttemptOutcome.TIMED_OUT, AttemptOutcome.TIMED_OUT
    return AttemptOutcome.FAILED, AttemptOutcome.DEAD


def with_attempt(history: tuple[Attempt, ...], attempt: Attempt) -> tuple[Attempt, ...]:
    """``history`` with ``attempt`` appended, the oldest entry dropped when it already holds
    :data:`HISTORY_LIMIT` (how every repository trims it)."""
    if len(history) >= HISTORY_LIMIT:
        history = history[1:]
    return (*history, attempt)


#: Outcomes that give the attempt back: the next attempt has the same number.
GIVEN_BACK = frozenset({AttemptOutcome.RELEASED, AttemptOutcome.SNOOZED})


def after_retry(history: tuple[Attempt, ...]) -> tuple[bool, ...]:
    """For each entry of ``history`` (oldest first): True when it is the first attempt after a
    manual retry, which counts the attempts from 1 again: its number is below the entry before
    it, or the same number though that entry did not give its attempt back (``released``,
    ``snoozed``).  The first entry is never marked (what came before it may have been dropped)."""
    marks = [False] * len(history)
    for k in range(1, len(history)):
        before, entry = history[k - 1], history[k]
        marks[k] = entry.number < before.number or (entry.number == before.number and before.outcome not in GIVEN_BACK)
    return tuple(marks)


__all__ = [
    "GIVEN_BACK",
    "HISTORY_ERROR_CHARS",
    "HISTORY_LIMIT",
    "TIMEOUT_ERROR_PREFIX",
    "Attempt",
    "AttemptOutcome",
    "after_retry",
    "attempt_error",
    "failure_outcomes",
    "with_attempt",
]
