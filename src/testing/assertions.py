"""Assertion helpers for code that enqueues jobs: ``assert_enqueued``, ``assert_not_enqueued``,
``enqueued_jobs``.

They read through the same :class:`tether.Tether` object the code under test uses (normally the
fake from :func:`tether.testing.fake_app`), so they work on any repository.  Every job stored
counts as enqueued, whatever its status now (a drained job is still "enqueued").  Failure messages
list what *was* enqueued, and for jobs of the expected type with another payload they name the
keys that differ, so a wrong payload shows up as a diff, not a bare ``False``.

Payloads are compared with ``==`` against the decoded stored payload (so dict key order does not
matter); any value inside the expected payload may be a matcher such as :data:`ANY` or
``unittest.mock.ANY``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.domain.job import Job, JobStatus

if TYPE_CHECKING:
    from tether.entrypoints.service import Tether


class _Anything:
    """Equal to everything; the default of ``payload=`` in the helpers below."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "ANY"


#: Matches any payload (the default), or any value inside an expected payload.
ANY: Any = _Anything()

_PAGE = 1_000
_SHOWN = 50
_PAYLOAD_CHARS = 300


def _check_app(app: object, helper: str) -> None:
    if not all(hasattr(app, name) for name in ("list", "enqueue", "repository")):
        raise TypeError(f"{helper}: the first argument must be the tether.Tether app under test, got {type(app).__name__}")


def _all_jobs(app: Tether, *, queue: str | None, status: JobStatus | str | None) -> list[Job]:
    """Every job of ``app`` in ``queue`` and ``status`` (None: any), by ascending id, read a page
    of :data:`_PAGE` at a time through ``app.list`` (which raises ValidationError for a bad
    queue name or status)."""
    jobs: list[Job] = []
    offset = 0
    while True:
        page = app.list(status=status, queue=queue, limit=_PAGE, offset=offset)
        jobs.extend(page)
        if len(page) < _PAGE:
            return jobs
        offset += _PAGE


def _matches(job: Job, job_type: str | None, payload: Any) -> bool:
    return (job_type is None or job.job_type == job_type) and payload == job.payload


def enqueued_jobs(
    app: Tether,
    job_type: str | None = None,
    payload: Any = ANY,
    *,
    queue: str | None = None,
    status: JobStatus | str | None = None,
) -> list[Job]:
    """Jobs stored in ``app`` (by ascending id), filtered by type, payload equality, queue and status.

    Args:
        app: the application object the code under test enqueues through.
        job_type: only jobs of this type (None: all types).
        payload: only jobs whose decoded payload equals this (default :data:`ANY`).
        queue: only jobs in this queue (None: all queues).
        status: only jobs in this status (a JobStatus or its value; None: all, finished jobs too).

    Raises:
        TypeError: ``app`` is not a Tether app.
        ValidationError: a bad queue name or status.
    """
    _check_app(app, "enqueued_jobs")
    return [job for job in _all_jobs(app, queue=queue, status=status) if _matches(job, job_type, payload)]


def _payload_text(job: Job) -> str:
    text = job.payload_json
    return text if len(text) <= _PAYLOAD_CHARS else text[:_PAYLOAD_CHARS] + f"... ({len(text)} chars)"


def _difference(expected: Any, got: Any) -> str:
    """Which keys of two dict payloads differ, in words; empty when not both dicts."""
    if not (isinstance(expected, dict) and isinstance(got, dict)):
        return ""
    parts = []
    missing = [k for k in expected if k not in got]
    extra = [k for k in got if k not in expected]
    changed = [k for k in expected if k in got and expected[k] != got[k]]
    if missing:
        parts.append(f"missing {missing}")
    if extra:
        parts.append(f"unexpected {extra}")
    for key in changed[:5]:
        parts.append(f"{key!r}: expected {expected[key]!r}, got {got[key]!r}")
    return "; ".join(parts)


def _describe(jobs: list[Job], *, job_type: str | None = None, expected: Any = ANY) -> str:
    if not jobs:
        return "  (no jobs at all)"
    lines = []
    for job in jobs[:_SHOWN]:
        line = f"  #{job.id} {job.job_type} queue={job.queue} status={job.status.value} payload={_payload_text(job)}"
        if job_type is not None and job.job_type == job_type and expected is not ANY:
            diff = _difference(expected, job.payload)
            if diff:
                line += f"\n      differs: {diff}"
        lines.append(line)
    if len(jobs) > _SHOWN:
        lines.append(f"  ... and {len(jobs) - _SHOWN} more")
    return "\n".join(lines)


def _expectation(job_type: str, payload: Any, queue: str | None) -> str:
    parts = [repr(job_type)]
    if payload is not ANY:
        parts.append(f"payload={payload!r}")
    if queue is not None:
        parts.append(f"queue={queue!r}")
    return " ".join(parts)


def assert_enqueued(
    app: Tether,
    job_type: str,
    payload: Any = ANY,
    *,
    queue: str | None = None,
    count: int | None = None,
) -> list[Job]:
    """Assert that jobs of ``job_type`` (with this payload and queue, if given) were enqueued.

    Args:
        app: the application object the code under test enqueues through.
        job_type: the expected job type.
        payload: the expected payload (default :data:`ANY`).
        queue: the expected queue (None: any).
        count: the exact number expected; None means "at least one".

    Returns:
        The matching jobs, by ascending id.

    Raises:
        AssertionError: with the expectation, how many matched, and every job that was enqueued
            (with the differing keys of same-type jobs).
        TypeError: ``app`` is not a Tether app; ValueError: ``count`` is not an integer >= 0.
    """
    _check_app(app, "assert_enqueued")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValueError(f"count: must be an integer >= 0 or None, got {count!r}")
    expected = payload
    everything = _all_jobs(app, queue=None, status=None)
    matching = [job for job in everything if (queue is None or job.queue == queue) and _matches(job, job_type, expected)]
    if (count is None and matching) or (count is not None and len(matching) == count):
        return matching
    wanted = "at least 1" if count is None else f"exactly {count}"
    raise AssertionError(
        f"expected {wanted} job(s) {_expectation(job_type, payload, queue)}, found {len(matching)}; "
        f"enqueued were:\n{_describe(everything, job_type=job_type, expected=expected)}"
    )


def assert_not_enqueued(app: Tether, job_type: str, payload: Any = ANY, *, queue: str | None = None) -> None:
    """Assert that no job of ``job_type`` (with this payload and queue, if given) was enqueued.

    Raises:
        AssertionError: listing the offending jobs.
        TypeError: ``app`` is not a Tether app.
    """
    _check_app(app, "assert_not_enqueued")
    matching = enqueued_jobs(app, job_type, payload, queue=queue)
    if matching:
        raise AssertionError(
            f"expected no job {_expectation(job_type, payload, queue)}, found {len(matching)}:\n{_describe(matching)}"
        )


__all__ = ["ANY", "assert_enqueued", "assert_not_enqueued", "enqueued_jobs"]
