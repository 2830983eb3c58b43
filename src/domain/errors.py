"""Errors raised by Tether, all rooted in :class:`TetherError`.

Every error that reports bad input names the field and what was wrong with it, so a caller
(or the CLI, which prints it on one line) can say exactly what to fix.
"""

from __future__ import annotations

#: How many characters of a caller's value an error message shows at most.
SHOWN_CHARS = 80


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """How an error message shows a value the caller passed: its ``repr``, cut to ``limit``
    characters (``...`` marks the cut); an integer past ``2**133`` (about 40 digits) as its digit count
    (``an integer of 5,001 digits``: Python refuses to print one past 4,300 digits, and a long
    one says nothing more); ``<TypeName>`` when its ``repr`` fails.  Never raises."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 133:
        magnitude = -value if value < 0 else value
        digits = max(1, int((value.bit_length() - 1) * 0.30102999566398) - 1)
        while 10**digits <= magnitude:
            digits += 1
        return f"{'a negative' if value < 0 else 'an'} integer of {digits:,} digits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a message must never fail on the caller's object
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: max(limit - 3, 1)] + "..."


class TetherError(Exception):
    """Root of every error Tether raises on purpose."""


class ValidationError(TetherError, ValueError):
    """Bad input at a public entry point; nothing was written or published.

    Attributes:
        field: the name of the argument or setting that was wrong (``"queue"``, ``"payload.items[3]"``).
        problem: what was wrong with it, in words.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class PayloadError(ValidationError):
    """The payload cannot be stored: not JSON, not finite, too large, or holds a NUL character."""


class ConfigurationError(TetherError):
    """A setting (URL, pool size, schema name, ...) is unusable; the message says which and why."""


class LeaseLost(TetherError):
    """The write was refused because the caller no longer holds the job's lease.

    Raised by complete, fail, dead-letter, heartbeat and release when the job is not ``running``
    under the given fencing token any more (the reaper took it back, another worker leased it,
    or it was finished).  The caller must stop working on the job; its state was not changed.
    """

    def __init__(self, job_id: int, token: str) -> None:
        super().__init__(f"job {job_id}: lease {token[:12]}... is no longer held")
        self.job_id = job_id
        self.token = token


class JobNotFound(TetherError, LookupError):
    """No job with that id exists (never enqueued, or purged)."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id}: not found")
        self.job_id = job_id


class InvalidTransition(TetherError):
    """The job is not in a state that allows the requested action (e.g. retrying a completed job)."""

    def __init__(self, job_id: int, status: str, action: str) -> None:
        super().__init__(f"job {job_id}: cannot {action} a job that is {status}")
        self.job_id = job_id
        self.status = status
        self.action = action


class ServiceUnavailable(TetherError):
    """A server Tether needs (the job store, or Redis when it was required) could not be reached;
    the call did nothing.  The command line exits with 1 for it (bad input: 2)."""


class DispatcherUnavailable(ServiceUnavailable, ConfigurationError):
    """The dispatcher's server (Redis) could not be reached at start although
    ``require_connection`` asked for it.  Also a :class:`ConfigurationError`, which it was before
    it had a class of its own, so existing ``except ConfigurationError`` handlers still catch it."""


class StorageUnavailable(ServiceUnavailable):
    """The job store could not be reached or stayed locked past its retries; the call did nothing.

    Transient by nature: the worker loop backs off and tries again; it is never read as
    "no work".
    """


class StorageRowError(StorageUnavailable):
    """The store refused a write because of a row, not the connection: a constraint, a trigger
    of the user's raising, a row it cannot read.  Sending the same rows again fails again, so a
    batch that meets it is written again row by row and the bad row is reported (or skipped for
    a while) alone.  A :class:`StorageUnavailable`, so callers that handle that one still do.
    """


class JobTimeout(TetherError):
    """A handler ran past its time limit (``@app.handler(..., timeout=...)`` or the worker's
    ``job_timeout``).

    The worker records the attempt as failed with this error (``last_error`` is
    ``"JobTimeout: timed out after 30 s"``), whatever the handler did after its limit; the job is
    then retried or sent to ``dead`` like after any failure.  Handlers never need to raise it.

    Attributes:
        seconds: the limit that passed, in seconds.
    """

    def __init__(self, seconds: float) -> None:
        super().__init__(f"timed out after {seconds:g} s")
        self.seconds = seconds


class PermanentError(Exception):
    """Raise from a handler (or wrap another error) to send the job to ``dead`` at once.

    A job that raises ``PermanentError`` is not retried, whatever attempts it has left
    (compare Sidekiq's "don't retry" or Celery's ``Reject(requeue=False)``).

    Example: ``raise PermanentError("customer deleted") from exc``.
    """
