"""``tether enqueue``: put one job in a queue, and the parsers of its ``--payload`` and ``--run-at``.

Without a Redis URL, ``enqueue`` cannot publish the job to workers that wait on Redis Streams: they
find it only at their next sweep (up to ``sweep_interval``, 5 s by default, later).  After storing
the job it reads the worker registry, and when live pools of the job's queue use Redis Streams it
says so in one line on stderr, naming ``--redis-url`` and ``TETHER_REDIS_URL`` (the job is stored
either way; reading the registry never fails the command).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from tether.domain.errors import TetherError, ValidationError, shown
from tether.domain.limits import int_digit_limit
from tether.domain.payload import MAX_DEPTH
from tether.domain.validation import prepare_job
from tether.domain.workers import REDIS_DISPATCH
from tether.entrypoints.cli.options import (
    AsJson,
    DatabaseUrl,
    RedisClusterSwitch,
    RedisPrefix,
    RedisUrl,
    Schema,
    load_settings,
    open_app,
)
from tether.entrypoints.cli.output import job_to_dict, print_json, short_time, stdout
from tether.entrypoints.cli.values import FlagNamingCommand, integer, seconds

if TYPE_CHECKING:
    from tether.entrypoints.service import Tether


def parse_payload(text: str) -> Any:
    """The ``--payload`` text as JSON.  Raises ValidationError(``payload``) if it does not parse."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError("payload", f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError:  # an integer longer than Python's int-to-str digit limit
        raise ValidationError("payload", f"holds an integer of more than {int_digit_limit():,} digits") from None
    except RecursionError:  # nested past the parser's stack long before the payload's own limit
        raise ValidationError("payload", f"nests deeper than {MAX_DEPTH} levels") from None


def parse_run_at(text: str | None) -> datetime | None:
    """``--run-at`` as an aware datetime (ISO 8601 with an offset or ``Z``).

    Raises ValidationError(``run_at``): unparsable, or without a UTC offset.
    """
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValidationError("run_at", f"{shown(text)} is not an ISO 8601 date-time such as 2026-05-01T09:30:00Z") from None
    if value.tzinfo is None:
        example = text if len(text) <= 40 and text.isprintable() else "2026-05-01T09:30:00"
        raise ValidationError("run_at", f"{shown(text)} has no UTC offset; add one, e.g. {example}Z or {example}+02:00")
    return value


#: What ``enqueue`` does while Redis does not answer: the job is committed and its publication fails
#: (or is skipped); the sweep of the workers on Redis Streams re-publishes due jobs from the database.
UNANNOUNCED_JOB = "the job is stored in the database; workers find it at their next sweep, seconds late"


def redis_workers_note(tether_app: Tether, queue: str) -> str | None:
    """The stderr line for a job enqueued without a Redis URL on ``queue``, when live worker pools
    of that queue wait on Redis Streams (they find it only at their next sweep); else None.
    Information only: an unreadable registry gives None."""
    try:
        workers = tether_app.workers()
    except TetherError:
        return None
    on_redis = [w for w in workers if not w.gone and w.dispatcher == REDIS_DISPATCH and w.serves(queue)]
    if not on_redis:
        return None
    pools, wait = ("pool", "waits") if len(on_redis) == 1 else ("pools", "wait")
    return (
        f"tether: note: {len(on_redis)} live worker {pools} of queue {queue} {wait} on Redis Streams "
        f"(e.g. {on_redis[0].worker_id}); without --redis-url (or TETHER_REDIS_URL) they see this job only at "
        "their next sweep, seconds late"
    )


def enqueue(
    job_type: Annotated[str, typer.Argument(metavar="JOB_TYPE", help="The job type (the handler's name), e.g. emails.send.")],
    payload: Annotated[str, typer.Option("--payload", "-p", help="The payload as JSON.")] = "{}",
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Queue name. [default: default]")] = None,
    priority: Annotated[int, typer.Option("--priority", parser=integer(), metavar="N", help="Higher runs first.")] = 0,
    delay: Annotated[
        float | None,
        typer.Option("--delay", parser=seconds(), metavar="SECONDS", help="Run no sooner than this many seconds from now."),
    ] = None,
    run_at: Annotated[
        str | None,
        typer.Option("--run-at", help="Run no sooner than this ISO 8601 time with offset, e.g. 2026-05-01T09:30:00Z."),
    ] = None,
    max_attempts: Annotated[
        int | None,
        typer.Option("--max-attempts", parser=integer(), metavar="N", help="Leases allowed in all (1-10,000). [default: 3]"),
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", "-k", help="Enqueue at most once per key (until purged).")
    ] = None,
    concurrency_key: Annotated[
        str | None,
        typer.Option("--concurrency-key", help="The key the queue's per-key running limit counts the job under (1-255 characters)."),
    ] = None,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """Enqueue one job."""
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    value = parse_payload(payload)
    when = parse_run_at(run_at)
    if when is not None and delay is not None:
        raise ValidationError("run_at", "give --run-at or --delay, not both")
    # Check every field before the store is opened, so bad input leaves no file behind.
    from tether.domain.timeutil import UTC

    prepare_job(
        job_type,
        value,
        now=datetime.now(UTC),
        queue=queue if queue is not None else "default",
        priority=priority,
        run_at=when,
        delay=delay,
        max_attempts=max_attempts if max_attempts is not None else 1,
        idempotency_key=idempotency_key,
        max_payload_bytes=settings.max_payload_bytes,
        concurrency_key=concurrency_key,
    )
    with open_app(settings, create=True, without_redis=UNANNOUNCED_JOB) as tether_app:
        result = tether_app.enqueue(
            job_type,
            value,
            queue=queue,
            priority=priority,
            run_at=when,
            delay=delay,
            max_attempts=max_attempts,
            idempotency_key=idempotency_key,
            concurrency_key=concurrency_key,
        )
        note = redis_workers_note(tether_app, result.job.queue) if settings.redis_url is None and result.created else None
    job = result.job
    if as_json:
        print_json({"created": result.created, "job": job_to_dict(job)})
    elif result.created:
        stdout().print(f"enqueued job {job.id} ({job.job_type} on queue {job.queue}, due {short_time(job.scheduled_at)} UTC)")
    else:
        stdout().print(
            f"job {job.id} already holds idempotency key {job.idempotency_key!r} ({job.status.value}); nothing enqueued"
        )
    if note is not None:
        print(note, file=sys.stderr)


def register(app: typer.Typer) -> None:
    """Add ``tether enqueue`` to ``app``."""
    app.command(cls=FlagNamingCommand)(enqueue)


__all__ = ["UNANNOUNCED_JOB", "enqueue", "parse_payload", "parse_run_at", "redis_workers_note", "register"]
