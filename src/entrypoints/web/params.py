"""The dashboard's page parameters: each one read from the query string or a form and checked, a bad
one refused as :class:`BadParameter` (answered 400 with its message, never a 500 or a table scan)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, time

import attrs
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.domain.overview import MAX_PAGE_LIMIT, JobFilter
from tether.domain.validation import validate_job_type, validate_queue
from tether.entrypoints.job_control import MAX_BIGINT

DEFAULT_PAGE_LIMIT = 50
#: Parameters of other pagers, refused with a word on what to use instead.
REFUSED = {
    "offset": "offset is not supported: pages go on with the 'before' cursor of the 'Older' link",
    "page": "page is not supported: pages go on with the 'before' cursor of the 'Older' link",
}


class BadParameter(ValidationError):
    """A page parameter was malformed or out of range (answered 400)."""


@attrs.frozen
class JobsQuery:
    """What ``/jobs`` lists: the filter, the cursor (jobs with a lower id; None: the newest), how many."""

    filters: JobFilter
    before: int | None
    limit: int


def positive_id(text: str, field: str) -> int:
    """``text`` as an id from 1 to 2**63 - 1.  Raises BadParameter naming ``field``."""
    if not text.isascii() or not text.isdigit() or len(text) > 19 or not 1 <= int(text) <= MAX_BIGINT:
        raise BadParameter(field, f"must be an integer from 1 to {MAX_BIGINT:,}, got {text[:40]!r}")
    return int(text)


def jobs_query(params: Mapping[str, str]) -> JobsQuery:
    """The ``/jobs`` query string as a :class:`JobsQuery`.  Raises BadParameter."""
    for name, reason in REFUSED.items():
        if name in params:
            raise BadParameter(name, reason)
    status = None
    if params.get("status"):
        try:
            status = JobStatus(params["status"])
        except ValueError:
            names = ", ".join(s.value for s in JobStatus)
            raise BadParameter("status", f"must be one of {names}, got {params['status'][:40]!r}") from None
    queue = _checked(params.get("queue"), validate_queue, "queue")
    job_type = _checked(params.get("job_type"), validate_job_type, "job_type")
    before = positive_id(params["before"], "before") if params.get("before") else None
    limit = DEFAULT_PAGE_LIMIT
    if params.get("limit"):
        text = params["limit"]
        if not text.isascii() or not text.isdigit() or len(text) > 6 or not 1 <= int(text) <= MAX_PAGE_LIMIT:
            raise BadParameter("limit", f"must be an integer from 1 to {MAX_PAGE_LIMIT:,}, got {text[:40]!r}")
        limit = int(text)
    return JobsQuery(JobFilter(status, queue, job_type), before, limit)


def _checked(value: str | None, check: Callable[[str], str], field: str) -> str | None:
    if not value:
        return None
    try:
        return check(value)
    except ValidationError as error:
        raise BadParameter(field, error.problem) from None


def purge_before(text: str | None) -> datetime:
    """The purge form's date (``YYYY-MM-DD``: midnight UTC; or an ISO datetime with its offset) as
    an aware UTC datetime.  Raises BadParameter(``older_than``)."""
    if not text:
        raise BadParameter("older_than", "is required: a date (YYYY-MM-DD, UTC) or an ISO datetime with its offset")
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), time(), tzinfo=UTC)
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadParameter("older_than", f"must be a date (YYYY-MM-DD) or an ISO datetime, got {text[:40]!r}") from None
    if moment.tzinfo is None:
        raise BadParameter("older_than", "a datetime must carry its offset (for example 2026-01-31T00:00:00+00:00)")
    return moment.astimezone(UTC)


__all__ = ["DEFAULT_PAGE_LIMIT", "BadParameter", "JobsQuery", "jobs_query", "positive_id", "purge_before"]
