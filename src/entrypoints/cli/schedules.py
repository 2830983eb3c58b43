"""``tether schedules list``: the periodic schedules the store holds, as a table or as JSON.

Worker pools declare their app's schedules in the store at start and at every heartbeat; each row
says when the schedule ticks, its next tick, its last tick's job and that job's status, and
whether a live pool still declares it (a schedule no pool declares any more no longer ticks).
"""

from __future__ import annotations

from typing import Any

import typer
from rich import box
from rich.table import Table
from tether.domain.schedules import ScheduleState
from tether.entrypoints.cli.options import AsJson, DatabaseUrl, Schema, load_settings, open_app
from tether.entrypoints.cli.output import iso, print_json, short_time, stdout
from tether.entrypoints.cli.values import FlagNamingCommand

schedules_app = typer.Typer(help="Look at the periodic schedules the store knows.", no_args_is_help=True, rich_markup_mode=None)


def schedule_to_dict(state: ScheduleState) -> dict[str, Any]:
    """A JSON-ready view of a stored schedule (times ISO 8601 UTC; ``queue`` null: the default one)."""
    return {
        "name": state.name,
        "job_type": state.job_type,
        "queue": state.queue,
        "schedule": state.spec,
        "tz": state.tz,
        "declared": state.live,
        "declared_by": state.declared_by,
        "declared_at": iso(state.declared_at),
        "next_tick_at": iso(state.next_tick_at) if state.next_tick_at is not None else None,
        "last_tick_at": iso(state.last_tick_at) if state.last_tick_at is not None else None,
        "last_job_id": state.last_job_id,
        "last_job_status": state.last_job_status.value if state.last_job_status is not None else None,
    }


@schedules_app.command("list", cls=FlagNamingCommand)
def schedules_list(
    database_url: DatabaseUrl = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """List the periodic schedules: each one's next tick, its last job and that job's status."""
    settings = load_settings(database_url=database_url, schema=schema)
    with open_app(settings) as tether_app:
        schedules = tether_app.schedules()
    if as_json:
        print_json({"schedules": [schedule_to_dict(s) for s in schedules]})
        return
    live = sum(1 for s in schedules if s.live)
    table = Table(
        title=f"{len(schedules)} schedule(s): {live} declared by a live worker, {len(schedules) - live} not",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("name", no_wrap=True)
    table.add_column("job type", no_wrap=True, overflow="ellipsis", max_width=40)
    table.add_column("schedule", no_wrap=True)
    table.add_column("tz", no_wrap=True)
    table.add_column("declared", no_wrap=True)
    table.add_column("next tick (UTC)", no_wrap=True)
    table.add_column("last job", justify="right", no_wrap=True)
    table.add_column("last job status", no_wrap=True)
    for s in schedules:
        table.add_row(
            s.name,
            s.job_type,
            s.spec,
            s.tz,
            "yes" if s.live else "no",
            short_time(s.next_tick_at) if s.live else "",
            "" if s.last_job_id is None else str(s.last_job_id),
            "" if s.last_job_id is None else (s.last_job_status.value if s.last_job_status is not None else "purged"),
        )
    stdout().print(table)


def register(app: typer.Typer) -> None:
    """Add the ``tether schedules`` group to ``app``."""
    app.add_typer(schedules_app, name="schedules")


__all__ = ["register", "schedule_to_dict", "schedules_app", "schedules_list"]
