"""The ``tether`` command line (Typer + rich): the root app, ``main``, and the command groups it registers.

Commands: ``worker``, ``enqueue``, ``jobs list``, ``jobs show``, ``jobs why``, ``jobs cancel``, ``retry``,
``purge``, ``reap``, ``db init``, ``db upgrade``, ``db version``, ``workers list``, ``schedules list``, ``dashboard``, ``demo``.  The store options they share, and the
``TETHER_*`` variables behind them, are in :mod:`~tether.entrypoints.cli.options`; how a command
fails (one line on stderr, exit 2 for bad input, 1 for an unreachable server, 130 when
interrupted) is in :mod:`~tether.entrypoints.cli.errors`; the label a bad value is reported under
(``--older-than``, ``JOB_TYPE``, a setting with its flag and variable) is in
:mod:`~tether.entrypoints.cli.values`.

The package, one module per command group:

- ``options``: the shared store options, the settings they make, the app they open;
- ``errors``: exit codes and the root group that turns every error into one line;
- ``output``: the stdout console, JSON and times, ``job_to_dict``;
- ``values``: parsers of option values and the labels of their errors;
- ``enqueue``, ``jobs`` (list, show, why; cancel from ``cancel``), ``maintenance`` (retry, purge,
  reap), ``db`` (init, upgrade, version), ``workers`` (list), ``schedules`` (list), ``queues``
  (list, pause, resume, limit), ``worker``, ``dashboard``, ``demo``: the commands.

Adding a command group: write ``cli/<group>.py`` holding its commands (take the store options
from ``options``, print through ``output``, raise a :class:`~tether.domain.errors.TetherError`
for bad input) and a ``register(app: typer.Typer) -> None`` that adds them to the root app,
either ``app.command(cls=FlagNamingCommand)(command)`` for a top-level command or
``app.add_typer(group_app, name="<group>")`` for a group of subcommands; then add the module to
:data:`COMMAND_GROUPS` below, one line.  ``tether --help`` lists the top-level commands in the
order registered, then the groups in the order registered.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Annotated

import typer
from tether.entrypoints.cli import dashboard, db, demo, enqueue, jobs, maintenance, queues, schedules, worker, workers
from tether.entrypoints.cli.enqueue import parse_payload, parse_run_at
from tether.entrypoints.cli.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_UNAVAILABLE, OneLineErrors
from tether.entrypoints.cli.output import PIPE_WIDTH, job_to_dict
from tether.entrypoints.cli.worker import load_app

app = typer.Typer(
    name="tether",
    cls=OneLineErrors,
    help=(
        "Tether: a durable background-job queue. Accepted jobs are never lost; "
        "a worker that lost its lease can never change a job."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _show_version(value: bool) -> None:
    if value:
        from tether import __version__

        print(f"tether {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Tether: a durable background-job queue."""


#: The modules of the command groups, each with ``register(app)``; their commands appear in
#: ``tether --help`` in this order (top-level commands first, then groups).
COMMAND_GROUPS = (
    enqueue,
    jobs,
    maintenance,
    db,
    workers,
    schedules,
    queues,
    worker,
    dashboard,
    demo,
)
for _group in COMMAND_GROUPS:
    _group.register(app)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (``tether``).

    Once the command has ended (its exit code decided), SIGINT and SIGTERM are ignored while the
    interpreter shuts down (a few tenths of a second with the drivers loaded): a signal sent to a
    worker that already stopped cleanly must not turn exit 0 into a death by signal."""
    import signal

    command = typer.main.get_command(app)
    try:
        command.main(args=list(argv) if argv is not None else None, prog_name="tether")
    finally:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_IGN)


__all__ = [
    "COMMAND_GROUPS",
    "EXIT_BAD_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_UNAVAILABLE",
    "PIPE_WIDTH",
    "app",
    "job_to_dict",
    "load_app",
    "main",
    "parse_payload",
    "parse_run_at",
]
