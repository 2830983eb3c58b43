"""``tether jobs list``, ``show`` and ``why``: look at stored jobs, as a table or as JSON; ``tether
jobs cancel`` lives in :mod:`.cancel`."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from tether.domain.history import HISTORY_LIMIT, after_retry
from tether.domain.job import JobStatus
from tether.entrypoints.cli.cancel import jobs_cancel
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
from tether.entrypoints.cli.output import (
    attempt_line,
    explanation_to_dict,
    job_to_dict,
    print_json,
    printable,
    short_time,
    stdout,
)
from tether.entrypoints.cli.values import FlagNamingCommand, choice, integer

jobs_app = typer.Typer(help="Look at and cancel jobs.", no_args_is_help=True, rich_markup_mode=None)


@jobs_app.command("list", cls=FlagNamingCommand)
def jobs_list(
    status: Annotated[
        JobStatus | None,
        typer.Option(
            "--status", "-s", parser=choice(JobStatus), metavar="STATUS",
            help="Only jobs in this status: " + ", ".join(s.value for s in JobStatus) + ".",
        ),
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Only jobs in this queue.")] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", parser=integer(1, 10_000), metavar="N", help="At most this many jobs (1-10,000).")
    ] = 50,
    offset: Annotated[int, typer.Option("--offset", parser=integer(0), metavar="N", help="Skip this many jobs first.")] = 0,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """List jobs by ascending id, with counts by status."""
    from tether.domain.validation import validate_queue

    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    if queue is not None:
        validate_queue(queue)
    with open_app(settings) as tether_app:
        jobs = tether_app.list(status=status, queue=queue, limit=limit, offset=offset)
        counts = tether_app.counts(queue=queue)
    if as_json:
        print_json({"counts": {s.value: counts.get(s, 0) for s in JobStatus}, "jobs": [job_to_dict(j) for j in jobs]})
        return
    table = Table(
        title=f"{len(jobs)} job(s)" + (f" in queue {queue}" if queue else ""),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    widest_type = max((len(job.job_type) for job in jobs), default=4)
    table.add_column("id", justify="right", no_wrap=True, min_width=max([2, *(len(str(job.id)) for job in jobs)]))
    table.add_column("type", no_wrap=True, min_width=min(widest_type, 20))
    table.add_column("queue", no_wrap=True)
    table.add_column("status", no_wrap=True, min_width=9)
    table.add_column("tries", no_wrap=True, min_width=5)
    table.add_column("due (UTC)", no_wrap=True)
    table.add_column("last error", no_wrap=True, overflow="ellipsis", max_width=30)
    for job in jobs:
        table.add_row(
            str(job.id),
            printable(job.job_type),
            printable(job.queue),
            job.status.value,
            f"{job.attempts}/{job.max_attempts}",
            "" if job.finished_at is not None else job.scheduled_at.strftime("%Y-%m-%d %H:%M:%S"),
            printable(job.current_error or ""),
        )
    stdout().print(table)
    stdout().print("  ".join(f"{s.value} {counts.get(s, 0)}" for s in JobStatus))


#: Under a completed job's last error in ``jobs show``: whose error it is.
EARLIER_ERROR = "(an earlier attempt's: the job completed after it)"


@jobs_app.command("show", cls=FlagNamingCommand)
def jobs_show(
    job_id: Annotated[int, typer.Argument(parser=integer(), metavar="ID", help="The job's id.")],
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """Show one job in full, with its attempt history (one line per attempt)."""
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    with open_app(settings) as tether_app:
        job = tether_app.get(job_id)
    data = job_to_dict(job)
    if as_json:
        print_json(data)
        return
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in data.items():
        if key not in ("payload", "history"):
            table.add_row(key, "" if value is None else printable(str(value)))
            if key == "last_error" and value is not None and job.current_error is None:
                table.add_row("", EARLIER_ERROR)
    payload_lines = json.dumps(data["payload"], indent=2, ensure_ascii=False).splitlines()
    table.add_row("payload", "\n".join(printable(line) for line in payload_lines))
    console = stdout()
    console.print(table)
    if job.history:
        console.print(f"history: {len(job.history)} attempt(s), oldest first, times UTC (at most {HISTORY_LIMIT} kept)")
        for attempt, retried in zip(job.history, after_retry(job.history)):
            console.print("  " + printable(attempt_line(attempt, retried)), markup=False)
    else:
        console.print("history: no attempt has ended yet")


@jobs_app.command("why", cls=FlagNamingCommand)
def jobs_why(
    job_id: Annotated[int, typer.Argument(parser=integer(), metavar="ID", help="The job's id.")],
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """Say why a job is where it is: one line, then the facts behind it."""
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    with open_app(settings) as tether_app:
        explanation = tether_app.explain(job_id)
    if as_json:
        print_json(explanation_to_dict(explanation))
        return
    print(f"job {explanation.job_id}: {printable(explanation.verdict)}")
    capped = explanation.fact("due_ahead_capped") is True
    for fact in explanation.facts:
        if fact.name == "due_ahead_capped":
            continue
        text = f"{fact.value:,}+" if fact.name == "due_ahead" and capped else _fact_text(fact.value)
        if fact.name == "last_error" and explanation.status is JobStatus.COMPLETED:
            text += f" {EARLIER_ERROR}"
        print(f"  {fact.name + ':':<21}{printable(text)}")


def _fact_text(value: Any) -> str:
    """A fact's value on one line: times as ``YYYY-MM-DD HH:MM:SS UTC``, names comma-separated."""
    if isinstance(value, datetime):
        return f"{short_time(value)} UTC"
    if isinstance(value, tuple):
        return ", ".join(value) if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "" if value is None else str(value)


jobs_app.command("cancel", cls=FlagNamingCommand)(jobs_cancel)


def register(app: typer.Typer) -> None:
    """Add the ``tether jobs`` group (list, show, cancel) to ``app``."""
    app.add_typer(jobs_app, name="jobs")


__all__ = ["jobs_app", "jobs_list", "jobs_show", "jobs_why", "register"]
