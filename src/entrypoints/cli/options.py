"""The options the ``tether`` commands share, the settings they make, and the app they open.

Each command that touches jobs takes ``--database-url``, ``--redis-url``, ``--redis-prefix``,
``--redis-cluster`` and ``--schema`` (environment: ``TETHER_DATABASE_URL``, ``TETHER_REDIS_URL``,
``TETHER_REDIS_PREFIX``, ``TETHER_REDIS_CLUSTER``, ``TETHER_SCHEMA``; a flag beats its variable,
a variable beats the default; see :mod:`tether.entrypoints.settings`).  ``db`` commands take only
``--database-url`` and ``--schema``; ``worker`` takes its store from the app it loads.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from tether.entrypoints.cli.output import printable
from tether.entrypoints.cli.values import number_of_seconds, switch
from tether.entrypoints.settings import InvalidSetting, Settings, env_name, flag_name, sqlite_path

if TYPE_CHECKING:
    from tether.entrypoints.service import Tether


def setting_option(setting: str, help: str, *short: str, parser: Any = None, metavar: str | None = None) -> Any:
    """The Typer option of the :class:`Settings` field ``setting``: its flag and ``TETHER_*``
    variable are the ones :func:`flag_name` and :func:`env_name` give (so help texts and error
    messages name the same), plus any ``short`` aliases such as ``-c``; ``parser`` turns the text
    into the setting's type (a :mod:`~tether.entrypoints.cli.values` parser)."""
    return typer.Option(flag_name(setting), *short, envvar=env_name(setting), help=help, parser=parser, metavar=metavar)


DatabaseUrl = Annotated[
    str | None,
    setting_option(
        "database_url",
        "Where jobs live: memory://, sqlite:///path.db or postgresql+psycopg://user@host/db. [default: sqlite:///tether.db]",
    ),
]
RedisUrl = Annotated[
    str | None, setting_option("redis_url", "Redis URL for Redis Streams dispatch. [default: none, poll the database]")
]
RedisPrefix = Annotated[
    str | None,
    setting_option("redis_prefix", "Key prefix of the Redis streams; the same as the workers'. [default: tether]"),
]
RedisClusterSwitch = Annotated[
    bool | None,
    setting_option(
        "redis_cluster",
        "The Redis URL names a node of a Redis Cluster (env: 1/0, true/false). [default: a standalone server]",
        parser=switch,
    ),
]
Schema = Annotated[str | None, setting_option("schema", "Database schema holding Tether's tables (PostgreSQL).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
#: How the worker's duration settings parse (their ranges are the settings' to check).
SECONDS: dict[str, Any] = {"parser": number_of_seconds, "metavar": "SECONDS"}


def load_settings(**overrides: Any) -> Settings:
    """Settings from the given flags (already merged with their env vars by Typer), then the
    remaining ``TETHER_*`` variables, then defaults.

    Raises:
        InvalidSetting: a value is out of range or malformed (named with its flag and variable).
    """
    return Settings.load(overrides)


#: What a command that only reads does while Redis does not answer (``without_redis`` of :func:`open_app`).
READS_ALONE = "this command reads the database alone"
#: ... and one that writes but announces no job to the workers.
CHANGES_ALONE = "this command changes the database alone"
#: The logger of the Redis Streams dispatcher, and the attribute of its record of a Redis
#: unreachable at start (:data:`tether.adapters.redis_streams.health.UNREACHABLE_AT_START`).
REDIS_LOGGER = "tether.dispatch.redis"
UNREACHABLE_AT_START = "tether_redis_unreachable_at_start"


class RedisStartNote(logging.Filter):
    """On the dispatcher's logger while a command runs: keeps the record of a Redis unreachable at
    start (whose words are about workers) off stderr, and every later record of that logger,
    since the command's one warning line already said Redis does not answer."""

    def __init__(self) -> None:
        super().__init__()
        self.unreachable: tuple[str, str, str] | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        found = getattr(record, UNREACHABLE_AT_START, None)
        if found is not None and self.unreachable is None:
            self.unreachable = found
        return self.unreachable is None


@contextmanager
def open_app(
    settings: Settings, *, create: bool = False, without_redis: str = READS_ALONE, long_running: bool = False
) -> Iterator[Tether]:
    """The app on the configured store, closed when the block ends.  Only ``enqueue`` creates
    missing tables (``create``); the other commands report them missing, so a mistyped URL is not
    mistaken for an empty store.

    A Redis URL that does not answer (the app does not require it) is one line on stderr once the
    app is open, ``tether: warning: Redis at <url> unreachable (<error>); <without_redis>``:
    what this command does without Redis (:data:`READS_ALONE` by default).  The dispatcher's own
    records of Redis are then held back while the block runs (a one-shot command's retries would
    only repeat the line), unless ``long_running`` (the dashboard): then only the start's record is,
    and what Redis does later (answering again, failing anew) is logged as usual.

    Raises:
        InvalidSetting: without ``create``, the settings name a SQLite file that does not exist.
        ServiceUnavailable: the store (or a required Redis) does not answer.
    """
    from tether.entrypoints.container import from_settings

    if not create:
        require_sqlite_file(settings)
    note = RedisStartNote()
    logger = logging.getLogger(REDIS_LOGGER)
    logger.addFilter(note)
    try:
        tether_app = from_settings(settings, create=create)
        if note.unreachable is not None:
            what, url, error = note.unreachable
            print(printable(f"tether: warning: {what} at {url} unreachable ({' '.join(error.split())}); {without_redis}"), file=sys.stderr)
        if long_running:
            logger.removeFilter(note)
        try:
            yield tether_app
        finally:
            tether_app.close()
    finally:
        logger.removeFilter(note)


def require_sqlite_file(settings: Settings) -> None:
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


__all__ = [
    "CHANGES_ALONE",
    "READS_ALONE",
    "SECONDS",
    "AsJson",
    "DatabaseUrl",
    "RedisClusterSwitch",
    "RedisPrefix",
    "RedisStartNote",
    "RedisUrl",
    "Schema",
    "load_settings",
    "open_app",
    "require_sqlite_file",
    "setting_option",
]
