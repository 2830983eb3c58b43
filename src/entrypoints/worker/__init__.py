"""The worker pool (being split into one module per part)."""

from tether.entrypoints.worker.pool import (
    ACQUIRE_BACKOFF,
    LEASE_COALESCE_SECONDS,
    PREFETCH_EMA_WEIGHT,
    PREFETCH_HORIZON,
    RUN_POLL_SECONDS,
    WRITE_RETRY_SECONDS,
    WorkerPool,
    WorkerStats,
    default_worker_id,
)

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
