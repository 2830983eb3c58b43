"""``tether queues list | pause | resume | limit``: look at queues and change their controls.

Queues are implicit (a queue exists once a job names it); pausing or limiting a queue that has no
job yet is allowed.  Every value is checked before the store is opened: a bad queue name or
limit is one line naming the argument or flag, exit code 2, nothing written.  ``resume`` and
``limit`` tell the dispatcher about the queue's due jobs (with ``--redis-url`` they are published,
so idle workers of every process start them at once).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.domain.queues import MAX_RUNNING_LIMIT, QueueInfo, QueueState, validate_queue_name, validate_rate
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
from tether.entrypoints.cli.output import iso, print_json, stdout
from tether.entrypoints.cli.values import FlagNamingCommand, integer, seconds

queues_app = typer.Typer(
    help="Look at queues; pause, resume or limit them.", no_args_is_help=True, rich_markup_mode=None
)

QueueName = Annotated[str, typer.Argument(metavar="QUEUE", show_default=False, help="The queue's name.")]


def info_to_dict(info: QueueInfo) -> dict[str, object]:
    """``info`` as JSON-ready values."""
    return {
        "name": info.name,
        "paused": info.paused,
        "max_running": info.max_running,
        "max_running_per_key": info.max_running_per_key,
        "rate_limit": info.rate_limit,
        "rate_period": info.rate_period,
        "counts": {status.value: n for status, n in info.counts.items()},
    }


def state_to_dict(state: QueueState) -> dict[str, object]:
    """``state`` as JSON-ready values."""
    return {"name": state.name, "paused": state.paused, "max_running": state.max_running,
            "max_running_per_key": state.max_running_per_key, "rate_limit": state.rate_limit, "rate_period": state.rate_period, "updated_at": iso(state.updated_at)}


def rate_text(rate_limit: int | None, rate_period: float | None) -> str:
    """``100 per 60 s``, or ``-`` without a rate limit."""
    return "-" if rate_limit is None else f"{rate_limit:,} per {rate_period:g} s"


def _describe(state: QueueState) -> str:
    limit = "no running limit" if state.max_running is None else f"at most {state.max_running:,} running"
    per_key = "" if state.max_running_per_key is None else f", at most {state.max_running_per_key:,} running per key"
    rate = "" if state.rate_limit is None else f", at most {rate_text(state.rate_limit, state.rate_period)} started"
    return f"queue {state.name}: {'paused' if state.paused else 'active'}, {limit}{per_key}{rate}"


def _report(state: QueueState, as_json: bool) -> None:
    if as_json:
        print_json({"queue": state_to_dict(state)})
    else:
        stdout().print(_describe(state))


@queues_app.command("list", cls=FlagNamingCommand)
def queues_list(
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """List every queue that holds jobs or has controls: its counts, paused flag and limits."""
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    with open_app(settings) as tether_app:
        infos = tether_app.queues()
    if as_json:
        print_json({"queues": [info_to_dict(i) for i in infos]})
        return
    table = Table(title=f"{len(infos)} queue(s)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    table.add_column("queue", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("max running", justify="right", no_wrap=True)
    table.add_column("per key", justify="right", no_wrap=True)
    table.add_column("rate", justify="right", no_wrap=True)
    for status in JobStatus:
        table.add_column(status.value, justify="right", no_wrap=True)
    for info in infos:
        table.add_row(
            info.name, "paused" if info.paused else "active", "-" if info.max_running is None else f"{info.max_running:,}",
            "-" if info.max_running_per_key is None else f"{info.max_running_per_key:,}",
            rate_text(info.rate_limit, info.rate_period),
            *(f"{info.counts.get(s, 0):,}" for s in JobStatus),
        )
    stdout().print(table)


#: What ``resume`` and ``limit`` do while Redis does not answer: the queue's due jobs are not
#: announced to the workers on Redis Streams, whose sweep re-publishes them from the database.
UNANNOUNCED_QUEUE = "the queue's due jobs are not announced; workers find them at their next sweep, seconds late"


@queues_app.command("pause", cls=FlagNamingCommand)
def queues_pause(
    queue: QueueName,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """Pause a queue: no worker starts its jobs until it is resumed (running jobs finish; enqueue goes on)."""
    validate_queue_name(queue)
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    with open_app(settings, without_redis=CHANGES_ALONE) as tether_app:
        _report(tether_app.pause_queue(queue), as_json)


@queues_app.command("resume", cls=FlagNamingCommand)
def queues_resume(
    queue: QueueName,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """Resume a paused queue; its due jobs are announced to the workers at once."""
    validate_queue_name(queue)
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    with open_app(settings, without_redis=UNANNOUNCED_QUEUE) as tether_app:
        _report(tether_app.resume_queue(queue), as_json)


@queues_app.command("limit", cls=FlagNamingCommand)
def queues_limit(
    queue: QueueName,
    max_running: Annotated[
        int | None,
        typer.Option(
            "--max-running", parser=integer(1, MAX_RUNNING_LIMIT), metavar="N", show_default=False,
            help="Most jobs of the queue running at once across every worker.",
        ),
    ] = None,
    max_running_per_key: Annotated[
        int | None,
        typer.Option(
            "--max-running-per-key", parser=integer(1, MAX_RUNNING_LIMIT), metavar="N", show_default=False,
            help="Most jobs of the queue with the same concurrency key running at once across every worker.",
        ),
    ] = None,
    rate_limit: Annotated[
        int | None,
        typer.Option(
            "--rate", parser=integer(1, MAX_RUNNING_LIMIT), metavar="N", show_default=False,
            help="Most jobs of the queue started per window of --per seconds, across every worker.",
        ),
    ] = None,
    rate_period: Annotated[
        float | None,
        typer.Option(
            "--per", parser=seconds(allow_zero=False), metavar="SECONDS", show_default=False,
            help="The rate window (fixed windows: multiples of it since the Unix epoch).",
        ),
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Remove the queue's running limit, per-key running limit and rate limit.")
    ] = False,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """Set a queue's running limit (--max-running N), per-key running limit (--max-running-per-key N)
    and/or rate limit (--rate N --per SECONDS), or remove them all (--clear); the limits hold
    across every worker."""
    given = any(v is not None for v in (max_running, max_running_per_key, rate_limit, rate_period))
    if clear == given:
        raise ValidationError(
            "max_running", "give --max-running N, --max-running-per-key N, --rate N --per SECONDS, or --clear"
        )
    if (rate_limit is None) != (rate_period is None):
        raise ValidationError("rate_period" if rate_period is None else "rate_limit", "--rate and --per go together")
    validate_queue_name(queue)
    if rate_limit is not None:
        validate_rate(rate_limit, rate_period)
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    with open_app(settings, without_redis=UNANNOUNCED_QUEUE) as tether_app:
        state = None
        if clear:
            state = tether_app.limit_queue(queue, max_running=None, max_running_per_key=None)
        elif max_running is not None or max_running_per_key is not None:
            limits = {"max_running": max_running} if max_running is not None else {}
            if max_running_per_key is not None:
                limits["max_running_per_key"] = max_running_per_key
            state = tether_app.limit_queue(queue, **limits)
        if clear or rate_limit is not None:
            state = tether_app.rate_limit_queue(queue, starts=rate_limit, per=rate_period)
        assert state is not None
        _report(state, as_json)


def register(app: typer.Typer) -> None:
    """Add the ``tether queues`` group to ``app``."""
    app.add_typer(queues_app, name="queues")


__all__ = ["info_to_dict", "queues_app", "queues_limit", "queues_list", "queues_pause", "queues_resume", "register"]
