"""Prometheus metrics for Tether (``pip install 'tether-jobs[prometheus]'``).

``WorkerMetrics`` counts what a worker pool does (give it to ``app.worker(observers=[...])``),
``StoreCollector`` / ``store_gauges(app)`` export the store-wide queue gauges, ``serve(port)``
exports a registry over HTTP.  See :mod:`tether.entrypoints.observability.metrics`.
"""

from tether.entrypoints.observability.metrics import (
    DURATION_BUCKETS,
    POOL_COUNTERS,
    StoreCollector,
    WorkerMetrics,
    serve,
    store_gauges,
)

__all__ = ["DURATION_BUCKETS", "POOL_COUNTERS", "StoreCollector", "WorkerMetrics", "serve", "store_gauges"]
