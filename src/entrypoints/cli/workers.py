"""``tether workers list``: the worker registry, as a table or as JSON.

Each running worker pool records itself in the store and refreshes its entry at every heartbeat;
a pool that stopped refreshing (killed, host lost) is listed as ``gone`` until its entry is pruned
a day later.  Information only: nothing about leases depends on it.
"""

from __future__ import annotations

import typer
from rich import box
from rich.table import Table
from tether.entrypoints.cli.options import AsJson, DatabaseUrl, Schema, load_settings, open_app
from tether.entrypoints.cli.output import print_json, printable, short_time, stdout, worker_to_dict
from tether.entrypoints.cli.values import FlagNamingCommand

workers_app = typer.Typer(help="Look at the worker pools the store knows.", no_args_is_help=True, rich_markup_mode=None)


@workers_app.command("list", cls=FlagNamingCommand)
def workers_list(
    database_url: DatabaseUrl = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """List the worker pools that are running, and those gone without a clean stop in the last day."""
    settings = load_settings(database_url=database_url, schema=schema)
    with open_app(settings) as tether_app:
        workers = tether_app.workers()
    if as_json:
        print_json({"workers": [worker_to_dict(w) for w in workers]})
        return
    alive = sum(1 for w in workers if not w.gone)
    table = Table(
        title=f"{len(workers)} worker pool(s): {alive} alive, {len(workers) - alive} gone",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("worker id", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("host", no_wrap=True)
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("queues", no_wrap=True, overflow="ellipsis", max_width=30)
    table.add_column("job types", no_wrap=True, overflow="ellipsis", max_width=40)
    table.add_column("threads", justify="right", no_wrap=True)
    table.add_column("dispatch", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("started (UTC)", no_wrap=True)
    table.add_column("last seen (UTC)", no_wrap=True)
    for w in workers:
        table.add_row(
            printable(w.worker_id),
            w.status,
            printable(w.host),
            str(w.pid),
            "all" if w.queues is None else printable(", ".join(w.queues)),
            printable(", ".join(w.job_types)) or "none",
            str(w.concurrency),
            printable(w.dispatcher),
            printable(w.version),
            short_time(w.started_at),
            short_time(w.last_seen_at),
        )
    stdout().print(table)


def register(app: typer.Typer) -> None:
    """Add the ``tether workers`` group to ``app``."""
    app.add_typer(workers_app, name="workers")


__all__ = ["register", "workers_app", "workers_list"]
