"""``tether dashboard``: serve the web dashboard (:mod:`tether.web`) with uvicorn over the store options' store.

It never serves an open dashboard by accident: without ``--password`` (or
``TETHER_DASHBOARD_PASSWORD``) it refuses to start (one line, exit 2) unless ``--no-auth`` is
given, and ``--no-auth`` serves on 127.0.0.1 only.  Needs the ``tether[web]`` extra.
"""

from __future__ import annotations

import errno
import logging
import socket
from typing import Annotated

import typer
from tether.domain.errors import ConfigurationError, ValidationError
from tether.entrypoints.cli.options import DatabaseUrl, RedisClusterSwitch, RedisPrefix, RedisUrl, Schema, load_settings, open_app
from tether.entrypoints.cli.values import FlagNamingCommand, integer

#: What the dashboard does while Redis does not answer: it reads and writes the database; the jobs it
#: retries or the queues it resumes are not announced, and the workers' sweep finds them.
DASHBOARD_WITHOUT_REDIS = (
    "the dashboard works on the database alone; workers find the jobs it retries or resumes at their next sweep, seconds late"
)

LOOPBACK = "127.0.0.1"
PASSWORD_VARIABLE = "TETHER_DASHBOARD_PASSWORD"
DEFAULT_PORT = 8080


def dashboard(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = LOOPBACK,
    port: Annotated[
        int, typer.Option("--port", parser=integer(1, 65535), metavar="PORT", help="Port to listen on.")
    ] = DEFAULT_PORT,
    user: Annotated[
        str, typer.Option("--user", envvar="TETHER_DASHBOARD_USER", help="HTTP Basic user name.")
    ] = "admin",
    password: Annotated[
        str | None,
        typer.Option("--password", envvar=PASSWORD_VARIABLE, help="HTTP Basic password (prefer the variable: flags show in ps)."),
    ] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="Serve without credentials, on 127.0.0.1 only.")
    ] = False,
    read_only: Annotated[bool, typer.Option("--read-only", help="Hide and refuse every action.")] = False,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    redis_prefix: RedisPrefix = None,
    redis_cluster: RedisClusterSwitch = None,
    schema: Schema = None,
) -> None:
    """Serve the web dashboard: jobs, queues, workers, live counts, and retry, cancel and purge."""
    if no_auth and password:
        raise ValidationError("--no-auth", f"cannot be combined with --password or {PASSWORD_VARIABLE}")
    if not no_auth and not password:
        raise ConfigurationError(
            f"the dashboard needs credentials: give --password or set {PASSWORD_VARIABLE} "
            "(or --no-auth to serve without them on 127.0.0.1 only)"
        )
    if no_auth and host != LOOPBACK:
        raise ValidationError("--no-auth", f"serves on {LOOPBACK} only, not on --host {host}")
    if not user:
        raise ValidationError("--user", "must not be empty")
    try:
        import uvicorn
        from tether.web import create_app
    except ImportError as error:
        raise ConfigurationError(f"the dashboard needs the web extra: pip install 'tether-jobs[web]' ({error})") from None
    settings = load_settings(
        database_url=database_url, redis_url=redis_url, redis_prefix=redis_prefix, redis_cluster=redis_cluster, schema=schema
    )
    listener = bound_socket(host, port)
    with listener, open_app(settings, without_redis=DASHBOARD_WITHOUT_REDIS, long_running=True) as tether_app:
        if no_auth:
            web = create_app(tether_app, authorize=lambda request: "local user (no auth)", read_only=read_only)
        else:
            web = create_app(tether_app, username=user, password=password, read_only=read_only)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        print(f"tether dashboard on http://{host}:{port}/ ({settings.database_kind} store)", flush=True)
        server = uvicorn.Server(uvicorn.Config(web, log_level="info", access_log=False, lifespan="off"))
        server.run(sockets=[listener])


def bound_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port``, before anything else is opened.

    Raises:
        ValidationError: the address cannot be bound (in use, not this machine's), naming ``--port``
            or ``--host``.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ValidationError("--host", f"cannot resolve {host!r}: {error.strerror}") from None
    family, kind, proto, _, address = infos[0]
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
        listener.listen(128)
    except OSError as error:
        listener.close()
        field = "--port" if error.errno == errno.EADDRINUSE else "--host"
        raise ValidationError(field, f"cannot listen on {host}:{port}: {error.strerror}") from None
    return listener


def register(app: typer.Typer) -> None:
    """Add ``tether dashboard`` to ``app``."""
    app.command(cls=FlagNamingCommand)(dashboard)


__all__ = ["dashboard", "register"]
