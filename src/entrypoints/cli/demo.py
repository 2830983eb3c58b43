"""``tether demo``: the command that runs :mod:`tether.entrypoints.demo` and turns its verdict into an exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from tether.entrypoints.cli.errors import EXIT_INTERRUPTED
from tether.entrypoints.cli.output import stdout
from tether.entrypoints.cli.values import FlagNamingCommand, integer


def demo(
    path: Annotated[
        str | None, typer.Option("--path", help="Directory whose files become jobs. [default: this Python's standard library]")
    ] = None,
    pattern: Annotated[str, typer.Option("--pattern", help="Glob of the file names to take.")] = "*.py",
    database_url: Annotated[
        str | None, typer.Option("--database-url", help="Where the demo's jobs live. [default: sqlite file in --out]")
    ] = None,
    redis_url: Annotated[
        str | None, typer.Option("--redis-url", help="Dispatch through Redis Streams. [default: poll the database]")
    ] = None,
    redis_prefix: Annotated[str, typer.Option("--redis-prefix", help="Key prefix of the demo's Redis streams.")] = "tether",
    schema: Annotated[str | None, typer.Option("--schema", help="Database schema (PostgreSQL).")] = None,
    workers: Annotated[int, typer.Option("--workers", "-w", parser=integer(), metavar="N", help="Worker threads (1-256).")] = 4,
    out: Annotated[str, typer.Option("--out", help="Folder for the demo database and results.")] = "tether-demo",
    fresh: Annotated[bool, typer.Option("--fresh", help="Start from an empty demo database and results file.")] = False,
) -> None:
    """Hash every file under a real directory tree as jobs, with retries and dead letters, and report.

    Exit code 0 when every job ended as designed (completed, or dead exactly where the demo makes
    a permanent failure); 130 when interrupted (SIGINT/SIGTERM) before that; 1 otherwise.
    """
    from tether.entrypoints.demo import DemoOptions, run_demo

    options = DemoOptions.create(
        path=path,
        pattern=pattern,
        database_url=database_url,
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        schema=schema,
        workers=workers,
        out=out,
        fresh=fresh,
    )
    ok = run_demo(options, console=stdout(markup=True))
    if not ok:
        raise typer.Exit(EXIT_INTERRUPTED if _demo_was_interrupted(options.summary_path) else 1)


def _demo_was_interrupted(summary_path: Path) -> bool:
    """True when the demo's summary says it was stopped by SIGINT/SIGTERM before every job ended."""
    try:
        return bool(json.loads(summary_path.read_text(encoding="utf-8")).get("interrupted"))
    except (OSError, ValueError, AttributeError):
        return False


def register(app: typer.Typer) -> None:
    """Add ``tether demo`` to ``app``."""
    app.command(cls=FlagNamingCommand)(demo)


__all__ = ["demo", "register"]
