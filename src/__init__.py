"""Tether: a durable background-job queue.

The names most programs need are importable from here: ``tether.Tether`` (the embeddable
application object), ``tether.PermanentError``, ``tether.Snooze``, ``tether.RetryPolicy``, the error classes and
``tether.JobStatus``.  They are loaded on first use, so ``import tether.domain`` stays light.
"""

from __future__ import annotations

from tether._lazy import lazy_names as _lazy_names

__version__ = "0.1.0"

_EXPORTS = {
    "Tether": "tether.entrypoints.service",
    "connect": "tether.entrypoints.container",
    "connect_from_env": "tether.entrypoints.container",
    "EnqueueRequest": "tether.entrypoints.service",
    "JobContext": "tether.entrypoints.context",
    "WorkerPool": "tether.entrypoints.worker",
    "Job": "tether.domain.job",
    "Attempt": "tether.domain.history",
    "AttemptOutcome": "tether.domain.history",
    "JobStatus": "tether.domain.job",
    "EnqueueResult": "tether.domain.job",
    "RetryPolicy": "tether.domain.retry",
    "TetherError": "tether.domain.errors",
    "ValidationError": "tether.domain.errors",
    "PayloadError": "tether.domain.errors",
    "ConfigurationError": "tether.domain.errors",
    "InvalidSetting": "tether.entrypoints.settings",
    "LeaseLost": "tether.domain.errors",
    "JobNotFound": "tether.domain.errors",
    "InvalidTransition": "tether.domain.errors",
    "StorageUnavailable": "tether.domain.errors",
    "StorageRowError": "tether.domain.errors",
    "ServiceUnavailable": "tether.domain.errors",
    "DispatcherUnavailable": "tether.domain.errors",
    "PermanentError": "tether.domain.errors",
    "JobTimeout": "tether.domain.errors",
    "Snooze": "tether.domain.snooze",
}

__all__ = sorted(_EXPORTS) + ["__version__"]  # noqa: PLE0605 - built from the lazy-export table, one list


__getattr__, __dir__ = _lazy_names(__name__, globals(), _EXPORTS)
