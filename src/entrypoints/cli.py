"""The ``tether`` command line (Typer + rich).

Commands: ``worker``, ``enqueue``, ``jobs list``, ``jobs show``, ``retry``, ``purge``, ``reap``,
``db init``, ``db upgrade``, ``db version``, ``demo``.  Each command that touches jobs takes
``--database-url``, ``--redis-url``, ``--redis-prefix``, ``--redis-cluster`` and ``--schema``
(environment: ``TETHER_DATABASE_URL``, ``TETHER_REDIS_URL``, ``TETHER_REDIS_PREFIX``,
``TETHER_REDIS_CLUSTER``, ``TETHER_SCHEMA``; a flag
beats its variable, a variable beats the default; see :mod:`tether.entrypoints.settings`).
``db`` commands take only ``--database-url`` and ``--schema``; ``worker`` takes its store from the
app it loads.

Errors: bad input (a :class:`~tether.domain.errors.TetherError` such as ValidationError,
ConfigurationError, JobNotFound or InvalidTransition, an unparsable ``--payload``, or a flag
Typer rejects) prints one line, ``tether: error: <label>: <problem>``, on stderr and exits with
code 2; nothing is written.  The label names the flag or argument the value came from
(``--older-than``, ``JOB_TYPE``; a setting with its flag and variable), see
:mod:`tether.entrypoints.cli_values`.  A server being unreachable (ServiceUnavailable: the store, or
Redis when the app required it) exits with 1.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from tether.domain.errors import ServiceUnavailable, TetherError, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.limits import int_digit_limit
from tether.domain.validation import prepare_job
from tether.domain.wording import with_article
from tether.entrypoints.cli_values import (
    FlagNamingCommand,
    choice,
    describe_usage_error,
    integer,
    number_of_seconds,
    option_label,
    seconds,
    switch,
)
from tether.entrypoints.settings import InvalidSetting, Settings, env_name, flag_name, sqlite_path
from typer.core import TyperGroup

if TYPE_CHECKING:
    from tether.entrypoints.service import Tether

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 1
EXIT_INTERRUPTED = 130


#: Line width when stdout is a pipe or file and COLUMNS is unset: wide enough that no column of
#: ``jobs list`` is cut (Rich would assume 80), so ``| grep`` and ``> file`` see whole values.
PIPE_WIDTH = 400


def _stdout() -> Console:
    """A console on the current stdout (made per call, so CliRunner's capture and COLUMNS apply)."""
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = PIPE_WIDTH
    return console


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """Print ``tether: error: message`` on one line of stderr and exit with ``code``."""
    text = " ".join(str(message).split())
    print(f"tether: error: {text}", file=sys.stderr)
    sys.exit(code)


class _OneLineErrors(TyperGroup):
    """The root command group: every error ends as one line on stderr and an exit code.

    Typer's default draws a box around usage errors; scripts and people both read a single
    ``tether: error: ...`` line better.  Exit codes: 0 done, 1 failed (store unavailable, demo
    not as designed), 2 bad input, 130 interrupted.
    """

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort:
            _fail("aborted", 1)
        except ServiceUnavailable as exc:  # the store, or a required Redis
            _fail(str(exc), EXIT_UNAVAILABLE)
        except TetherError as exc:
            _fail(str(exc))
        except typer.TyperException as exc:  # click's UsageError / BadParameter and friends
            if type(exc).__name__ == "NoArgsIsHelpError":  # `tether` or `tether jobs` alone: show the help
                print(exc.format_message())
                sys.exit(getattr(exc, "exit_code", EXIT_BAD_INPUT))
            _fail(describe_usage_error(exc), getattr(exc, "exit_code", EXIT_BAD_INPUT))
        code = result if isinstance(result, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    name="tether",
    cls=_OneLineErrors,
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


jobs_app = typer.Typer(help="Look at jobs.", no_args_is_help=True, rich_markup_mode=None)
db_app = typer.Typer(help="Create, upgrade and inspect the database tables.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(jobs_app, name="jobs")
app.add_typer(db_app, name="db")


# -- shared options ---------------------------------------------------------------------------
def _setting_option(setting: str, help: str, *short: str, parser: Any = None, metavar: str | None = None) -> Any:
    """The Typer option of the :class:`Settings` field ``setting``: its flag and ``TETHER_*``
    variable are the ones :func:`flag_name` and :func:`env_name` give (so help texts and error
    messages name the same), plus any ``short`` aliases such as ``-c``; ``parser`` turns the text
    into the setting's type (a :mod:`~tether.entrypoints.cli_values` parser)."""
    return typer.Option(flag_name(setting), *short, envvar=env_name(setting), help=help, parser=parser, metavar=metavar)


DatabaseUrl = Annotated[
    str | None,
    _setting_option(
        "database_url",
        "Where jobs live: memory://, sqlite:///path.db or postgresql+psycopg://user@host/db. [default: sqlite:///tether.db]",
    ),
]
RedisUrl = Annotated[
    str | None, _setting_option("redis_url", "Redis URL for Redis Streams dispatch. [default: none, poll the database]")
]
RedisPrefix = Annotated[
    str | None,
    _setting_option("redis_prefix", "Key prefix of the Redis streams; the same as the workers'. [default: tether]"),
]
RedisClusterSwitch = Annotated[
    bool | None,
    _setting_option(
        "redis_cluster",
        "The Redis URL names a node of a Redis Cluster (env: 1/0, true/false). [default: a standalone server]",
        parser=switch,
    ),
]
Schema = Annotated[str | None, _setting_option("schema", "Database schema holding Tether's tables (PostgreSQL).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
#: How the worker's duration settings parse (their ranges are the settings' to check).
_SECONDS: dict[str, Any] = {"parser": number_of_seconds, "metavar": "SECONDS"}


def _settings(**overrides: Any) -> Settings:
    """Settings from the given flags (already merged with their env vars by Typer), then the
    remaining ``TETHER_*`` variables, then defaults."""
    return Settings.load(overrides)


@contextmanager
def _open(settings: Settings, *, create: bool = False) -> Iterator[Tether]:
    """The app on the configured store.  Only ``enqueue`` creates missing tables (``create``);
    the other commands report them missing, so a mistyped URL is not mistaken for an empty store."""
    from tether.entrypoints.container import from_settings

    if not create:
        _require_sqlite_file(settings)
    tether_app = from_settings(settings, create=create)
    try:
        yield tether_app
    finally:
        tether_app.close()


def _require_sqlite_file(settings: Settings) -> None:
    """Raise InvalidSetting (``database_url``) when the settings name a SQLite file that does
    not exist; any other store passes."""
    if settings.database_kind != "sqlite":
        return
    from tether.adapters.sqlalchemy.sqlite import describe_sqlite_path

    path = sqlite_path(settings.database_url)
    if not os.path.exists(path):
        raise InvalidSetting(
            "database_url",
            f"no SQLite database at {describe_sqlite_path(path)}; check the URL, or create it with "
            f"`tether db init --database-url {settings.database_url}`",
        )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def job_to_dict(job: Job) -> dict[str, Any]:
    """A JSON-ready view of ``job`` (payload decoded, times ISO 8601 UTC, status as text)."""
    return {
        "id": job.id,
        "job_type": job.job_type,
        "queue": job.queue,
        "status": job.status.value,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "scheduled_at": _iso(job.scheduled_at),
        "created_at": _iso(job.created_at),
        "finished_at": _iso(job.finished_at),
        "idempotency_key": job.idempotency_key,
        "leased_by": job.leased_by,
        "lease_expires_at": _iso(job.lease_expires_at),
        "last_error": job.last_error,
        "payload": job.payload,
    }


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _short_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""


def parse_payload(text: str) -> Any:
    """The ``--payload`` text as JSON.  Raises ValidationError(``payload``) if it does not parse."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError("payload", f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError:  # an integer longer than Python's int-to-str digit limit
        raise ValidationError("payload", f"holds an integer of more than {int_digit_limit():,} digits") from None


def parse_run_at(text: str | None) -> datetime | None:
    """``--run-at`` as an aware datetime (ISO 8601 with an offset or ``Z``).

    Raises ValidationError(``run_at``): unparsable, or without a UTC offset.
    """
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValidationError("run_at", f"{text!r} is not an ISO 8601 date-time such as 2026-05-01T09:30:00Z") from None
    if value.tzinfo is None:
        raise ValidationError("run_at", f"{text!r} has no UTC offset; add one, e.g. {text}Z or {text}+02:00")
    return value


# -- commands ---------------------------------------------------------------------------------
@app.command(cls=FlagNamingCommand)
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
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
    as_json: AsJson = False,
) -> None:
    """Enqueue one job."""
    settings = _settings(database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema)
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
    )
    with _open(settings, create=True) as tether_app:
        result = tether_app.enqueue(
            job_type,
            value,
            queue=queue,
            priority=priority,
            run_at=when,
            delay=delay,
            max_attempts=max_attempts,
            idempotency_key=idempotency_key,
        )
    job = result.job
    if as_json:
        _print_json({"created": result.created, "job": job_to_dict(job)})
    elif result.created:
        _stdout().print(f"enqueued job {job.id} ({job.job_type} on queue {job.queue}, due {_short_time(job.scheduled_at)} UTC)")
    else:
        _stdout().print(
            f"job {job.id} already holds idempotency key {job.idempotency_key!r} ({job.status.value}); nothing enqueued"
        )


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

    settings = _settings(database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema)
    if queue is not None:
        validate_queue(queue)
    with _open(settings) as tether_app:
        jobs = tether_app.list(status=status, queue=queue, limit=limit, offset=offset)
        counts = tether_app.counts(queue=queue)
    if as_json:
        _print_json({"counts": {s.value: counts.get(s, 0) for s in JobStatus}, "jobs": [job_to_dict(j) for j in jobs]})
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
            job.job_type,
            job.queue,
            job.status.value,
            f"{job.attempts}/{job.max_attempts}",
            job.scheduled_at.strftime("%m-%d %H:%M:%S"),
            job.last_error or "",
        )
    _stdout().print(table)
    _stdout().print("  ".join(f"{s.value} {counts.get(s, 0)}" for s in JobStatus))


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
    """Show one job in full."""
    settings = _settings(database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema)
    with _open(settings) as tether_app:
        job = tether_app.get(job_id)
    data = job_to_dict(job)
    if as_json:
        _print_json(data)
        return
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in data.items():
        if key != "payload":
            table.add_row(key, "" if value is None else str(value))
    table.add_row("payload", json.dumps(data["payload"], indent=2, ensure_ascii=False))
    _stdout().print(table)


@app.command(cls=FlagNamingCommand)
def retry(
    job_id: Annotated[int, typer.Argument(parser=integer(), metavar="ID", help="The id of a dead job.")],
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
) -> None:
    """Put a dead job back in its queue (attempts start again from 0)."""
    settings = _settings(database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema)
    with _open(settings) as tether_app:
        job = tether_app.retry(job_id)
    _stdout().print(f"job {job.id} is {job.status.value} again on queue {job.queue}")


@app.command(cls=FlagNamingCommand)
def purge(
    older_than: Annotated[
        float,
        typer.Option(
            "--older-than", parser=seconds(), metavar="SECONDS",
            help="Delete completed and dead jobs that finished more than this many seconds ago.",
        ),
    ],
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
) -> None:
    """Delete finished (completed and dead) jobs; their idempotency keys become free again."""
    settings = _settings(database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema)
    with _open(settings) as tether_app:
        deleted = tether_app.purge(timedelta(seconds=older_than))
    _stdout().print(f"purged {deleted} finished job(s) older than {older_than:g} s")


@app.command(cls=FlagNamingCommand)
def reap(
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
) -> None:
    """Take back running jobs whose lease expired (workers do this on their own every reap interval)."""
    settings = _settings(database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema)
    with _open(settings) as tether_app:
        jobs = tether_app.reap()
    retrying = sum(1 for job in jobs if job.status is JobStatus.RETRYING)
    _stdout().print(f"reaped {len(jobs)} expired lease(s): {retrying} retrying, {len(jobs) - retrying} dead")


def _db_target(settings: Settings) -> str:
    """``--database-url URL [--schema S]`` (password hidden), for messages that say what to run."""
    return f"--database-url {settings.safe_database_url}" + (f" --schema {settings.schema}" if settings.schema else "")


def _schema_versions(repository: Any) -> tuple[int | None, int]:
    """(stored schema version or None when the tables are absent, this Tether's schema version)."""
    from tether.adapters.sqlalchemy import SCHEMA_VERSION

    return repository.schema_version(), SCHEMA_VERSION


def _revision(version: int | None) -> str | None:
    """The Alembic revision id of a schema version (``2`` -> ``"0002"``)."""
    from tether.adapters.sqlalchemy.migrations import revision_id

    return None if version is None else revision_id(version)


def _upgrade_tables(database_url: str | None, schema: str | None, verb: str) -> None:
    """``db init`` and ``db upgrade``: create the tables, or bring them to this Tether's version."""
    from tether.entrypoints.container import open_sql_repository

    settings = _settings(database_url=database_url, schema=schema)
    if settings.database_kind == "memory":
        _stdout().print(f"memory:// keeps nothing; there is no schema to {verb}")
        return
    repository: Any = open_sql_repository(settings.database_url, schema=settings.schema, create=False, check=False)
    try:
        before, current = _schema_versions(repository)
        repository.create_schema()  # refuses (ConfigurationError) a schema from a newer Tether
    finally:
        repository.close()
    where = settings.safe_database_url + (f" (schema {settings.schema})" if settings.schema else "")
    if before is None:
        _stdout().print(f"tables ready in {where}: created at schema version {current}")
    elif before < current:
        _stdout().print(f"tables ready in {where}: upgraded from schema version {before} to {current}")
    else:
        _stdout().print(f"tables ready in {where}: already at schema version {current}")


@db_app.command("init", cls=FlagNamingCommand)
def db_init(
    database_url: DatabaseUrl = None,
    schema: Schema = None,
) -> None:
    """Create Tether's tables (and schema) if they are missing, or upgrade them; safe to run again."""
    _upgrade_tables(database_url, schema, "create")


@db_app.command("upgrade", cls=FlagNamingCommand)
def db_upgrade(
    database_url: DatabaseUrl = None,
    schema: Schema = None,
    sql: Annotated[
        bool,
        typer.Option("--sql", help="Print the SQL of the upgrade for the URL's database kind instead of running it "
                                   "(connects to nothing)."),
    ] = False,
    from_version: Annotated[
        int | None,
        typer.Option("--from-version", parser=integer(), metavar="N",
                     help="With --sql: the schema version the database is at [default: none, an empty database]."),
    ] = None,
) -> None:
    """Bring Tether's tables to this Tether's schema version (creating them if missing).

    Runs the Alembic revisions shipped with Tether; the applied one is recorded in
    ``tether_alembic_version`` in the same schema.  One transaction on PostgreSQL (nothing
    half-written), safe to run from several processes at once; a schema written by a newer
    Tether is refused, never downgraded.
    """
    if sql:
        _print_upgrade_sql(database_url, schema, from_version)
        return
    if from_version is not None:
        raise ValidationError("from_version", "only with --sql")
    _upgrade_tables(database_url, schema, "upgrade")


def _print_upgrade_sql(database_url: str | None, schema: str | None, from_version: int | None) -> None:
    """``db upgrade --sql``: Alembic's offline mode for the URL's dialect; nothing is connected to."""
    from tether.adapters.sqlalchemy.migrations import upgrade_sql

    settings = _settings(database_url=database_url, schema=schema)
    if settings.database_kind == "memory":
        _stdout().print("memory:// keeps nothing; there is no schema to upgrade")
        return
    sys.stdout.write(upgrade_sql(settings.database_kind, settings.schema, from_version=from_version))


@db_app.command("version", cls=FlagNamingCommand)
def db_version(
    database_url: DatabaseUrl = None,
    schema: Schema = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 unless the stored schema is exactly this Tether's version.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Print the stored schema version, this Tether's version, and whether an upgrade is needed.

    Nothing is created or changed.  Status: ``current``, ``missing`` (run ``tether db init``),
    ``outdated`` (run ``tether db upgrade``) or ``newer`` (upgrade the tether-jobs package).
    """
    from tether import __version__
    from tether.entrypoints.container import open_sql_repository

    settings = _settings(database_url=database_url, schema=schema)
    if settings.database_kind == "memory":
        _stdout().print("memory:// keeps nothing; it has no schema version")
        return
    _require_sqlite_file(settings)
    repository: Any = open_sql_repository(settings.database_url, schema=settings.schema, create=False, check=False)
    try:
        stored, expected = _schema_versions(repository)
    finally:
        repository.close()
    target = _db_target(settings)
    if stored is None:
        status, advice = "missing", f"run `tether db init {target}`"
    elif stored < expected:
        status, advice = "outdated", f"run `tether db upgrade {target}`"
    elif stored > expected:
        status, advice = "newer", "this Tether is older than the schema; upgrade it (pip install -U tether-jobs)"
    else:
        status, advice = "current", "no upgrade needed"
    if as_json:
        _print_json(
            {
                "database_url": settings.safe_database_url,
                "schema": settings.schema,
                "stored_schema_version": stored,
                "stored_revision": _revision(stored),
                "schema_version": expected,
                "revision": _revision(expected),
                "tether_version": __version__,
                "status": status,
            }
        )
    else:
        out = _stdout()
        out.print(f"database:           {settings.safe_database_url}" + (f" (schema {settings.schema})" if settings.schema else ""))
        shown = "none (no Tether tables)" if stored is None else f"version {stored} (revision {_revision(stored)})"
        out.print(f"stored schema:      {shown}")
        out.print(f"this Tether:        {__version__} (schema version {expected}, revision {_revision(expected)})")
        out.print(f"status:             {status}: {advice}")
    if check and status != "current":
        raise typer.Exit(1)


def load_app(spec: str) -> Tether:
    """Import ``module:attribute`` (attribute defaults to ``app``) and return the Tether it names.

    The attribute may be a :class:`Tether` or a function returning one.  The current directory is
    put on ``sys.path`` first, as ``python -m`` would.  Whatever the module raises while it is
    imported (a SyntaxError in it, its own ``RuntimeError("config missing")``, a bad
    ``tether.connect`` URL) becomes one line; the traceback is logged at DEBUG on ``tether.cli``.

    Raises:
        ValidationError (field ``app``): the module or one of its imports is missing, the module
            raised while it was imported, the attribute is missing, calling it failed, or it is not
            a Tether (the CLI reports it under ``--app``, or ``TETHER_APP``).
        ServiceUnavailable: importing the module or calling the attribute found the app's store (or its required Redis)
            unreachable (``loading 'myproject.jobs:app' failed: ...``).
    """
    from tether.entrypoints.service import Tether

    module_name, _, attribute = spec.partition(":")
    attribute = attribute or "app"
    if not module_name:
        raise ValidationError("app", f"{spec!r} is not module:attribute, e.g. myproject.jobs:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValidationError("app", f"cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises is a bad --app
        raise _load_failure(f"importing {module_name!r}", f"loading {spec!r}", exc) from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValidationError("app", f"{module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not isinstance(target, Tether) and callable(target) and not isinstance(target, type):
        try:
            target = target()
        except Exception as exc:  # noqa: BLE001 - any failure of the user's factory is a bad --app
            raise _load_failure(f"calling {spec}()", f"calling {spec}()", exc) from None
    if not isinstance(target, Tether):
        raise ValidationError("app", f"{spec} is {with_article(type(target).__name__)}, not a tether.Tether")
    return target


def _load_failure(step: str, tether_step: str, exc: Exception) -> TetherError:
    """The one-line error for ``exc``, raised by the user's code at ``step`` of :func:`load_app`.

    A Tether error (``tether.connect`` refusing its URL) already says what was wrong, and is
    reported as ``<tether_step> failed: database_url: ...``; the store being unreachable stays a
    ServiceUnavailable (exit 1); anything else is ``<step> failed: RuntimeError: config missing``.
    The traceback goes to the ``tether.cli`` logger at DEBUG (``--log-level DEBUG``).
    """
    logging.getLogger("tether.cli").debug("%s failed", step, exc_info=(type(exc), exc, exc.__traceback__))
    if isinstance(exc, ServiceUnavailable):  # the store or a required Redis is down: exit 1
        return ServiceUnavailable(f"{tether_step} failed: {exc}")
    if isinstance(exc, TetherError):
        return ValidationError("app", f"{tether_step} failed: {exc}")
    return ValidationError("app", f"{step} failed: {type(exc).__name__}: {exc}")


@app.command(cls=FlagNamingCommand)
def worker(
    ctx: typer.Context,
    app_spec: Annotated[
        str,
        typer.Option(
            "--app",
            "-A",
            envvar="TETHER_APP",
            help="module:attribute of your Tether app (its handlers are what the worker runs), e.g. myproject.jobs:app.",
        ),
    ],
    concurrency: Annotated[
        int | None, _setting_option("concurrency", "Worker threads. [default: 4]", "-c", parser=integer(), metavar="N")
    ] = None,
    prefetch: Annotated[
        int | None,
        _setting_option(
            "prefetch", "Most jobs leased ahead of the free threads, while jobs are short. [default: concurrency]",
            parser=integer(), metavar="N",
        ),
    ] = None,
    queues: Annotated[
        list[str] | None,
        typer.Option(
            "--queue",
            "-q",
            help="Lease only from this queue (repeat for more). [env TETHER_QUEUES, comma-separated; default: all]",
        ),
    ] = None,
    lease_timeout: Annotated[
        float | None,
        _setting_option("lease_timeout", "Seconds a lease lasts without a heartbeat. [default: 900]", **_SECONDS),
    ] = None,
    heartbeat_interval: Annotated[
        float | None,
        _setting_option("heartbeat_interval", "Seconds between lease heartbeats. [default: lease timeout / 3]", **_SECONDS),
    ] = None,
    reap_interval: Annotated[
        float | None, _setting_option("reap_interval", "Seconds between reaper passes. [default: 30]", **_SECONDS)
    ] = None,
    drain_timeout: Annotated[
        float | None,
        _setting_option(
            "drain_timeout", "On SIGINT/SIGTERM, seconds to let running jobs finish before releasing them. [default: 30]",
            **_SECONDS,
        ),
    ] = None,
    log_level: Annotated[
        str | None, _setting_option("log_level", "DEBUG, INFO, WARNING or ERROR. [default: INFO]")
    ] = None,
    worker_id: Annotated[
        str | None, typer.Option("--worker-id", help="Name of this worker in leases. [default: host-pid-random]")
    ] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit once no job is queued, retrying or running in the worker's queues.")
    ] = False,
) -> None:
    """Run a worker pool for your app's handlers until SIGINT/SIGTERM.

    The app is your own module's Tether object, on which the handlers are registered; it also
    decides where jobs live (e.g. tether.connect(os.environ["TETHER_DATABASE_URL"])).
    """
    settings = _settings(
        concurrency=concurrency,
        prefetch=prefetch,
        queues=tuple(queues) if queues else None,
        lease_timeout=lease_timeout,
        heartbeat_interval=heartbeat_interval,
        reap_interval=reap_interval,
        drain_timeout=drain_timeout,
        log_level=log_level,
    )
    _configure_logging(settings.log_level)
    try:
        tether_app = load_app(app_spec)
    except ServiceUnavailable as exc:  # exit 1 as ever, but say that loading the app met it
        raise ServiceUnavailable(f"{_label_of(ctx, 'app_spec')}: {exc}") from None
    try:
        pool = tether_app.worker(
            concurrency=settings.concurrency,
            prefetch=settings.prefetch,
            queues=list(settings.queues) if settings.queues else None,
            lease_timeout=settings.lease_timeout,
            heartbeat_interval=settings.heartbeat_interval,
            reap_interval=settings.reap_interval,
            drain_timeout=settings.drain_timeout,
            worker_id=worker_id,
        )
        logging.getLogger("tether.cli").info(
            "worker %s: %d thread(s), queues %s; store %r, dispatch %r (both chosen by the app %s)",
            pool.worker_id,
            settings.concurrency,
            ", ".join(settings.queues or ["(all)"]),
            tether_app.repository,
            tether_app.dispatcher,
            app_spec,
        )
        pool.run(stop_when_idle=until_idle)
        # The pool has stopped (gracefully); a second SIGINT/SIGTERM now, while the connections
        # close, would kill the process and turn a clean stop into a death by signal.
        with _signals_noted_while("closing connections"):
            tether_app.close()
    finally:
        tether_app.close()  # idempotent; closes on the error paths


@contextmanager
def _signals_noted_while(doing: str) -> Iterator[None]:
    """SIGINT and SIGTERM only logged during the block (main thread only; handlers restored after)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def note(signum: int, frame: Any) -> None:
        logging.getLogger("tether.cli").info("%s received while %s after a clean stop; finishing", signal.Signals(signum).name, doing)

    previous = {signum: signal.signal(signum, note) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _label_of(ctx: typer.Context, parameter: str) -> str:
    """How errors name ``parameter`` of the command of ``ctx``: its flag, or its variable when the
    value came from the environment (``--app`` or ``TETHER_APP``)."""
    param = next(p for p in ctx.command.params if p.name == parameter)
    return option_label(param, ctx)


def _configure_logging(level: str) -> None:
    """Worker logs on stderr: rich on a terminal, one plain line per record otherwise."""
    handler: logging.Handler
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)


@app.command(cls=FlagNamingCommand)
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
    ok = run_demo(options, console=_stdout())
    if not ok:
        raise typer.Exit(EXIT_INTERRUPTED if _demo_was_interrupted(options.summary_path) else 1)


def _demo_was_interrupted(summary_path: Path) -> bool:
    """True when the demo's summary says it was stopped by SIGINT/SIGTERM before every job ended."""
    try:
        return bool(json.loads(summary_path.read_text(encoding="utf-8")).get("interrupted"))
    except (OSError, ValueError, AttributeError):
        return False


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


if __name__ == "__main__":  # pragma: no cover
    main()
