"""The composition root: the one place that picks concrete adapters and wires a :class:`Tether`.

:class:`Container` (dependency-injector providers, one set per container) builds:

- ``clock`` -- the time source of every stored time and comparison: on PostgreSQL a
  :class:`~tether.adapters.sqlalchemy.clock.DatabaseClock` (the server's clock, read locally
  through a measured offset, so all workers and producers agree on "now" whatever their
  machines' clocks say); on SQLite and ``memory://`` the :class:`~tether.adapters.clock.SystemClock`
  (one machine, one clock).  A clock passed in (e.g. a FakeClock in tests) always wins;
- ``repository`` -- chosen by the database URL: ``memory://`` ->
  :class:`~tether.adapters.memory.InMemoryJobRepository`; ``sqlite:///...`` and
  ``postgresql+psycopg://...`` -> :func:`tether.adapters.sqlalchemy.open_repository`;
- ``dispatcher`` -- ``redis_url`` set -> :class:`~tether.adapters.redis_streams.RedisStreamsDispatcher`;
  else ``listen`` on (PostgreSQL) -> :class:`~tether.adapters.pg_notify.ListeningDispatcher` (polling,
  woken through ``LISTEN``; the repository's writes ``NOTIFY``); else
  :class:`~tether.adapters.polling.PollingDispatcher`;
- ``app`` -- the :class:`~tether.entrypoints.service.Tether` over those three.

Each provider is a singleton per container, so one container holds one repository (one connection
pool) however often it is asked.  Adapters are imported only when selected, so a program on
``memory://`` never imports SQLAlchemy or redis-py.

:func:`connect` (exported as ``tether.connect``) is the short way for application code;
:func:`connect_from_env` (``tether.connect_from_env``) reads the ``TETHER_*`` variables as the CLI
does; :func:`from_settings` builds from a validated :class:`~tether.entrypoints.settings.Settings`
(the CLI).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dependency_injector import providers
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.domain.errors import ConfigurationError, ValidationError
from tether.domain.payload import DEFAULT_MAX_PAYLOAD_BYTES
from tether.domain.retry import RetryPolicy
from tether.domain.validation import validate_int
from tether.entrypoints.settings import (
    InvalidSetting,
    Settings,
    check_redis_url,
    database_kind,
    redact_url,
    unset_if_blank,
)
from tether.ports.async_access import AsyncAccess
from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

if TYPE_CHECKING:
    from tether.entrypoints.service import Tether


def repository_kind(database_url: str) -> str:
    """``"memory"`` for ``memory://``, ``"sql"`` for SQLite and PostgreSQL URLs.

    Raises:
        InvalidSetting: an unsupported scheme (the message hides the password).
    """
    return "memory" if database_kind(database_url) == "memory" else "sql"


def clock_kind(database_url: str) -> str:
    """``"database"`` for PostgreSQL URLs (the server's clock is the one time source), else
    ``"system"`` (memory and SQLite live on one machine, whose clock every user shares)."""
    return "database" if database_kind(database_url) == "postgresql" else "system"


def database_clock(repository: JobRepository) -> Clock:
    """A :class:`~tether.adapters.sqlalchemy.clock.DatabaseClock` on the server of
    ``repository``'s engine, with its own short connections (never one of the repository's
    pool); measured once now, then every 30 s."""
    from tether.adapters.sqlalchemy.clock import DatabaseClock

    engine = getattr(repository, "engine", None)
    if engine is None:
        raise ConfigurationError(f"clock: {type(repository).__name__} has no SQL engine to read the database's clock from")
    return DatabaseClock.from_url(engine.url)


def dispatcher_kind(redis_url: str | None, listen: bool = False) -> str:
    """``"redis"`` when a Redis URL is given, else ``"listen"`` when ``listen`` is on, else ``"polling"``."""
    if check_redis_url(redis_url) is not None:
        return "redis"
    return "listen" if listen else "polling"


def open_sql_repository(
    database_url: str,
    *,
    schema: str | None = None,
    pool_size: int | None = None,
    create: bool = True,
    check: bool = True,
) -> JobRepository:
    """Open the SQLite or PostgreSQL repository at ``database_url``: its tables are created or
    upgraded if ``create``; else, if ``check``, they must exist at the current schema version.

    Raises:
        ConfigurationError / StorageUnavailable: as raised by the adapter (URL shown without password).
    """
    from tether.adapters.sqlalchemy import open_repository

    return open_repository(database_url, schema=schema, create=create, pool_size=pool_size, check=check)


def polling_dispatcher(repository: JobRepository, clock: Clock, *, poll_interval: float = 1.0) -> Dispatcher:
    """A :class:`~tether.adapters.polling.PollingDispatcher` over ``repository``."""
    from tether.adapters.polling import PollingDispatcher

    return PollingDispatcher(repository, clock, poll_interval=poll_interval)


def listening_dispatcher(repository: JobRepository, clock: Clock, *, poll_interval: float = 1.0) -> Dispatcher:
    """A :class:`~tether.adapters.pg_notify.ListeningDispatcher`: polling every ``poll_interval``
    seconds at most, woken through ``LISTEN`` on a psycopg connection of its own to the repository's
    database; turns on the repository's ``NOTIFY`` (``enable_wakeups``).

    Raises:
        ConfigurationError: ``repository`` is not the PostgreSQL one.
    """
    from tether.adapters.pg_notify import ListeningDispatcher
    from tether.adapters.polling import PollingDispatcher

    enable = getattr(repository, "enable_wakeups", None)
    engine = getattr(repository, "engine", None)
    if enable is None or engine is None:
        raise ConfigurationError(f"listen: {type(repository).__name__} cannot NOTIFY; LISTEN/NOTIFY needs PostgreSQL")
    channel = enable()
    args, params = engine.dialect.create_connect_args(engine.url)
    # A bounded connect, and a dead network noticed within about 30 s (the listener's SELECT 1
    # every 15 s would otherwise wait for TCP's own retransmission timeout, minutes).
    params = {**params, "autocommit": True, "application_name": "tether-listen", "connect_timeout": 10,
              "keepalives": 1, "keepalives_idle": 15, "keepalives_interval": 5, "keepalives_count": 3,
              "tcp_user_timeout": 30_000}

    def connect() -> Any:
        import psycopg

        return psycopg.connect(*args, **params)

    polling = PollingDispatcher(repository, clock, poll_interval=poll_interval)
    return ListeningDispatcher(polling, clock, connect, channel)


def redis_dispatcher(
    repository: JobRepository, clock: Clock, redis_url: str, options: dict[str, Any] | None = None
) -> Dispatcher:
    """A :class:`~tether.adapters.redis_streams.RedisStreamsDispatcher` on ``redis_url``;
    ``options`` are its keyword arguments (``prefix``, ``group``, ``block``, ...)."""
    from tether.adapters.redis_streams import RedisStreamsDispatcher

    return RedisStreamsDispatcher(repository, clock, redis_url, **(options or {}))


def async_access_for(repository: JobRepository) -> AsyncAccess:
    """How the async API reaches ``repository``: native async connections per event loop on
    PostgreSQL (:class:`~tether.adapters.sqlalchemy.pg_async.PgAsyncAccess`); on SQLite a worker
    thread, with the caller's ``AsyncConnection``/``AsyncSession`` joined; elsewhere a worker thread."""
    from tether.adapters.sqlalchemy import SqlAlchemyJobRepository
    from tether.adapters.sqlalchemy.async_access import SqlAlchemyAsyncAccess
    from tether.adapters.sqlalchemy.pg_async import PgAsyncAccess
    from tether.adapters.sqlalchemy.postgres import PostgresJobRepository
    from tether.ports.async_access import ThreadedAsyncAccess

    if isinstance(repository, PostgresJobRepository):
        return PgAsyncAccess(repository)
    if isinstance(repository, SqlAlchemyJobRepository):
        return SqlAlchemyAsyncAccess(repository)
    return ThreadedAsyncAccess(repository)


