"""Settings of a Tether process: where the jobs live, how work is dispatched, how a worker runs.

Precedence, highest first: command-line flags, then ``TETHER_*`` environment variables, then the
defaults below.  The CLI gets flags-over-environment from Typer (each flag names its variable with
``envvar=``); :meth:`Settings.load` applies the same rule for programs that build settings
themselves.  Every value is checked when a :class:`Settings` is made, so a bad value fails at
start with :class:`InvalidSetting` naming the setting, its flag and its variable, before anything
is opened or written.

====================  =========================  ======================  =====================
setting               flag                       environment variable    default
====================  =========================  ======================  =====================
database_url          ``--database-url``         TETHER_DATABASE_URL     ``sqlite:///tether.db``
redis_url             ``--redis-url``            TETHER_REDIS_URL        none (polling)
redis_prefix          ``--redis-prefix``         TETHER_REDIS_PREFIX     ``tether``
redis_cluster         ``--redis-cluster``        TETHER_REDIS_CLUSTER    off (a standalone server)
schema                ``--schema``               TETHER_SCHEMA           none (search path: public)
concurrency           ``--concurrency``          TETHER_CONCURRENCY      4 threads
async_concurrency     ``--async-concurrency``    TETHER_ASYNC_CONC...    100 async handlers
prefetch              ``--prefetch``             TETHER_PREFETCH         concurrency (jobs)
queues                ``--queue`` (repeatable)   TETHER_QUEUES (comma)   all queues
poll_interval         ``--poll-interval``        TETHER_POLL_INTERVAL    1.0 s
listen                (``connect(listen=)``)     TETHER_LISTEN           off (poll only)
lease_timeout         ``--lease-timeout``        TETHER_LEASE_TIMEOUT    60 s
heartbeat_interval    ``--heartbeat-interval``   TETHER_HEARTBEAT_...    lease_timeout / 6
reap_interval         ``--reap-interval``        TETHER_REAP_INTERVAL    15 s
drain_timeout         ``--drain-timeout``        TETHER_DRAIN_TIMEOUT    30 s
job_timeout           ``--job-timeout``          TETHER_JOB_TIMEOUT      none (no limit)
max_payload_bytes     ``--max-payload-bytes``    TETHER_MAX_PAYLOAD_...  65,536 bytes
log_level             ``--log-level``            TETHER_LOG_LEVEL        INFO
log_format            ``--log-format``           TETHER_LOG_FORMAT       ``text``
log_jobs              ``--log-jobs``             TETHER_LOG_JOBS         off
metrics_port          ``--metrics-port``         TETHER_METRICS_PORT     none (no metrics)
====================  =========================  ======================  =====================
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import attrs
from tether.domain.errors import ConfigurationError, ValidationError, shown
from tether.domain.payload import DEFAULT_MAX_PAYLOAD_BYTES
from tether.domain.redaction import redact_url
from tether.domain.validation import validate_queue, validate_seconds

DEFAULT_DATABASE_URL = "sqlite:///tether.db"
MEMORY_URL = "memory://"
ENV_PREFIX = "TETHER_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: How ``tether worker`` writes its log: a line of text, or one JSON object per line.
LOG_FORMATS = ("text", "json")
#: A PostgreSQL schema name Tether will quote into DDL: an unquoted identifier, at most 63 bytes.
SCHEMA_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
MAX_CONCURRENCY = 1024
#: Most ``async def`` handlers one worker runs at once on its event loop.
MAX_ASYNC_CONCURRENCY = 100_000
MAX_PAYLOAD_LIMIT = 64 * 1024 * 1024
#: Smallest ``max_payload_bytes``: two bytes, the empty object ``{}`` (as :class:`tether.Tether` requires).
MIN_PAYLOAD_LIMIT = 2
#: How long a lease lasts without a heartbeat by default, in seconds: a job whose worker died
#: (SIGKILL, a lost machine) is taken back by the reaper at most this plus ``DEFAULT_REAP_INTERVAL``
#: after the worker's last heartbeat (75 s), while live jobs keep theirs through heartbeats.
DEFAULT_LEASE_TIMEOUT = 60.0
#: The default heartbeat interval is the lease timeout divided by this (10 s for the default
#: lease): five beats in a row may fail (or be held up by a handler holding the GIL) before a
#: live job's lease runs out.
HEARTBEATS_PER_LEASE = 6
#: Seconds between reaper passes by default.
DEFAULT_REAP_INTERVAL = 15.0


class InvalidSetting(ConfigurationError):
    """A setting has an unusable value; nothing was opened or written.

    Attributes:
        setting: the setting's name (``"concurrency"``).
        problem: what was wrong, in words.
        label: what the message starts with: by default the setting with its flag and environment
            variable (:func:`setting_label`); the bare argument name (``"database_url"``) when the
            value was an argument of ``tether.connect``, which reads no flag and no variable.
    """

    def __init__(self, setting: str, problem: str, *, label: str | None = None) -> None:
        self.label = setting_label(setting) if label is None else label
        super().__init__(f"{self.label}: {problem}")
        self.setting = setting
        self.problem = problem

    def as_argument(self) -> InvalidSetting:
        """The same error about the argument of the same name (``database_url: unsupported URL ...``)."""
        return InvalidSetting(self.setting, self.problem, label=self.setting)


#: Settings with no command-line flag (set them in ``tether.connect(...)`` or the environment).
NO_FLAG = frozenset({"poll_interval", "listen"})


def unset_if_blank(value: Any) -> Any:
    """The one rule for a text setting that is set but empty: ``""`` (or only blanks) counts as
    unset, None.  It holds for every ``TETHER_*`` variable (:meth:`Settings.load`, so the CLI and
    :func:`tether.connect_from_env <tether.entrypoints.container.connect_from_env>`; Typer reads
    the flags' variables the same way) and for ``tether.connect``'s ``redis_url`` and ``schema``.
    Any other value is returned as it is."""
    if isinstance(value, str) and not value.strip():
        return None
    return value


def setting_label(setting: str) -> str:
    """How messages name a setting: ``"concurrency (--concurrency, TETHER_CONCURRENCY)"``
    (``"poll_interval (TETHER_POLL_INTERVAL)"`` for one without a flag)."""
    where = env_name(setting) if setting in NO_FLAG else f"{flag_name(setting)}, {env_name(setting)}"
    return f"{setting} ({where})"


def env_name(setting: str) -> str:
    """``"poll_interval"`` -> ``"TETHER_POLL_INTERVAL"``."""
    return ENV_PREFIX + setting.upper()


def flag_name(setting: str) -> str:
    """``"poll_interval"`` -> ``"--poll-interval"`` (``queues`` -> ``--queue``, given once per queue)."""
    return "--queue" if setting == "queues" else "--" + setting.replace("_", "-")


def database_kind(url: str) -> str:
    """Which repository a database URL selects: ``"memory"``, ``"sqlite"`` or ``"postgresql"``.

    Accepted: ``memory://``; ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``
    (``sqlite+pysqlite`` too); ``postgresql://``, ``postgresql+psycopg://``.

    Raises:
        InvalidSetting: any other scheme, or a SQLite URL not of the two forms above (such as
            ``sqlite://relative.db``, whose ``relative.db`` is read as a host); the message shows
            the URL with its password hidden and the form to use.
    """
    if not isinstance(url, str) or not url:
        raise InvalidSetting("database_url", f"must be a URL such as {shown(DEFAULT_DATABASE_URL)}, got {shown(url, 300)}")
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if url == MEMORY_URL or scheme == "memory":
        return "memory"
    before_colon = url.split(":", 1)[0].lower()
    if before_colon in ("sqlite", "sqlite+pysqlite"):
        if url.rstrip("/").lower() in ("sqlite:", "sqlite+pysqlite:") or ":memory:" in url:
            raise InvalidSetting(
                "database_url",
                f"{shown(url, 300)} names no database file; use sqlite:///path/to/file.db (or memory:// for a throwaway store)",
            )
        _check_sqlite_url(url, before_colon)
        return "sqlite"
    if scheme in ("postgresql", "postgresql+psycopg", "postgres"):
        check_url_parts(url, "database_url")
        return "postgresql"
    raise InvalidSetting(
        "database_url",
        f"unsupported URL {shown(redact_url(url), 300)}; use memory://, sqlite:///path/to/file.db or postgresql+psycopg://user@host/db",
    )


def _check_sqlite_url(url: str, scheme: str) -> None:
    """Refuse a SQLite URL whose file is not after ``sqlite:///``: ``sqlite://relative.db`` (the
    file name lands where the host goes, and SQLite takes none) or ``sqlite:relative.db``."""
    if url[len(scheme) :].startswith(":///"):
        return
    safe = redact_url(url)
    rest = safe[len(scheme) :]
    path = rest.lstrip(":").lstrip("/").split("?", 1)[0]
    if rest.startswith("://"):
        host = rest[3:].split("?", 1)[0].split("/", 1)[0]
        wrong = f"has two slashes, so {shown(host, 300)} is read as a host name, and SQLite takes none"
    else:
        wrong = "is not a SQLite URL"
    raise InvalidSetting(
        "database_url",
        f"{shown(safe, 300)} {wrong}; write {scheme}:///{path} for a path relative to the current directory, "
        f"or {scheme}:////absolute/path/{os.path.basename(path) or 'file.db'} for an absolute one",
    )


def sqlite_path(url: str) -> str:
    """The file path of a ``sqlite:///relative`` or ``sqlite:////absolute`` URL (query left out)."""
    rest = url.split("://", 1)[1].split("?", 1)[0]
    return rest.removeprefix("/")


def check_redis_url(url: str | None) -> str | None:
    """None (polling), or a ``redis://``, ``rediss://`` or ``unix://`` URL.

    Raises:
        InvalidSetting: any other value (password hidden in the message).
    """
    if url is None:
        return None
    if not isinstance(url, str) or url.split("://", 1)[0].lower() not in ("redis", "rediss", "unix") or "://" not in url:
        safe = redact_url(url) if isinstance(url, str) else url
        raise InvalidSetting("redis_url", f"must be a redis://, rediss:// or unix:// URL, got {shown(safe, 300)}")
    check_url_parts(url, "redis_url")
    return url


def check_url_parts(url: str, setting: str) -> None:
    """Refuse a URL whose host or port cannot be read (``host:notaport``, an unclosed ``[::1``),
    naming ``setting``, with its passwords hidden.

    Raises:
        InvalidSetting: what was wrong, in the parser's words.
    """
    try:
        urlsplit(url).port  # noqa: B018 - reading the port is the check
    except ValueError as error:
        raise InvalidSetting(setting, f"{shown(redact_url(url), 300)} is not a valid URL ({error})") from None


# -- attrs validators, each naming its setting ----------------------------------------------------
def _database_url(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    database_kind(value)


def _redis_url(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    check_redis_url(value)


def _schema(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if value is not None and (not isinstance(value, str) or not SCHEMA_PATTERN.fullmatch(value)):
        raise InvalidSetting("schema", f"must be 1-63 of letters, digits and '_', not starting with a digit, got {shown(value)}")


def _int_between(low: int, high: int) -> Any:
    def check(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidSetting(attribute.name, f"must be an integer, got {shown(value)}")
        if not low <= value <= high:
            got = f"{value:,}" if value.bit_length() <= 133 else shown(value)
            raise InvalidSetting(attribute.name, f"must be an integer from {low:,} to {high:,}, got {got}")

    return check


def _seconds(*, allow_zero: bool = False, optional: bool = False) -> Any:
    def check(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
        if value is None and optional:
            return
        if isinstance(value, timedelta) or value is None:  # validate_seconds takes these; a setting does not
            raise InvalidSetting(attribute.name, f"must be a finite number of seconds, got {shown(value)}")
        try:
            validate_seconds(value, attribute.name, allow_zero=allow_zero)
        except ValidationError as error:
            raise InvalidSetting(attribute.name, error.problem) from None

    return check


def _redis_prefix(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    try:
        validate_queue(value, "redis_prefix")
    except ValidationError as error:
        raise InvalidSetting("redis_prefix", error.problem.replace("queue name", "key prefix")) from None


def _redis_cluster(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if not isinstance(value, bool):
        raise InvalidSetting("redis_cluster", f"must be true or false, got {shown(value)}")


def _listen(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if not isinstance(value, bool):
        raise InvalidSetting("listen", f"must be true or false, got {value!r}")


def _queues(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if value is None:
        return
    if not isinstance(value, tuple) or not value:
        raise InvalidSetting("queues", f"must name at least one queue, got {shown(value)}")
    for queue in value:
        try:
            validate_queue(queue, "queues")
        except ValidationError as exc:
            raise InvalidSetting("queues", exc.problem) from None


def _log_level(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if value not in LOG_LEVELS:
        raise InvalidSetting("log_level", f"must be one of {', '.join(LOG_LEVELS)}, got {shown(value)}")


def _log_format(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if value not in LOG_FORMATS:
        raise InvalidSetting("log_format", f"must be one of {', '.join(LOG_FORMATS)}, got {value!r}")


def _log_jobs(instance: object, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if not isinstance(value, bool):
        raise InvalidSetting("log_jobs", f"must be true or false, got {value!r}")


def _to_lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _to_queues(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    return tuple(value) if value else None


def _to_level(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


@attrs.frozen
class Settings:
    """Validated settings of one Tether process (see the module docstring for flags and variables).

    Attributes:
        database_url: ``memory://``, ``sqlite:///path.db`` or ``postgresql+psycopg://user@host/db``.
        redis_url: ``redis://host:6379/0`` to dispatch through Redis Streams; None polls the database.
        redis_prefix: the Redis key prefix (and hash tag) of the streams; producers and workers
            of one application must use the same one.
        redis_cluster: :attr:`redis_url` names a node of a Redis Cluster (the dispatcher then talks
            to the master owning the prefix's hash slot); needs :attr:`redis_url`.
        schema: database schema (PostgreSQL) holding Tether's tables; None for the adapter's default.
        concurrency: worker threads (1-1024).
        async_concurrency: ``async def`` handlers a worker runs at once on its event loop
            (1-100,000), beside the threads.
        prefetch: most jobs a worker leases ahead of its free threads (0-1024; None: as many as
            ``concurrency``), only while handlers are short (see :class:`tether.WorkerPool`).
        queues: the queues a worker leases from; None for all.
        poll_interval: longest idle wait between polls, in seconds (> 0).
        listen: on PostgreSQL without Redis, wake idle workers through ``LISTEN``/``NOTIFY``
            (enqueues, retries, snoozes and releases notify in their own transaction; polling
            stays on as the safety net).  Needs a PostgreSQL ``database_url`` and no ``redis_url``.
        lease_timeout: how long a lease lasts without a heartbeat, in seconds (> 0).
        heartbeat_interval: seconds between lease heartbeats (< lease_timeout); None for lease_timeout / 6.
        reap_interval: seconds between reaper passes (> 0).
        drain_timeout: seconds a stopping worker waits for running jobs before releasing them (>= 0).
        job_timeout: seconds a handler registered without its own ``timeout`` may run (> 0);
            None for no limit (see :mod:`tether.entrypoints.worker.timeouts`).
        max_payload_bytes: largest encoded payload accepted, in bytes.
        log_level: DEBUG, INFO, WARNING, ERROR or CRITICAL.
        log_format: ``text`` (one line of text per record) or ``json`` (one JSON object per line,
            with the job fields of :mod:`tether.entrypoints.job_logs`).
        log_jobs: a worker logs one INFO line as each job starts and one as its outcome is recorded.
        metrics_port: the TCP port (1-65535) a worker exports Prometheus metrics on; None: none.

    Raises:
        InvalidSetting: on the first bad value, naming the setting, its flag and its variable.
    """

    database_url: str = attrs.field(default=DEFAULT_DATABASE_URL, validator=_database_url)
    redis_url: str | None = attrs.field(default=None, validator=_redis_url)
    redis_prefix: str = attrs.field(default="tether", validator=_redis_prefix)
    redis_cluster: bool = attrs.field(default=False, validator=_redis_cluster)
    schema: str | None = attrs.field(default=None, validator=_schema)
    concurrency: int = attrs.field(default=4, validator=_int_between(1, MAX_CONCURRENCY))
    async_concurrency: int = attrs.field(default=100, validator=_int_between(1, MAX_ASYNC_CONCURRENCY))
    prefetch: int | None = attrs.field(default=None, validator=attrs.validators.optional(_int_between(0, MAX_CONCURRENCY)))
    queues: tuple[str, ...] | None = attrs.field(default=None, converter=_to_queues, validator=_queues)
    poll_interval: float = attrs.field(default=1.0, validator=_seconds())
    listen: bool = attrs.field(default=False, validator=_listen)
    lease_timeout: float = attrs.field(default=DEFAULT_LEASE_TIMEOUT, validator=_seconds())
    heartbeat_interval: float | None = attrs.field(default=None, validator=_seconds(optional=True))
    reap_interval: float = attrs.field(default=DEFAULT_REAP_INTERVAL, validator=_seconds())
    drain_timeout: float = attrs.field(default=30.0, validator=_seconds(allow_zero=True))
    job_timeout: float | None = attrs.field(default=None, validator=_seconds(optional=True))
    max_payload_bytes: int = attrs.field(default=DEFAULT_MAX_PAYLOAD_BYTES, validator=_int_between(MIN_PAYLOAD_LIMIT, MAX_PAYLOAD_LIMIT))
    log_level: str = attrs.field(default="INFO", converter=_to_level, validator=_log_level)
    log_format: str = attrs.field(default="text", converter=_to_lower, validator=_log_format)
    log_jobs: bool = attrs.field(default=False, validator=_log_jobs)
    metrics_port: int | None = attrs.field(default=None, validator=attrs.validators.optional(_int_between(1, 65535)))

    def __attrs_post_init__(self) -> None:
        if self.schema is not None and database_kind(self.database_url) == "sqlite":
            raise InvalidSetting("schema", "SQLite has no schemas; leave it unset for sqlite:// URLs")
        if self.redis_cluster and self.redis_url is None:
            raise InvalidSetting("redis_cluster", "is on, but no redis_url names a node of the cluster")
        if self.listen and self.redis_url is not None:
            raise InvalidSetting("listen", "is on, but redis_url is set: Redis Streams already wakes workers; use one of them")
        if self.listen and database_kind(self.database_url) != "postgresql":
            raise InvalidSetting("listen", "needs a PostgreSQL database_url (LISTEN/NOTIFY is PostgreSQL's)")
        if self.heartbeat_interval is not None and self.heartbeat_interval >= self.lease_timeout:
            raise InvalidSetting(
                "heartbeat_interval",
                f"must be shorter than lease_timeout ({self.lease_timeout} s), got {self.heartbeat_interval} s",
            )

    @property
    def database_kind(self) -> str:
        """``"memory"``, ``"sqlite"`` or ``"postgresql"`` (see :func:`database_kind`)."""
        return database_kind(self.database_url)

    @property
    def dispatcher_kind(self) -> str:
        """``"redis"`` when :attr:`redis_url` is set, ``"listen"`` when :attr:`listen` is on, else ``"polling"``."""
        if self.redis_url is not None:
            return "redis"
        return "listen" if self.listen else "polling"

    @property
    def safe_database_url(self) -> str:
        """:attr:`database_url` with its password hidden."""
        return redact_url(self.database_url)

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``overrides`` (flags; None values are ignored), then ``TETHER_*``
        variables of ``environ`` (default ``os.environ``; empty values are ignored), then defaults.

        Environment values are text: numbers are parsed, ``TETHER_QUEUES`` is comma-separated,
        switches (``TETHER_REDIS_CLUSTER``) take 1/0, true/false, yes/no or on/off.

        Raises:
            InvalidSetting: an unknown override name, or a value that does not parse or validate.
        """
        environ = os.environ if environ is None else environ
        names = [field.name for field in attrs.fields(cls)]
        values: dict[str, Any] = {}
        for name in names:
            raw = unset_if_blank(environ.get(env_name(name)))
            if raw is not None:
                values[name] = _parse_env(cls, name, raw.strip())
        for name, value in (overrides or {}).items():
            if name not in names:
                raise ConfigurationError(f"{name}: not a setting (known: {', '.join(names)})")
            if value is not None:
                values[name] = value
        return cls(**values)


#: The words a switch (``TETHER_REDIS_CLUSTER``) takes, for messages.
SWITCH_WORDS = "1/0, true/false, yes/no or on/off"


def parse_switch(text: str) -> bool:
    """``"1"``, ``"true"``, ``"yes"``, ``"on"`` -> True; ``"0"``, ``"false"``, ``"no"``, ``"off"`` -> False
    (any case, surrounding blanks ignored).

    Raises:
        ValueError: any other text.
    """
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{shown(text)} is not a switch")


def _parse_env(cls: type[Settings], name: str, raw: str) -> Any:
    field = attrs.fields_dict(cls)[name]
    kind = str(field.type)
    if kind == "bool":
        try:
            return parse_switch(raw)
        except ValueError:
            raise InvalidSetting(name, f"{env_name(name)}={shown(raw)} is not a switch (use {SWITCH_WORDS})") from None
    try:
        if kind in ("int", "int | None"):
            return int(raw.replace("_", ""))
        if kind in ("float", "float | None"):
            return float(raw)
    except ValueError:
        raise InvalidSetting(name, f"{env_name(name)}={shown(raw)} is not a number") from None
    return raw
