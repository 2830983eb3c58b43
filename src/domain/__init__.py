"""The pure core of Tether: jobs, leases and fencing, retry policy, validation.

Standard library and attrs only; time always comes in as an argument.
"""

from tether.domain.errors import (
    ConfigurationError,
    InvalidTransition,
    JobNotFound,
    JobTimeout,
    LeaseLost,
    PayloadError,
    PermanentError,
    StorageUnavailable,
    TetherError,
    ValidationError,
)
from tether.domain.history import Attempt, AttemptOutcome
from tether.domain.job import EnqueueResult, Job, JobStatus, NewJob, lease_order_key
from tether.domain.lease import Lease, check_fence, holds_lease, new_lease_token, without_token
from tether.domain.retry import DEFAULT_MAX_ATTEMPTS, RetryPolicy

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "Attempt",
    "AttemptOutcome",
    "ConfigurationError",
    "EnqueueResult",
    "InvalidTransition",
    "Job",
    "JobNotFound",
    "JobStatus",
    "JobTimeout",
    "Lease",
    "LeaseLost",
    "NewJob",
    "PayloadError",
    "PermanentError",
    "RetryPolicy",
    "StorageUnavailable",
    "TetherError",
    "ValidationError",
    "check_fence",
    "holds_lease",
    "lease_order_key",
    "new_lease_token",
    "without_token",
]
