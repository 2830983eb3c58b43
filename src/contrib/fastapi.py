"""Tether inside a FastAPI application: a lifespan that opens Tether with the app and closes it
with the app (optionally running a worker pool in the same process), and a dependency that hands
the app's :class:`~tether.Tether` to endpoints.  Needs the ``tether[fastapi]`` extra.

::

    from fastapi import FastAPI
    from tether.contrib.fastapi import TetherDep, tether_lifespan

    api = FastAPI(lifespan=tether_lifespan(create_tether, worker=True, concurrency=2))

    @api.post("/signups")
    async def sign_up(email: str, tether: TetherDep) -> dict:
        result = await tether.aenqueue("emails.welcome", {"to": email})
        return {"job": result.job.id}

The lifespan puts the ``Tether`` into the lifespan state (Starlette copies it into every request's
``request.state``), where :func:`get_tether` finds it.  It uses only the public ``Tether`` API.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any, TypeAlias

from fastapi import Depends
from starlette.requests import HTTPConnection
from tether.domain.errors import ConfigurationError
from tether.entrypoints.service import Tether
from tether.entrypoints.worker import WorkerPool

#: The key of the lifespan state (and so of ``request.state``) that holds the ``Tether``.
STATE_KEY = "tether"
#: The key that holds the in-process :class:`~tether.WorkerPool` (``worker=True`` only), e.g. for
#: a health endpoint reading ``request.state.tether_worker.stats``.
WORKER_STATE_KEY = "tether_worker"

#: A ``Tether``, or a function (plain or ``async def``) taking no argument that returns one.
TetherSource: TypeAlias = Tether | Callable[[], Tether] | Callable[[], Awaitable[Tether]]
#: What ``FastAPI(lifespan=...)`` takes: the ASGI app in, an async context manager yielding the
#: lifespan state (a mapping) or None.
Lifespan: TypeAlias = Callable[[Any], AbstractAsyncContextManager[Mapping[str, Any] | None]]

_WORKER_OPTIONS = tuple(name for name in inspect.signature(Tether.worker).parameters if name != "self")


def tether_lifespan(
    source: TetherSource,
    *,
    lifespan: Lifespan | None = None,
    worker: bool = False,
    **worker_options: Any,
) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """A lifespan for ``FastAPI(lifespan=...)`` that opens Tether at startup and closes it at shutdown.

    At startup: the ``Tether`` is built (``source`` called, on a thread when it is a plain
    function: ``tether.connect`` may create tables), then, with ``worker=True``, a worker pool
    ``tether.worker(**worker_options)`` is started in this process (its threads, and for
    ``async def`` handlers its own event loop, never the server's), then ``lifespan`` (yours, if
    given) runs inside.  The lifespan state is yours plus ``{"tether": app}`` (and
    ``{"tether_worker": pool}`` with ``worker=True``).

    At shutdown, in reverse order: your lifespan's exit, then the pool stops (no new leases,
    in-flight jobs get the pool's ``drain_timeout`` seconds, default 30, then are cancelled and
    released for another worker), then the ``Tether`` closes (``await app.aclose()``), also when
    startup failed half-way.  A ``Tether`` given as an object is closed too: pass a function when
    the application may start more than once (tests).

    Args:
        source: a ``Tether``, or a function (plain or ``async def``) returning one.
        lifespan: your own lifespan to run inside Tether's (Tether is open during all of it).
        worker: run a worker pool in this process while the application runs.
        worker_options: keywords of :meth:`Tether.worker` (``concurrency``, ``queues``,
            ``drain_timeout`` in seconds, ``async_concurrency``, ...); only with ``worker=True``.

    Returns:
        A function of the ASGI application giving an async context manager that yields the
        lifespan state (a dict).

    Raises:
        ConfigurationError: at once, ``source`` is neither a ``Tether`` nor callable, a worker
            option is unknown or given without ``worker=True``, or ``lifespan`` is not callable;
            at startup, ``source`` returned something else than a ``Tether``, or is a ``Tether``
            object closed by a previous shutdown.
        ValidationError: at startup, a bad worker option value (naming it), from :meth:`Tether.worker`.
    """
    if not isinstance(source, Tether) and not callable(source):
        raise ConfigurationError(f"tether_lifespan: source must be a Tether or a function returning one, got {source!r}")
    if lifespan is not None and not callable(lifespan):
        raise ConfigurationError(f"tether_lifespan: lifespan must be a lifespan function, got {lifespan!r}")
    unknown = sorted(set(worker_options) - set(_WORKER_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"{unknown[0]}: not an option of tether_lifespan or Tether.worker (known: {', '.join(_WORKER_OPTIONS)})"
        )
    if worker_options and not worker:
        raise ConfigurationError(f"{min(worker_options)}: a worker option needs worker=True")

    started = False

    @asynccontextmanager
    async def tether_lifespan_of(api: Any) -> AsyncIterator[dict[str, Any]]:
        nonlocal started
        if isinstance(source, Tether) and started:
            raise ConfigurationError(
                "tether_lifespan: the Tether object it was given was closed at the previous shutdown; "
                "pass a function that returns a new one (e.g. lambda: tether.connect(...))"
            )
        started = True
        tether = await _open(source)
        pool: WorkerPool | None = None
        try:
            ours: dict[str, Any] = {STATE_KEY: tether}
            if worker:
                pool = tether.worker(**worker_options)
                await asyncio.to_thread(pool.start)
                ours[WORKER_STATE_KEY] = pool
            if lifespan is None:
                yield ours
            else:
                async with lifespan(api) as state:
                    yield {**(state or {}), **ours}
        finally:
            try:
                if pool is not None:
                    await asyncio.to_thread(pool.stop)
            finally:
                await tether.aclose()

    return tether_lifespan_of


def get_tether(connection: HTTPConnection) -> Tether:
    """The application's ``Tether``, for ``Depends(get_tether)`` (or :data:`TetherDep`) in an
    HTTP or WebSocket endpoint.

    Raises:
        ConfigurationError: the request's state holds no ``Tether``: the application was built
            without ``lifespan=tether_lifespan(...)`` (or a lifespan that runs it).
    """
    tether = getattr(connection.state, STATE_KEY, None)
    if not isinstance(tether, Tether):
        raise ConfigurationError(
            f"no Tether in the request state under {STATE_KEY!r}: build the application with "
            "FastAPI(lifespan=tether_lifespan(...))"
        )
    return tether


#: ``tether: TetherDep`` in an endpoint's parameters hands it the application's ``Tether``.
TetherDep = Annotated[Tether, Depends(get_tether)]


async def _open(source: TetherSource) -> Tether:
    if isinstance(source, Tether):
        return source
    if inspect.iscoroutinefunction(source):
        opened: Any = await source()
    else:
        opened = await asyncio.to_thread(source)
        if inspect.isawaitable(opened):  # an object whose __call__ is async
            opened = await opened
    if not isinstance(opened, Tether):
        raise ConfigurationError(f"tether_lifespan: source returned {opened!r}, not a Tether")
    return opened


__all__ = ["STATE_KEY", "WORKER_STATE_KEY", "Lifespan", "TetherDep", "TetherSource", "get_tether", "tether_lifespan"]
