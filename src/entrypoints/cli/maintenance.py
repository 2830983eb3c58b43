"""``tether retry``, ``tether purge`` and ``tether reap``: an operator's hand on dead or cancelled, finished and expired jobs."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer
from tether.domain.job import JobStatus
from tether.entrypoints.cli.options import (
    CHANGES_ALONE,
    DatabaseUrl,
    RedisClusterSwitch,
    RedisPrefix,
    RedisUrl,
    Schema,
    load_settings,
    open_app,
)
from tether.entrypoints.cli.output import stdout
from tether.entrypoints.cli.values import FlagNamingCommand, integer, seconds

#: What ``retry`` does while Redis does not answer (the job is not announced; the sweep finds it).
RETRIED_JOB = "the job is back in its queue in the database; workers find it at their next sweep, seconds late"


def retry(
    job_id: Annotated[int, typer.Argument(parser=integer(), metavar="ID", help="The id of a dead or cancelled job.")],
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
) -> None:
    """Put a dead or cancelled job back in its queue (attempts start again from 0)."""
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    with open_app(settings, without_redis=RETRIED_JOB) as tether_app:
        job = tether_app.retry(job_id)
    stdout().print(f"job {job.id} is {job.status.value} again on queue {job.queue}")


def purge(
    older_than: Annotated[
        float,
        typer.Option(
            "--older-than", parser=seconds(), metavar="SECONDS",
            help="Delete completed, dead and cancelled jobs that finished more than this many seconds ago.",
        ),
    ],
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
) -> None:
    """Delete finished (completed, dead and cancelled) jobs; their idempotency keys become free again."""
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    with open_app(settings, without_redis=CHANGES_ALONE) as tether_app:
        deleted = tether_app.purge(timedelta(seconds=older_than))
    stdout().print(f"purged {deleted} finished job(s) older than {older_than:g} s")


def reap(
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
) -> None:
    """Take back running jobs whose lease expired (workers do this on their own every reap interval)."""
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    with open_app(settings, without_redis=CHANGES_ALONE) as tether_app:
        jobs = tether_app.reap()
    retrying = sum(1 for job in jobs if job.status is JobStatus.RETRYING)
    stdout().print(f"reaped {len(jobs)} expired lease(s): {retrying} retrying, {len(jobs) - retrying} dead")


def register(app: typer.Typer) -> None:
    """Add ``tether retry``, ``tether purge`` and ``tether reap`` to ``app``, in that order."""
    for command in (retry, purge, reap):
        app.command(cls=FlagNamingCommand)(command)


__all__ = ["purge", "reap", "register", "retry"]
