"""``tether jobs cancel``: cancel jobs by id, by idempotency key, or every job a filter matches
(registered in the ``jobs`` group by :mod:`.jobs`).

Every value is checked before the store is opened, and the jobs named by id or key are all read
before any is cancelled, so bad input (a malformed id, a status that cannot be cancelled, a filter
missing, a job that does not exist or has finished) is one line, exit code 2, nothing written.
"""

from __future__ import annotations

from typing import Annotated

import typer
from tether.domain.errors import InvalidTransition, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.validation import CANCELLABLE_STATUSES, validate_idempotency_key, validate_job_type, validate_queue
from tether.entrypoints.cli.options import (
    CHANGES_ALONE,
    AsJson,
    DatabaseUrl,
    RedisClusterSwitch,
    RedisPrefix,
    RedisUrl,
    Schema,
    load_settings,
    open_app,
)
from tether.entrypoints.cli.output import job_to_dict, print_json, stdout
from tether.entrypoints.cli.values import integer

_CANCELLABLE = ", ".join(s.value for s in CANCELLABLE_STATUSES)


def cancellable_status(text: str) -> JobStatus:
    """Parse ``--status``: one of the statuses a cancel acts on.

    Raises typer.BadParameter: ``must be one of queued, retrying, running, got 'dead'``.
    """
    wanted = str(text).strip().casefold()
    for status in CANCELLABLE_STATUSES:
        if status.value == wanted:
            return status
    raise typer.BadParameter(f"must be one of {_CANCELLABLE}, got {text!r}")


def _bad(option: str, problem: str) -> ValidationError:
    """Bad input about ``option`` (its Python name: ``all``, ``key``, ...), reported under its flag."""
    return ValidationError(option, problem)


def describe(job: Job) -> str:
    """One line saying what a cancel did to ``job``."""
    if job.status is JobStatus.CANCELLED:
        return f"job {job.id} cancelled"
    return f"job {job.id} is running: cancellation requested; it ends cancelled at its next outcome"


def jobs_cancel(
    job_ids: Annotated[
        list[int] | None,
        typer.Argument(parser=integer(1), metavar="ID", show_default=False, help="Ids of the jobs to cancel."),
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", "-k", metavar="KEY", help="Cancel the job holding this idempotency key.")
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q", metavar="Q", help="Cancel the jobs of this queue.")] = None,
    status: Annotated[
        list[JobStatus] | None,
        typer.Option(
            "--status", "-s", parser=cancellable_status, metavar="STATUS",
            help=f"Cancel the jobs in this status ({_CANCELLABLE}); repeat for several.",
        ),
    ] = None,
    job_type: Annotated[
        str | None, typer.Option("--job-type", metavar="TYPE", help="Cancel the jobs of this type.")
    ] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Cancel every queued, retrying and running job (no filter).")
    ] = False,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """Cancel jobs: queued and retrying ones at once, running ones when their worker next writes.

    Name jobs by ID or --key, or cancel every job matching the filters given (--queue, --status,
    --job-type, all of them), or --all; filtered cancels are written 1,000 jobs per statement.
    """
    filters = queue is not None or bool(status) or job_type is not None
    if job_ids and key is not None:
        raise _bad("key", "give job ids or --key, not both")
    named = bool(job_ids) or key is not None
    if named and (filters or everything):
        raise _bad("all" if everything else "queue" if queue is not None else "status" if status else "job_type",
                   "cancels the jobs a filter matches; not with job ids or --key")
    if not named and not filters and not everything:
        raise _bad("all", "name jobs (ID or --key) or a filter (--queue, --status, --job-type), or pass --all")
    if filters and everything:
        raise _bad("all", "cancels every job; not with --queue, --status or --job-type")
    if queue is not None:
        validate_queue(queue)
    if job_type is not None:
        validate_job_type(job_type)
    if key is not None:
        key = validate_idempotency_key(key)
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    with open_app(settings, without_redis=CHANGES_ALONE) as tether_app:
        if not named:
            count = tether_app.cancel_matching(queue=queue, statuses=status or None, job_type=job_type, everything=everything)
            if as_json:
                print_json({"cancelled": count})
            else:
                stdout().print(f"{count} job(s) cancelled (running ones end cancelled at their next outcome)")
            return
        if key is not None:
            found = tether_app.find_by_key(key)
            if found is None:
                raise _bad("key", f"no job holds idempotency key {key!r}")
            targets = [found]
        else:
            targets = [tether_app.get(job_id) for job_id in dict.fromkeys(job_ids or [])]  # JobNotFound: exit 2
        for job in targets:  # every one checked before any is written
            if job.status.is_terminal:
                raise InvalidTransition(job.id, job.status.value, "cancel")
        done = [tether_app.cancel(job.id) for job in targets]
    if as_json:
        print_json([job_to_dict(job) for job in done])
        return
    for job in done:
        stdout().print(describe(job))


__all__ = ["cancellable_status", "describe", "jobs_cancel"]
