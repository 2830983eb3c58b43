"""RetryPolicy: backoff min(2**(n-1), 300) s without overflow (C14), and the jitter rule."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from tether.domain.errors import ValidationError
from tether.domain.retry import RetryPolicy

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_c14_backoff_values() -> None:
    policy = RetryPolicy()
    assert [policy.backoff(n) for n in (1, 2, 9, 10, 64, 1075, 10**6)] == [1, 2, 256, 300, 300, 300, 300]


@pytest.mark.parametrize("attempt", [0, -1, -(10**18)])
def test_c14_attempt_below_one_counts_as_one(attempt: int) -> None:
    assert RetryPolicy().backoff(attempt) == 1


@pytest.mark.parametrize("attempt", [1000, 1001, 1024, 1075, 10**6, 10**30, 10**400])
def test_c14_no_overflow_infinity_or_negative(attempt: int) -> None:
    policy = RetryPolicy(cap_seconds=1e300)
    value = policy.backoff(attempt)
    assert math.isfinite(value) and value > 0
    assert RetryPolicy().backoff(attempt) == 300


def test_backoff_is_monotonic_up_to_the_cap() -> None:
    policy = RetryPolicy()
    values = [policy.backoff(n) for n in range(1, 40)]
    assert values == sorted(values) and max(values) == 300


def test_base_and_cap_scale_the_curve() -> None:
    policy = RetryPolicy(base_seconds=0.5, cap_seconds=3)
    assert [policy.backoff(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1, 2, 3, 3]


def test_jitter_only_adds_at_most_ten_percent() -> None:
    policy = RetryPolicy()
    for attempt in (1, 5, 9, 10, 100):
        base = policy.backoff(attempt)
        assert policy.delay(attempt, 0.0) == base
        assert policy.delay(attempt, 0.5) == pytest.approx(base * 1.05)
        assert base <= policy.delay(attempt, 0.999999) <= base * 1.1


@pytest.mark.parametrize(("r", "factor"), [(-5.0, 1.0), (-0.1, 1.0), (1.0, 1.1), (7.0, 1.1)])
def test_jitter_r_is_clamped(r: float, factor: float) -> None:
    assert RetryPolicy().delay(3, r) == pytest.approx(4 * factor)


def test_zero_jitter_is_exact() -> None:
    assert RetryPolicy(jitter=0).delay(4, 0.99) == 8


def test_retry_at_is_now_plus_delay() -> None:
    assert RetryPolicy().retry_at(2, NOW, 0.5) == NOW + timedelta(seconds=2.1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"base_seconds": 0}, "retry_policy.base_seconds"),
        ({"base_seconds": -1}, "retry_policy.base_seconds"),
        ({"base_seconds": float("inf")}, "retry_policy.base_seconds"),
        ({"cap_seconds": float("nan")}, "retry_policy.cap_seconds"),
        ({"jitter": -0.1}, "retry_policy.jitter"),
        ({"jitter": 1.5}, "retry_policy.jitter"),
        ({"base_seconds": 10, "cap_seconds": 5}, "retry_policy.cap_seconds"),
    ],
)
def test_bad_policy_names_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        RetryPolicy(**kwargs)
    assert info.value.field == field