def make_tether(repository: JobRepository, dispatcher: Dispatcher, clock: Clock, **options: Any) -> Tether:
    """The :class:`~tether.entrypoints.service.Tether` application over the three ports (and the
    async access that suits the repository, :func:`async_access_for`)."""
    from tether.entrypoints.service import Tether

    options.setdefault("async_access", async_access_for(repository))
    return Tether(repository, dispatcher, clock, **options)


class Container:
    """Providers of the clock, repository, dispatcher and app for one Tether process.

    Configuration keys (``container.config.from_dict(...)``): ``database_url``, ``redis_url``,
    ``schema``, ``pool_size``, ``create``, ``poll_interval``, ``listen`` (PostgreSQL LISTEN/NOTIFY), ``redis`` (dict of extra
    RedisStreamsDispatcher options) and ``app`` (dict of extra Tether options such as
    ``max_payload_bytes``, ``default_queue``, ``default_max_attempts``).

    Each instance builds its own dependency-injector providers, so its singletons are its own (one
    repository, one connection pool per container).  A plain class rather than a
    ``DeclarativeContainer``: importing ``dependency_injector.containers`` imports its wiring
    module, which imports FastAPI, Flask and Starlette whenever they are installed (about 0.2 s
    of every process start, the CLI's included), and nothing here is wired.
    """

    def __init__(self) -> None:
        config = self.config = providers.Configuration()
        self.retry_policy = providers.Singleton(RetryPolicy)
        repository = self.repository = providers.Selector(
            providers.Callable(repository_kind, config.database_url),
            memory=providers.Singleton(InMemoryJobRepository),
            sql=providers.Singleton(
                open_sql_repository,
                config.database_url,
                schema=config.schema,
                pool_size=config.pool_size,
                create=config.create,
            ),
        )
        clock = self.clock = providers.Selector(
            providers.Callable(clock_kind, config.database_url),
            system=providers.Singleton(SystemClock),
            database=providers.Singleton(database_clock, repository),
        )
        dispatcher = self.dispatcher = providers.Selector(
            providers.Callable(dispatcher_kind, config.redis_url, config.listen),
            polling=providers.Singleton(polling_dispatcher, repository, clock, poll_interval=config.poll_interval),
            listen=providers.Singleton(listening_dispatcher, repository, clock, poll_interval=config.poll_interval),
            redis=providers.Singleton(redis_dispatcher, repository, clock, config.redis_url, config.redis),
        )
        self.app = providers.Singleton(make_tether, repository, dispatcher, clock, retry_policy=self.retry_policy)


