"""RetryPolicy: backoff min(2**(n-1), 300) s without overflow (C14), and the jitter rule
(``m * (1 + j*r)`` with ``m = min(base * 2**(n-1), cap / (1 + j))``: never above the cap)."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pytest
from tether.domain.errors import ValidationError
from tether.domain.limits import MAX_SECONDS
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
    policy = RetryPolicy(cap_seconds=MAX_SECONDS)  # the largest cap a policy takes
    value = policy.backoff(attempt)
    assert math.isfinite(value) and value > 0
    assert RetryPolicy().backoff(attempt) == 300
    for r in (0.0, 0.5, 0.999999, 1.0):
        assert 0 < policy.delay(attempt, r) <= MAX_SECONDS
        assert 240 <= RetryPolicy().delay(attempt, r) <= 300
    assert RetryPolicy().retry_at(attempt, NOW, 0.999999) <= NOW + timedelta(seconds=300)


def test_backoff_is_monotonic_up_to_the_cap() -> None:
    policy = RetryPolicy()
    values = [policy.backoff(n) for n in range(1, 40)]
    assert values == sorted(values) and max(values) == 300


def test_base_and_cap_scale_the_curve() -> None:
    policy = RetryPolicy(base_seconds=0.5, cap_seconds=3)
    assert [policy.backoff(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1, 2, 3, 3]


def test_jitter_only_adds_at_most_a_quarter_below_the_cap() -> None:
    policy = RetryPolicy()
    assert policy.jitter == 0.25
    for attempt in (1, 2, 3, 5, 8):  # m = base * 2**(n-1): under cap / 1.25 = 240 s
        base = policy.backoff(attempt)
        assert policy.shortest_delay(attempt) == base
        assert policy.delay(attempt, 0.0) == base
        assert policy.delay(attempt, 0.5) == pytest.approx(base * 1.125)
        assert base <= policy.delay(attempt, 0.999999) < base * 1.25


def test_c14_attempt_10_waits_between_240_and_300_seconds() -> None:
    """512 s of doubling is capped at m = 300 / 1.25 = 240 s; jitter adds up to a quarter of it."""
    policy = RetryPolicy()
    assert policy.backoff(10) == 300  # before jitter (C14)
    assert policy.shortest_delay(10) == 240
    assert policy.delay(10, 0.0) == 240
    assert policy.delay(10, 0.5) == 270
    assert 299.99 < policy.delay(10, 0.999999) < 300
    assert policy.delay(10, 1.0) == 300
    assert policy.shortest_delay(9) == 240  # 256 s is past the 240 s ceiling of m too
    for attempt in (10, 11, 64, 1075, 10**6, 10**100):
        delays = [policy.delay(attempt, r / 1000) for r in range(1001)]
        assert min(delays) == 240 and max(delays) == 300


def test_no_delay_is_ever_above_the_cap() -> None:
    rng = random.Random(7)
    for policy in (RetryPolicy(), RetryPolicy(base_seconds=0.3, cap_seconds=7, jitter=1),
                   RetryPolicy(base_seconds=10, cap_seconds=10, jitter=0.5), RetryPolicy(cap_seconds=1e-9, base_seconds=1e-9)):
        for attempt in range(1, 80):
            for _ in range(50):
                r = rng.random()
                delay = policy.delay(attempt, r)
                assert policy.shortest_delay(attempt) <= delay <= policy.cap_seconds
            assert policy.delay(attempt, 1.0) <= policy.cap_seconds


def test_a_herd_failing_together_at_attempt_3_spreads_over_about_a_second() -> None:
    """1,000 jobs failing their third attempt at the same instant come back between 4 and 5 s."""
    rng = random.Random(11)
    retry_ats = sorted(RetryPolicy().retry_at(3, NOW, rng.random()) for _ in range(1000))
    assert retry_ats[0] >= NOW + timedelta(seconds=4)
    assert retry_ats[-1] < NOW + timedelta(seconds=5)
    assert retry_ats[-1] - retry_ats[0] > timedelta(seconds=0.99)


def test_zero_jitter_is_exact() -> None:
    assert RetryPolicy(jitter=0).delay(4, 0.99) == 8


def test_retry_at_is_now_plus_delay() -> None:
    assert RetryPolicy().retry_at(2, NOW, 0.5) == NOW + timedelta(seconds=2.25)
    assert RetryPolicy(jitter=0.1).retry_at(2, NOW, 0.5) == NOW + timedelta(seconds=2.1)


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
        ({"cap_seconds": 1e300}, "retry_policy.cap_seconds"),
        ({"cap_seconds": MAX_SECONDS + 1}, "retry_policy.cap_seconds"),
        ({"base_seconds": 1e15, "cap_seconds": 1e15}, "retry_policy.base_seconds"),
    ],
)
def test_bad_policy_names_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        RetryPolicy(**kwargs)
    assert info.value.field == field
