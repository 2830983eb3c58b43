"""Job helpers (status classes, lease order, payload copies) and the time rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest
from tether.domain import transitions
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus, lease_order_key
from tether.domain.timeutil import ensure_utc, from_micros, to_micros
from tether.domain.validation import prepare_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_status_classes() -> None:
    assert {s for s in JobStatus if s.is_terminal} == {JobStatus.COMPLETED, JobStatus.DEAD, JobStatus.CANCELLED}
    assert {s for s in JobStatus if s.is_leasable} == {JobStatus.QUEUED, JobStatus.RETRYING}
    assert JobStatus("running") is JobStatus.RUNNING


def test_lease_order_key_is_priority_desc_then_scheduled_then_id() -> None:
    # C21's five jobs, as (priority, scheduled offset, id)
    spec = [(0, -10, 1), (10, -1, 2), (10, -5, 4), (10, -5, 3), (10, 60, 5)]
    jobs = [
        attrs.evolve(transitions.create(prepare_job("t", {}, now=T0, priority=p), job_id=i, now=T0),
                     scheduled_at=T0 + timedelta(seconds=s))
        for p, s, i in spec
    ]
    assert [j.id for j in sorted(jobs, key=lease_order_key)] == [3, 4, 2, 5, 1]
    assert [j.id for j in sorted((j for j in jobs if j.is_due(T0)), key=lease_order_key)] == [3, 4, 2, 1]


def test_payload_is_a_fresh_copy() -> None:
    job = transitions.create(prepare_job("t", {"a": [1]}, now=T0), job_id=1, now=T0)
    job.payload["a"].append(2)
    assert job.payload == {"a": [1]}


def test_ensure_utc() -> None:
    tokyo = timezone(timedelta(hours=9))
    value = ensure_utc(datetime(2026, 1, 1, 9, tzinfo=tokyo), "run_at")
    assert value == T0 and value.utcoffset() == timedelta(0)
    with pytest.raises(ValidationError) as info:
        ensure_utc(datetime(2026, 1, 1), "run_at")
    assert info.value.field == "run_at" and "naive" in info.value.problem
    with pytest.raises(ValidationError):
        ensure_utc("2026-01-01", "run_at")


@pytest.mark.parametrize(
    "value",
    [
        T0,
        T0 + timedelta(microseconds=1),
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_micros_round_trip(value: datetime) -> None:
    assert from_micros(to_micros(value)) == value


def test_micros_sort_like_instants() -> None:
    a, b = T0, T0 + timedelta(microseconds=1)
    assert to_micros(a) < to_micros(b)
    assert to_micros(T0) == 1_767_225_600_000_000


def test_a_status_prints_as_its_value() -> None:
    from tether.domain.job import JobStatus

    assert f"{JobStatus.DEAD}" == "dead"
    assert str(JobStatus.RETRYING) == "retrying"
    assert JobStatus("queued") is JobStatus.QUEUED
