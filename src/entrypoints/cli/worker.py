"""``tether worker``: load the user's app (``--app module:attribute``) and run its worker pool until a signal."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from tether.domain.errors import ServiceUnavailable, TetherError, ValidationError
from tether.domain.wording import with_article
from tether.entrypoints.cli.options import SECONDS, load_settings, setting_option
from tether.entrypoints.cli.values import FlagNamingCommand, integer, option_label, switch
from tether.entrypoints.job_logs import JobFieldsFilter, JobLogObserver
from tether.entrypoints.settings import DEFAULT_LEASE_TIMEOUT, DEFAULT_REAP_INTERVAL, HEARTBEATS_PER_LEASE, Settings

if TYPE_CHECKING:
    from tether.entrypoints.service import Tether
    from tether.entrypoints.worker.observers import JobObserver


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


#: The store options of the other commands, which ``tether worker`` does not take (its app, loaded
#: by ``--app``, brings its own store and dispatcher): what to do instead, by flag.
NOT_WORKER_OPTIONS = {
    "--database-url": ("the database URL", "tether.connect(URL)", "TETHER_DATABASE_URL"),
    "--schema": ("the schema", "tether.connect(URL, schema=S)", "TETHER_SCHEMA"),
    "--redis-url": ("the Redis URL", "tether.connect(URL, redis_url=R)", "TETHER_REDIS_URL"),
    "--redis-prefix": ("the prefix", 'tether.connect(URL, redis_url=R, redis_options={"prefix": P})', "TETHER_REDIS_PREFIX"),
    "--redis-cluster": ("cluster mode", 'tether.connect(URL, redis_url=R, redis_options={"cluster": True})', "TETHER_REDIS_CLUSTER"),
}


def not_a_worker_option(flag: str) -> str | None:
    """Why ``tether worker`` refuses ``flag``, when it is one of the other commands' store options
    (:data:`NOT_WORKER_OPTIONS`), and what to do instead; None for any other unknown flag."""
    if flag not in NOT_WORKER_OPTIONS:
        return None
    what, call, variable = NOT_WORKER_OPTIONS[flag]
    return (
        f"tether worker uses the store and Redis of the app it loads (--app); set {what} where the app "
        f"is made: {call}, or tether.connect_from_env() with {variable} set"
    )


class WorkerCommand(FlagNamingCommand):
    """``tether worker``: a store option of the other commands (``--database-url``, ...) is bad
    input naming the flag and what to do instead (:func:`not_a_worker_option`), not a bare
    "no such option"."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except typer.TyperException as error:
            flag = str(getattr(error, "option_name", "")) if type(error).__name__ == "NoSuchOption" else ""
            reason = not_a_worker_option(flag)
            if reason is None:
                raise
            raise ValidationError(flag, reason) from None


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
        int | None, setting_option("concurrency", "Worker threads. [default: 4]", "-c", parser=integer(), metavar="N")
    ] = None,
    async_concurrency: Annotated[
        int | None,
        setting_option(
            "async_concurrency", "async def handlers run at once on the worker's event loop. [default: 100]",
            parser=integer(), metavar="N",
        ),
    ] = None,
    prefetch: Annotated[
        int | None,
        setting_option(
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
        setting_option(
            "lease_timeout", f"Seconds a lease lasts without a heartbeat. [default: {DEFAULT_LEASE_TIMEOUT:g}]", **SECONDS
        ),
    ] = None,
    heartbeat_interval: Annotated[
        float | None,
        setting_option(
            "heartbeat_interval",
            f"Seconds between lease heartbeats. [default: lease timeout / {HEARTBEATS_PER_LEASE}]",
            **SECONDS,
        ),
    ] = None,
    reap_interval: Annotated[
        float | None,
        setting_option("reap_interval", f"Seconds between reaper passes. [default: {DEFAULT_REAP_INTERVAL:g}]", **SECONDS),
    ] = None,
    drain_timeout: Annotated[
        float | None,
        setting_option(
            "drain_timeout", "On SIGINT/SIGTERM, seconds to let running jobs finish before releasing them. [default: 30]",
            **SECONDS,
        ),
    ] = None,
    job_timeout: Annotated[
        float | None,
        setting_option(
            "job_timeout",
            "Seconds a handler may run (unless registered with its own timeout); past it the job fails with "
            "JobTimeout. [default: no limit]",
            **SECONDS,
        ),
    ] = None,
    log_level: Annotated[
        str | None, setting_option("log_level", "DEBUG, INFO, WARNING, ERROR or CRITICAL. [default: INFO]")
    ] = None,
    log_format: Annotated[
        str | None,
        setting_option("log_format", "text, or json: one JSON object per line, with the job's fields. [default: text]"),
    ] = None,
    log_jobs: Annotated[
        bool | None,
        setting_option("log_jobs", "Log one INFO line as each job starts and one as it finishes. [default: off]",
                       parser=switch),
    ] = None,
    metrics_port: Annotated[
        int | None,
        setting_option("metrics_port", "Export Prometheus metrics at http://0.0.0.0:N/metrics (needs "
                       "tether-jobs[prometheus]). [default: none]", parser=integer(), metavar="N"),
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
    settings = load_settings(
        concurrency=concurrency,
        async_concurrency=async_concurrency,
        prefetch=prefetch,
        queues=tuple(queues) if queues else None,
        lease_timeout=lease_timeout,
        heartbeat_interval=heartbeat_interval,
        reap_interval=reap_interval,
        drain_timeout=drain_timeout,
        job_timeout=job_timeout,
        log_level=log_level,
        log_format=log_format,
        log_jobs=log_jobs,
        metrics_port=metrics_port,
    )
    _configure_logging(settings.log_level, settings.log_format)
    observers = _observers(ctx, settings)
    try:
        tether_app = load_app(app_spec)
    except ServiceUnavailable as exc:  # exit 1 as ever, but say that loading the app met it
        raise ServiceUnavailable(f"{_label_of(ctx, 'app_spec')}: {exc}") from None
    try:
        pool = tether_app.worker(
            concurrency=settings.concurrency,
            async_concurrency=settings.async_concurrency,
            prefetch=settings.prefetch,
            queues=list(settings.queues) if settings.queues else None,
            lease_timeout=settings.lease_timeout,
            heartbeat_interval=settings.heartbeat_interval,
            reap_interval=settings.reap_interval,
            drain_timeout=settings.drain_timeout,
            job_timeout=settings.job_timeout,
            worker_id=worker_id,
            observers=observers,
        )
        if settings.metrics_port is not None:
            _serve_metrics(ctx, settings.metrics_port)
        logging.getLogger("tether.cli").info(
            "worker %s: %d thread(s)%s, queues %s; store %r, dispatch %r (both chosen by the app %s)",
            pool.worker_id,
            settings.concurrency,
            f" and {pool.async_concurrency} async slot(s)" if pool.runs_async else "",
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


def _observers(ctx: typer.Context, settings: Settings) -> list[JobObserver]:
    """The observers the flags ask for: job lines (``--log-jobs``), metrics (``--metrics-port``).

    Raises:
        ValidationError (``--metrics-port``): prometheus-client is not installed.
    """
    observers: list[JobObserver] = []
    if settings.log_jobs:
        observers.append(JobLogObserver())
    if settings.metrics_port is not None:
        try:
            from tether.entrypoints.observability.metrics import WorkerMetrics
        except ImportError:
            raise ValidationError(_label_of(ctx, "metrics_port"), "needs prometheus-client: pip install "
                                  "'tether-jobs[prometheus]'") from None
        observers.append(WorkerMetrics())
    return observers


def _serve_metrics(ctx: typer.Context, port: int) -> None:
    """Export the process's metrics on ``port`` (all interfaces).

    Raises:
        ValidationError (``--metrics-port``): the port is in use or cannot be bound.
    """
    from tether.entrypoints.observability.metrics import serve

    try:
        serve(port)
    except ValidationError as exc:
        raise ValidationError(_label_of(ctx, "metrics_port"), exc.problem) from None
    logging.getLogger("tether.cli").info("metrics at http://0.0.0.0:%d/metrics", port)


def _configure_logging(level: str, log_format: str = "text") -> None:
    """Worker logs on stderr: one JSON object per line (``json``); else rich on a terminal, one
    plain line per record otherwise.  Every record made while a job is worked on carries the
    job's fields (:class:`~tether.entrypoints.job_logs.JobFieldsFilter`)."""
    handler: logging.Handler
    if log_format == "json":
        from tether.entrypoints.observability.json_logs import json_formatter

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(json_formatter())
    elif sys.stderr.isatty():
        from rich.logging import RichHandler

        handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(JobFieldsFilter())
    logging.basicConfig(level=level, handlers=[handler], force=True)


def register(app: typer.Typer) -> None:
    """Add ``tether worker`` to ``app``."""
    app.command(cls=WorkerCommand)(worker)


__all__ = ["NOT_WORKER_OPTIONS", "WorkerCommand", "load_app", "not_a_worker_option", "register", "worker"]
