"""``create_app``: the dashboard as one Starlette ASGI application, its routes and its error pages."""

from __future__ import annotations

import logging
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from tether.domain.errors import ConfigurationError, InvalidTransition, JobNotFound, StorageUnavailable, ValidationError
from tether.entrypoints.service import Tether
from tether.entrypoints.web import actions, pages, store_metrics
from tether.entrypoints.web.dashboard import Dashboard, make_templates, seams_of
from tether.entrypoints.web.live import DEFAULT_INTERVAL, LiveFeed
from tether.entrypoints.web.security import Authorize, Forbidden, Guard, basic_authorizer
from tether.entrypoints.web.snapshot import StoreReader

logger = logging.getLogger("tether.web")


def create_app(
    app: Tether,
    *,
    authorize: Authorize | None = None,
    read_only: bool = False,
    username: str | None = None,
    password: str | None = None,
    live_interval: float = DEFAULT_INTERVAL,
) -> Starlette:
    """The dashboard of ``app`` as an ASGI application (mount it in FastAPI, Starlette or Django's
    ASGI router, or serve it with ``tether dashboard``).

    Args:
        app: the Tether application whose store is shown.
        authorize: ``authorize(request)`` (sync or async) returning the user's name (or True) to
            let the request in, False/None to answer 401; for dashboards behind the host app's own
            login.
        read_only: hide every action and refuse every POST (403).
        username, password: HTTP Basic credentials (both, non-empty), when no ``authorize`` is given.
        live_interval: seconds between two live snapshots of the store (> 0).

    Routes: ``GET /``, ``/jobs`` (``?status=&queue=&job_type=&before=&limit=``, ``?find=``),
    ``/jobs/{id}``, ``/queues``, ``/workers``, ``/schedules``, ``/metrics`` (the store-wide
    queue gauges for Prometheus; 404 without prometheus-client), ``/purge``, ``/events``
    (server-sent events), ``/static/...``; ``POST /jobs/{id}/retry``, ``/jobs/{id}/cancel``,
    ``/jobs/retry`` (selected jobs), ``/queues/{name}/pause``, ``/queues/{name}/resume``, ``/purge``.

    Raises:
        ConfigurationError: neither ``authorize`` nor both credentials given (a dashboard is never
            open by accident), or both given.
        ValidationError: a bad ``live_interval``.
    """
    if authorize is not None and (username or password):
        raise ConfigurationError("create_app: give either authorize or username/password, not both")
    if authorize is None:
        if not username or not password:
            raise ConfigurationError(
                "create_app: the dashboard needs credentials: pass username= and password= (HTTP Basic) "
                "or an authorize(request) hook"
            )
        authorize = basic_authorizer(username, password)
        basic = True
    else:
        basic = False
    if isinstance(live_interval, bool) or not isinstance(live_interval, int | float) or not 0 < live_interval <= 3600:
        raise ValidationError("live_interval", f"must be a number of seconds above 0 and at most 3600, got {live_interval!r}")
    reader = StoreReader(app)
    dashboard = Dashboard(app, reader, LiveFeed(reader.snapshot, interval=float(live_interval)), make_templates(),
                          read_only, metrics=store_metrics.gauges_registry(app), **seams_of(app))
    routes = [
        Route("/", pages.overview),
        Route("/jobs", pages.jobs),
        Route("/jobs/retry", actions.bulk_retry, methods=["POST"]),
        Route("/jobs/{job_id}", pages.job_detail),
        Route("/jobs/{job_id}/retry", actions.retry, methods=["POST"]),
        Route("/jobs/{job_id}/cancel", actions.cancel, methods=["POST"]),
        Route("/queues", pages.queues),
        Route("/queues/{name}/pause", actions.pause_queue, methods=["POST"]),
        Route("/queues/{name}/resume", actions.resume_queue, methods=["POST"]),
        Route("/workers", pages.workers),
        Route("/schedules", pages.schedules),
        Route("/metrics", store_metrics.metrics),
        Route("/purge", pages.purge_form, methods=["GET"]),
        Route("/purge", actions.purge, methods=["POST"]),
        Route("/events", pages.events),
        Route("/static/{name}", pages.asset),
    ]
    handlers: Any = {
        ValidationError: _answer(400, "Bad request"),
        Forbidden: _answer(403, "Forbidden"),
        JobNotFound: _answer(404, "Not found"),
        InvalidTransition: _answer(409, "Not possible now"),
        actions.NotAvailable: _answer(501, "Not available"),
        StorageUnavailable: _answer(503, "Store unavailable"),
        HTTPException: _http_error,
    }
    web = Starlette(routes=routes, exception_handlers=handlers)
    web.state.dashboard = dashboard
    web.add_middleware(Guard, authorize=authorize, basic=basic)
    return web


def _answer(status: int, title: str) -> Any:
    async def handle(request: Request, error: Exception) -> Response:
        dash: Dashboard = request.app.state.dashboard
        if status == 403:
            logger.warning("dashboard: refused %s %s: %s", request.method, request.url.path, error)
        return dash.render(request, "error.html", "", status_code=status, title=title, message=str(error))

    return handle


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    dash: Dashboard = request.app.state.dashboard
    return dash.render(request, "error.html", "", status_code=error.status_code, title=str(error.detail), message="")


__all__ = ["create_app"]
