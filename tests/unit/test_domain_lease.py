"""Fencing tokens and the fence check."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tether.domain import transitions
from tether.domain.errors import LeaseLost
from tether.domain.lease import Lease, check_fence, holds_lease, new_lease_token
from tether.domain.validation import prepare_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_tokens_are_128_bit_hex_and_unique() -> None:
    tokens = {new_lease_token() for _ in range(10_000)}
    assert len(tokens) == 10_000
    for token in list(tokens)[:100]:
        assert len(token) == 32 and set(token) <= set("0123456789abcdef"), token


def test_fence_compares_the_whole_token_not_the_worker() -> None:
    job = transitions.create(prepare_job("t", {}, now=T0), job_id=1, now=T0)
    job = transitions.lease(job, now=T0, token="a" * 32, worker_id="host-1", lease_timeout=60)
    assert holds_lease(job, "a" * 32)
    assert not holds_lease(job, "a" * 31 + "b")
    assert not holds_lease(job, "host-1")
    check_fence(job, "a" * 32)
    with pytest.raises(LeaseLost) as info:
        check_fence(job, "b" * 32)
    assert info.value.job_id == 1 and "no longer held" in str(info.value)


def test_lease_of_a_running_job() -> None:
    job = transitions.create(prepare_job("t", {}, now=T0), job_id=3, now=T0)
    with pytest.raises(ValueError):
        Lease.of(job)
    job = transitions.lease(job, now=T0, token="c" * 32, worker_id="w", lease_timeout=60)
    lease = Lease.of(job)
    assert (lease.job_id, lease.token, lease.worker_id, lease.leased_at) == (3, "c" * 32, "w", T0)
    assert lease.expires_at == job.lease_expires_at
