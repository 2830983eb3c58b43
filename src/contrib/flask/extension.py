"""``TetherExtension``: one Tether app per Flask app, built from ``app.config``, and ``flask tether worker``.

Configuration keys (``app.config``):

- ``TETHER_DATABASE_URL``: the job store; default: the engine URL of Flask-SQLAlchemy when the app
  has it (so ``connection=db.session`` joins the same database), else ``sqlite:///tether.db``.
- ``TETHER_SCHEMA``: PostgreSQL schema of Tether's tables (default None).
- ``TETHER_REDIS_URL``: wake workers through Redis Streams (default None: polling).
- ``TETHER_CREATE_SCHEMA``: create or upgrade Tether's tables when the app is first built (default True).
- ``TETHER_OPTIONS``: more keywords of ``tether.connect`` (dict; ``poll_interval``, ``pool_size``, ...).
- ``TETHER_WORKER``: keywords of ``Tether.worker`` for ``flask tether worker`` (dict; ``concurrency``, ``queues``, ...).

The Tether app is built by :meth:`TetherExtension.init_app` (so its tables exist before any
request holds a transaction; call ``init_app`` after Flask-SQLAlchemy's), reached through
:attr:`TetherExtension.app` inside an application context or :meth:`TetherExtension.app_for`,
and closed with :meth:`TetherExtension.close` (the next use builds it again).
Handlers registered through :meth:`TetherExtension.handler` run inside the Flask app's
application context, so ``current_app`` and Flask-SQLAlchemy's ``db.session`` work in them.
Raises ``tether.ConfigurationError`` naming the key for a value of the wrong shape.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import click
from flask import Flask, current_app
from flask.cli import AppGroup, with_appcontext
from tether.domain.errors import ConfigurationError, TetherError
from tether.entrypoints.container import connect
from tether.entrypoints.handlers import takes_context
from tether.entrypoints.service import Tether

_EXTENSION_KEY = "tether"
DEFAULT_DATABASE_URL = "sqlite:///tether.db"


class _State:
    """What the extension keeps per Flask app: its config and, once built, its Tether app."""

    def __init__(self, flask_app: Flask) -> None:
        self.flask_app = flask_app
        self.tether: Tether | None = None
        self.lock = threading.Lock()


class TetherExtension:
    """Tether in a Flask application (``TetherExtension(app)`` or ``ext.init_app(app)`` in a factory)."""

    def __init__(self, app: Flask | None = None) -> None:
        self._registrations: list[tuple[str, Callable[..., Any], dict[str, Any]]] = []
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Register the extension on ``app`` and its ``flask tether`` commands, and build its
        Tether app (creating the tables when ``TETHER_CREATE_SCHEMA``).  Raises ConfigurationError
        naming a configuration key whose value has the wrong shape; what ``tether.connect`` raises."""
        for key in ("TETHER_OPTIONS", "TETHER_WORKER"):
            value = app.config.setdefault(key, {})
            if not isinstance(value, dict):
                raise ConfigurationError(f"{key}: must be a dict, got {type(value).__name__}")
        app.config.setdefault("TETHER_CREATE_SCHEMA", True)
        app.extensions[_EXTENSION_KEY] = _State(app)
        app.cli.add_command(_cli_group(self))
        self.app_for(app)

    # -- handlers --------------------------------------------------------------------------------
    def handler(self, name: str, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """``@ext.handler("emails.send", queue=..., max_attempts=...)``: register the decorated
        function on every Tether app this extension builds (options as :meth:`tether.Tether.handler`);
        it runs inside the Flask app's application context.  The function is returned unchanged."""

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            takes_context(func)  # a bad signature is refused now, naming ``handler``
            self._registrations.append((name, func, options))
            return func

        return decorate

    def _register_all(self, tether: Tether, flask_app: Flask) -> None:
        for name, func, options in self._registrations:
            tether.register(name, _in_app_context(flask_app, func), **options)

    # -- the Tether app --------------------------------------------------------------------------
    def app_for(self, flask_app: Flask) -> Tether:
        """The Tether app of ``flask_app`` (built on first use).  Raises ConfigurationError when
        :meth:`init_app` was not called on it; what ``tether.connect`` raises."""
        state: _State | None = flask_app.extensions.get(_EXTENSION_KEY)
        if state is None:
            raise ConfigurationError("TetherExtension.init_app(app) was not called on this Flask app")
        with state.lock:
            if state.tether is None:
                config = flask_app.config
                with flask_app.app_context():
                    url = config.get("TETHER_DATABASE_URL") or _flask_sqlalchemy_url(flask_app) or DEFAULT_DATABASE_URL
                options = {"create": bool(config["TETHER_CREATE_SCHEMA"]), **config["TETHER_OPTIONS"]}
                tether = connect(url, redis_url=config.get("TETHER_REDIS_URL"), schema=config.get("TETHER_SCHEMA"), **options)
                self._register_all(tether, flask_app)
                state.tether = tether
            return state.tether

    @property
    def app(self) -> Tether:
        """The Tether app of the current Flask app (inside an application or request context)."""
        return self.app_for(current_app._get_current_object())  # type: ignore[attr-defined]

    def enqueue(self, job_type: str, payload: Any = None, **options: Any) -> Any:
        """``self.app.enqueue(...)``: same arguments, result and errors as :meth:`tether.Tether.enqueue`
        (``connection=db.session`` joins Flask-SQLAlchemy's transaction)."""
        return self.app.enqueue(job_type, payload, **options)

    def close(self, flask_app: Flask) -> None:
        """Close ``flask_app``'s Tether app (stops its worker pools); the next use builds a new one."""
        state: _State | None = flask_app.extensions.get(_EXTENSION_KEY)
        if state is None:
            return
        with state.lock:
            tether, state.tether = state.tether, None
        if tether is not None:
            tether.close()


def _flask_sqlalchemy_url(flask_app: Flask) -> str | None:
    """The URL of Flask-SQLAlchemy's default engine on ``flask_app`` (None without it)."""
    db = flask_app.extensions.get("sqlalchemy")
    if db is None:
        return None
    return str(db.engine.url.render_as_string(hide_password=False))


def _in_app_context(flask_app: Flask, func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` as a ``(payload, ctx)`` handler that runs inside ``flask_app``'s application context."""
    wants_context = takes_context(func)

    def run(payload: Any, ctx: Any) -> Any:
        with flask_app.app_context():
            return func(payload, ctx) if wants_context else func(payload)

    run.__name__ = getattr(func, "__name__", "handler")
    run.__qualname__ = getattr(func, "__qualname__", run.__name__)
    run.__module__ = getattr(func, "__module__", __name__)
    return run


def _cli_group(extension: TetherExtension) -> click.Group:
    group = AppGroup("tether", help="Tether background jobs.")

    @group.command("worker")
    @click.option("--concurrency", type=int, default=None, help="Handler threads (default: TETHER_WORKER or 4).")
    @click.option("--queue", "queues", multiple=True, help="A queue to serve (repeatable; default: all).")
    @click.option("--drain-timeout", type=float, default=None, help="Seconds running jobs get to finish at shutdown.")
    @click.option("--stop-when-idle", is_flag=True, help="Exit once no job this worker can run is left.")
    @with_appcontext
    def worker(concurrency: int | None, queues: tuple[str, ...], drain_timeout: float | None, stop_when_idle: bool) -> None:
        """Run a worker pool for this app's handlers (stop with Ctrl-C or SIGTERM)."""
        flask_app = current_app._get_current_object()  # type: ignore[attr-defined]
        options = dict(flask_app.config["TETHER_WORKER"])
        given = {"concurrency": concurrency, "queues": list(queues) or None, "drain_timeout": drain_timeout}
        options.update({k: v for k, v in given.items() if v is not None})
        try:
            pool = extension.app_for(flask_app).worker(**options)
        except TypeError as error:
            raise click.UsageError(f"TETHER_WORKER: {error}") from None
        except TetherError as error:
            raise click.UsageError(str(error)) from None
        click.echo(f"tether worker {pool.worker_id}: started")
        stats = pool.run(stop_when_idle=stop_when_idle)
        click.echo(f"tether worker {pool.worker_id}: stopped ({stats})")

    return group


__all__ = ["DEFAULT_DATABASE_URL", "TetherExtension"]
