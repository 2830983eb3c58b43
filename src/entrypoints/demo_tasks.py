"""The demo's failure plan and per-file work under their first import path (they live in :mod:`tether.entrypoints.demo.tasks`)."""

from __future__ import annotations

from tether.entrypoints.demo.tasks import (
    BUCKETS,
    ONCE_BELOW,
    PERMANENT_BELOW,
    TWICE_BELOW,
    FailurePlan,
    PlannedFailure,
    ResultsFile,
    failure_bucket,
    failure_plan,
    file_stats,
)

__all__ = [
    "BUCKETS",
    "ONCE_BELOW",
    "PERMANENT_BELOW",
    "TWICE_BELOW",
    "FailurePlan",
    "PlannedFailure",
    "ResultsFile",
    "failure_bucket",
    "failure_plan",
    "file_stats",
]