_APP_OPTIONS = ("max_payload_bytes", "default_queue", "default_max_attempts")
def _check_redis_options(options: dict[str, Any]) -> None:
    """Raise ConfigurationError naming any key of ``redis_options`` that is not a keyword of
    :class:`~tether.adapters.redis_streams.RedisStreamsDispatcher` (a typo would otherwise be a
    bare TypeError when the dispatcher is built)."""
    import inspect

    from tether.adapters.redis_streams import RedisStreamsDispatcher

    if not isinstance(options, Mapping):
        raise ConfigurationError(
            f"redis_options: must be a dict of RedisStreamsDispatcher keywords, got {type(options).__name__}"
        )
    known = [name for name, p in inspect.signature(RedisStreamsDispatcher).parameters.items()
             if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(str(key) for key in options if key not in known)
    if unknown:
        raise ConfigurationError(
            f"redis_options: unknown option(s) {', '.join(map(repr, unknown))} (known: {', '.join(known)})"
        )


_CONNECT_OPTIONS = ("clock", "retry_policy", "poll_interval", "listen", "pool_size", "create", "redis_options") + _APP_OPTIONS


#: The largest ``pool_size`` accepted (connections per repository; PostgreSQL's own default
#: ``max_connections`` is 100).
MAX_POOL_SIZE = 1000


def build_container(
    *,
    database_url: str,
    redis_url: str | None = None,
    schema: str | None = None,
    poll_interval: float = 1.0,
    listen: bool = False,
    pool_size: int | None = None,
    create: bool = True,
    clock: Clock | None = None,
    retry_policy: RetryPolicy | None = None,
    redis_options: dict[str, Any] | None = None,
    app_options: dict[str, Any] | None = None,
) -> Container:
    """A configured :class:`Container`; nothing is opened until a provider is called.

    Raises:
        InvalidSetting: a bad URL, named as the argument (``database_url: ...``), checked here
            before anything is opened.
    """
    try:
        database_kind(database_url)
        check_redis_url(redis_url)
    except InvalidSetting as error:
        raise error.as_argument() from None
    if pool_size is not None:
        try:
            validate_int(pool_size, "pool_size", 1, MAX_POOL_SIZE)
        except ValidationError as error:
            raise InvalidSetting("pool_size", error.problem, label="pool_size") from None
    if redis_options is not None:
        _check_redis_options(redis_options)
    container = Container()
    container.config.from_dict(
        {
            "database_url": database_url,
            "redis_url": redis_url,
            "schema": schema,
            "pool_size": pool_size,
            "create": create,
            "poll_interval": poll_interval,
            "listen": listen,
            "redis": dict(redis_options or {}),
        }
    )
    if clock is not None:
        container.clock.override(providers.Object(clock))
    if retry_policy is not None:
        if not isinstance(retry_policy, RetryPolicy):
            raise ConfigurationError(f"retry_policy: must be a tether.RetryPolicy, got {type(retry_policy).__name__}")
        container.retry_policy.override(providers.Object(retry_policy))
    if app_options:
        container.app.add_kwargs(**app_options)
    return container


def from_settings(settings: Settings, **options: Any) -> Tether:
    """The :class:`Tether` app described by ``settings`` (database, Redis URL, prefix and cluster
    switch, schema, poll interval, payload limit); ``options`` as for :func:`connect` (``clock``, ``retry_policy``, ...)."""
    options.setdefault("poll_interval", settings.poll_interval)
    options.setdefault("listen", settings.listen)
    options.setdefault("max_payload_bytes", settings.max_payload_bytes)
    if settings.redis_url is not None:
        options["redis_options"] = {
            "prefix": settings.redis_prefix,
            "cluster": settings.redis_cluster,
            **(options.get("redis_options") or {}),
        }
    return connect(settings.database_url, redis_url=settings.redis_url, schema=settings.schema, **options)


def connect(
    database_url: str = "memory://", *, redis_url: str | None = None, schema: str | None = None, **options: Any
) -> Tether:
    """Open a :class:`Tether` application on ``database_url`` (``tether.connect``).

    Args:
        database_url: ``memory://`` (in-process, nothing persisted), ``sqlite:///path/to/file.db``
            or ``postgresql+psycopg://user@host/db``.
        redis_url: ``redis://host:6379/0`` to wake workers through Redis Streams; None to poll.
            For a Redis Cluster, a node's URL plus ``redis_options={"cluster": True}``.
        schema: database schema for Tether's tables (PostgreSQL).
            ``redis_url`` and ``schema`` given as empty (or blank) text count as not given, as an
            empty ``TETHER_*`` variable does (:func:`~tether.entrypoints.settings.unset_if_blank`).
        options: ``clock`` (a Clock, e.g. FakeClock; default: the database server's clock on
            PostgreSQL, the system clock otherwise), ``retry_policy`` (RetryPolicy),
            ``poll_interval`` (seconds), ``listen`` (True: on PostgreSQL without Redis, wake idle
            workers through LISTEN/NOTIFY, polling kept as the safety net; producers and workers
            must both set it), ``pool_size`` (connections), ``create`` (create the
            tables if missing; default True), ``redis_options`` (dict of RedisStreamsDispatcher
            keywords), ``max_payload_bytes``, ``default_queue``, ``default_max_attempts``.

    Returns:
        A ready :class:`Tether`; call ``close()`` when done, or use it as a context manager.

    Raises:
        InvalidSetting: a bad ``database_url``, ``redis_url``, ``schema``, ``poll_interval``,
            ``listen`` (on with a store other than PostgreSQL, or with ``redis_url``),
            ``pool_size`` (an int from 1 to 1,000; the memory store ignores it) or
            ``max_payload_bytes``, named as the argument (``database_url: unsupported URL
            'mysql://x' ...``; passwords hidden); ConfigurationError: an unknown option;
            what the adapter raises when the database cannot be opened.
    """
    unknown = sorted(set(options) - set(_CONNECT_OPTIONS))
    if unknown:
        raise ConfigurationError(f"{unknown[0]}: not an option of tether.connect (known: {', '.join(_CONNECT_OPTIONS)})")
    try:
        settings = Settings(
            database_url=database_url,
            redis_url=unset_if_blank(redis_url),
            schema=unset_if_blank(schema),
            poll_interval=options.pop("poll_interval", 1.0),
            listen=options.pop("listen", False),
            max_payload_bytes=options.get("max_payload_bytes", DEFAULT_MAX_PAYLOAD_BYTES),
        )
    except InvalidSetting as error:  # name the argument the caller passed, not a flag or variable
        raise error.as_argument() from None
    app_options = {name: options.pop(name) for name in _APP_OPTIONS if name in options}
    container = build_container(
        database_url=settings.database_url,
        redis_url=settings.redis_url,
        schema=settings.schema,
        poll_interval=settings.poll_interval,
        listen=settings.listen,
        app_options=app_options,
        **options,
    )
    repository = container.repository()
    try:
        return container.app()
    except BaseException:
        # The dispatcher (e.g. an unreachable Redis with require_connection) or the app refused
        # to start: do not leave the repository's connections open behind the error.
        repository.close()
        raise


def connect_from_env(*, environ: Mapping[str, str] | None = None, **options: Any) -> Tether:
    """Open the :class:`Tether` application the ``TETHER_*`` variables describe, read exactly as
    the ``tether`` command reads them (``tether.connect_from_env``): ``TETHER_DATABASE_URL``
    (default ``sqlite:///tether.db``), ``TETHER_REDIS_URL``, ``TETHER_REDIS_PREFIX``,
    ``TETHER_REDIS_CLUSTER``, ``TETHER_SCHEMA``, ``TETHER_POLL_INTERVAL``, ``TETHER_LISTEN`` and
    ``TETHER_MAX_PAYLOAD_BYTES``; a variable set but empty counts as unset.  So a module that
    builds its app this way and the CLI always agree on the store and the streams.

    Args:
        environ: where the variables are read (default ``os.environ``).
        options: as for :func:`connect` (``clock``, ``retry_policy``, ``pool_size``, ...); an
            option given here wins over its variable.

    Raises:
        InvalidSetting: a variable with a bad value (every ``TETHER_*`` setting is checked, the
            worker's too), named with its flag and variable; what :func:`connect` raises.
    """
    return from_settings(Settings.load(environ=environ), **options)


__all__ = [
    "Container",
    "build_container",
    "clock_kind",
    "connect",
    "connect_from_env",
    "database_clock",
    "database_kind",
    "dispatcher_kind",
    "from_settings",
    "listening_dispatcher",
    "redact_url",
    "repository_kind",
]
