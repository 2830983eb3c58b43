"""The worker pool (being split into one module per part)."""

from tether.entrypoints.worker.acquirer import ACQUIRE_BACKOFF, LEASE_COALESCE_SECONDS, PREFETCH_HORIZON
from tether.entrypoints.worker.outcomes import WRITE_RETRY_SECONDS
from tether.entrypoints.worker.pool import RUN_POLL_SECONDS, WorkerPool, default_worker_id
from tether.entrypoints.worker.runner import PREFETCH_EMA_WEIGHT
from tether.entrypoints.worker.stats import WorkerStats

__all__ = [
    "ACQUIRE_BACKOFF",
    "LEASE_COALESCE_SECONDS",
    "PREFETCH_EMA_WEIGHT",
    "PREFETCH_HORIZON",
    "RUN_POLL_SECONDS",
    "WRITE_RETRY_SECONDS",
    "WorkerPool",
    "WorkerStats",
    "default_worker_id",
]
