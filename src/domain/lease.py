"""Leases and the fencing rule.

A lease is a worker's right to run one job until ``expires_at``.  Every lease carries a fencing
token unique to that lease (128 random bits, hex): not shared by two leases of the same job, not
reused when the same worker id leases the job again, not reused after a manual retry.  A worker
id alone is never a fence, since workers restart under the same name (case C03).

Every write on a running job is a compare-and-set on (job id, status running, token): if the job
is not running under exactly that token, the write changes nothing and raises
:class:`~tether.domain.errors.LeaseLost`.
"""

from __future__ import annotations

import secrets
from datetime import datetime

import attrs
from tether.domain.errors import LeaseLost
from tether.domain.job import Job, JobStatus

TOKEN_BYTES = 16


def new_lease_token() -> str:
    """A fresh fencing token: 32 lowercase hex characters from the OS's CSPRNG."""
    return secrets.token_hex(TOKEN_BYTES)


@attrs.frozen
class Lease:
    """A worker's hold on one running job.

    Attributes:
        job_id: the job held.
        token: the fencing token (unique to this lease).
        worker_id: who holds it (informational).
        leased_at, expires_at: aware UTC.
    """

    job_id: int
    token: str
    worker_id: str
    leased_at: datetime
    expires_at: datetime

    @classmethod
    def of(cls, job: Job) -> Lease:
        """The lease of a running job.

        Raises:
            ValueError: the job is not running under a lease.
        """
        if (
            job.status is not JobStatus.RUNNING
            or job.lease_token is None
            or job.leased_at is None
            or job.lease_expires_at is None
        ):
            raise ValueError(f"job {job.id} is {job.status.value}, not running under a lease")
        return cls(
            job_id=job.id,
            token=job.lease_token,
            worker_id=job.leased_by or "",
            leased_at=job.leased_at,
            expires_at=job.lease_expires_at,
        )


def holds_lease(job: Job, token: str) -> bool:
    """True when ``job`` is running under exactly ``token``."""
    return job.status is JobStatus.RUNNING and job.lease_token == token


def check_fence(job: Job, token: str) -> None:
    """Raise :class:`LeaseLost` unless ``job`` is running under ``token``."""
    if not holds_lease(job, token):
        raise LeaseLost(job.id, token)


def without_token(job: Job) -> Job:
    """``job`` as the public API shows it: the lease token hidden (``lease_token=None``).

    The token is the holder's proof of its lease: only the repository port and the running
    handler's context carry it, so a reader of the API can never write for a lease it does not
    hold.  A job without a token is returned as it is (no copy).
    """
    return job if job.lease_token is None else attrs.evolve(job, lease_token=None)
