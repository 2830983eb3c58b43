"""The ``TETHER`` settings of a Django project and the one :class:`~tether.Tether` app they describe.

Every key is optional::

    TETHER = {
        "DATABASE": "default",        # Django database alias whose connection jobs are enqueued on
                                      # (inside its atomic() blocks); None: Tether's own transactions
        "DATABASE_URL": None,         # default: the URL of DATABASES[DATABASE] (SQLite file or PostgreSQL)
        "SCHEMA": None,               # PostgreSQL schema of Tether's tables
        "REDIS_URL": None,            # wake workers through Redis Streams; None: polling
        "OPTIONS": {},                # more keywords of tether.connect (poll_interval, pool_size, ...)
        "WORKER": {},                 # keywords of app.worker() for manage.py tether_worker (concurrency, queues, ...)
    }

:func:`get_app` builds the app on first use (``tether.connect`` with ``create=False``: the
tables come from the ``tether`` migration) and keeps it; changing ``TETHER`` or ``DATABASES``
(``override_settings`` in tests) closes it and the next call builds a new one.

Raises ``django.core.exceptions.ImproperlyConfigured`` naming the key for an unknown key, a
database alias that does not exist, a database Tether cannot use (an in-memory SQLite database,
another engine), or a ``WORKER``/``OPTIONS`` value of the wrong shape.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import connections
from sqlalchemy.engine import URL
from tether.entrypoints.container import connect
from tether.entrypoints.service import Tether

DEFAULTS: dict[str, Any] = {
    "DATABASE": "default",
    "DATABASE_URL": None,
    "SCHEMA": None,
    "REDIS_URL": None,
    "OPTIONS": {},
    "WORKER": {},
}

_lock = threading.Lock()
_app: Tether | None = None


def tether_settings() -> dict[str, Any]:
    """``settings.TETHER`` over :data:`DEFAULTS`.  Raises ImproperlyConfigured for an unknown key
    or a value of the wrong shape."""
    given = getattr(settings, "TETHER", None) or {}
    if not isinstance(given, dict):
        raise ImproperlyConfigured(f"TETHER must be a dict, got {type(given).__name__}")
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ImproperlyConfigured(f"TETHER[{unknown[0]!r}]: unknown key (known: {', '.join(DEFAULTS)})")
    merged = {**DEFAULTS, **given}
    for key in ("OPTIONS", "WORKER"):
        if not isinstance(merged[key], dict):
            raise ImproperlyConfigured(f"TETHER[{key!r}] must be a dict, got {type(merged[key]).__name__}")
    alias = merged["DATABASE"]
    if alias is not None and alias not in settings.DATABASES:
        raise ImproperlyConfigured(f"TETHER['DATABASE']: {alias!r} is not a key of DATABASES")
    if alias is None and not merged["DATABASE_URL"]:
        raise ImproperlyConfigured("TETHER['DATABASE_URL'] is needed when TETHER['DATABASE'] is None")
    return merged


def database_url(alias: str) -> str:
    """The SQLAlchemy URL of Django's database ``alias`` (its current settings, so a test database
    Django created is the one used).  Raises ImproperlyConfigured for a database Tether cannot use."""
    params = connections[alias].settings_dict
    engine = params["ENGINE"]
    if engine.endswith("sqlite3"):
        name = str(params["NAME"] or "")
        if not name or name == ":memory:" or name.startswith("file:"):
            raise ImproperlyConfigured(
                f"TETHER['DATABASE']: DATABASES[{alias!r}] is an in-memory SQLite database, which no second "
                "connection can share; use a database file (or TEST NAME of a file) or set TETHER['DATABASE_URL']"
            )
        return f"sqlite:///{os.path.abspath(name)}"
    if "postgresql" in engine:
        return URL.create(
            "postgresql+psycopg",
            username=params.get("USER") or None,
            password=params.get("PASSWORD") or None,
            host=params.get("HOST") or None,
            port=int(params["PORT"]) if params.get("PORT") else None,
            database=params.get("NAME") or None,
        ).render_as_string(hide_password=False)
    raise ImproperlyConfigured(
        f"TETHER['DATABASE']: DATABASES[{alias!r}] uses {engine}; Tether stores jobs on SQLite or PostgreSQL "
        "(set TETHER['DATABASE_URL'] and TETHER['DATABASE'] = None to keep jobs elsewhere)"
    )


def get_app() -> Tether:
    """The project's Tether app (built on first use from :func:`tether_settings`), with the
    handler that runs Django tasks registered."""
    global _app
    with _lock:
        if _app is None:
            config = tether_settings()
            url = config["DATABASE_URL"] or database_url(config["DATABASE"])
            options = {"create": False, **config["OPTIONS"]}
            app = connect(url, redis_url=config["REDIS_URL"], schema=config["SCHEMA"], **options)
            from tether.contrib.django.runner import register_task_runner

            register_task_runner(app)
            _app = app
        return _app


def create_schema() -> None:
    """Create or upgrade Tether's tables on the configured database (Tether's own Alembic
    revisions, as ``tether db upgrade``); run by the ``tether`` migration."""
    config = tether_settings()
    url = config["DATABASE_URL"] or database_url(config["DATABASE"])
    with connect(url, schema=config["SCHEMA"], create=True):
        pass


def reset_app() -> None:
    """Close the app :func:`get_app` built (if any); the next call builds a new one."""
    global _app
    with _lock:
        app, _app = _app, None
    if app is not None:
        app.close()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("TETHER", "DATABASES"):
        reset_app()


def connect_signals() -> None:
    """Rebuild the app when ``TETHER`` or ``DATABASES`` change (called by the app's ``ready``)."""
    setting_changed.connect(_on_setting_changed, dispatch_uid="tether.contrib.django.conf")


__all__ = ["DEFAULTS", "connect_signals", "create_schema", "database_url", "get_app", "reset_app", "tether_settings"]
