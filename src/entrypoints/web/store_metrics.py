"""The dashboard's ``GET /metrics``: the store-wide queue gauges in Prometheus' text format.

The gauges (``tether_queue_depth``, ``tether_queue_latency_seconds``,
``tether_queue_scrape_success``; see :mod:`tether.entrypoints.observability.metrics`) are read by a
:class:`~tether.entrypoints.observability.metrics.StoreCollector` registered on a registry of the
dashboard's own, so a scrape never includes the host process's other metrics and the gauges are
computed here once per scrape, not by every worker.  Behind the same credentials as the pages.
Needs ``tether[prometheus]``; without it the route answers 404 saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from tether.entrypoints.service import Tether
from tether.entrypoints.web.dashboard import dashboard_of

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: What ``/metrics`` answers (404) when prometheus-client is not installed.
NOT_INSTALLED = (
    "The dashboard serves /metrics with prometheus-client, which is not installed: "
    "pip install 'tether-jobs[prometheus]'."
)


def gauges_registry(app: Tether) -> CollectorRegistry | None:
    """A new registry holding only ``app``'s store-wide queue gauges (registering reads nothing);
    None when prometheus-client is not installed."""
    try:
        from prometheus_client import CollectorRegistry
        from tether.entrypoints.observability.metrics import store_gauges
    except ImportError:
        return None
    registry = CollectorRegistry()
    store_gauges(app, registry)
    return registry


async def metrics(request: Request) -> Response:
    """The gauges as ``text/plain`` exposition (one read of the live jobs per scrape)."""
    dash = dashboard_of(request)
    if dash.metrics is None:
        return dash.render(request, "error.html", "", status_code=404, title="Not found", message=NOT_INSTALLED)
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    body = await run_in_threadpool(generate_latest, dash.metrics)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


__all__ = ["NOT_INSTALLED", "gauges_registry", "metrics"]
