"""prepare_job and the field validators: every rejection names the field; nothing half-built."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from tether.domain.errors import PayloadError, TetherError, ValidationError
from tether.domain.validation import (
    IDEMPOTENCY_KEY_MAX_CHARS,
    prepare_job,
    validate_queue,
    validate_seconds,
    validate_worker_id,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def rejected(field: str, **overrides: object) -> ValidationError:
    """Call prepare_job with one bad argument; return the error after checking it names ``field``."""
    arguments: dict[str, object] = {"job_type": "emails.send", "payload": {"to": "a@b.c"}, "now": NOW}
    arguments.update(overrides)
    with pytest.raises(ValidationError) as info:
        prepare_job(**arguments)  # type: ignore[arg-type]
    assert isinstance(info.value, TetherError)
    assert info.value.field == field, f"expected the error to name {field!r}, got {info.value.field!r}"
    assert str(info.value).startswith(f"{field}: ") and info.value.problem
    return info.value


def test_defaults() -> None:
    new = prepare_job("emails.send", {"to": "a@b.c"}, now=NOW)
    assert (new.job_type, new.queue, new.priority, new.max_attempts) == ("emails.send", "default", 0, 3)
    assert new.scheduled_at == NOW and new.idempotency_key is None
    assert new.payload_json == '{"to":"a@b.c"}'


@pytest.mark.parametrize("queue", ["", "-lead", ".dot", "has space", "a/b", "q" * 65, "ünï", "a{b}", 7, None])
def test_queue_pattern(queue: object) -> None:
    rejected("queue", queue=queue)


@pytest.mark.parametrize("queue", ["a", "0", "emails", "high-prio_1.eu", "q" * 64])
def test_queue_pattern_accepts(queue: str) -> None:
    assert prepare_job("t", {}, now=NOW, queue=queue).queue == queue
    assert validate_queue(queue) == queue


@pytest.mark.parametrize("job_type", ["", "has space", "a/b", "x" * 201, "-lead", None, 3])
def test_job_type(job_type: object) -> None:
    rejected("job_type", job_type=job_type)


def test_job_type_accepts_module_like_names() -> None:
    assert prepare_job("reports.build:v2", {}, now=NOW).job_type == "reports.build:v2"
    assert prepare_job("x" * 200, {}, now=NOW).job_type == "x" * 200


@pytest.mark.parametrize("priority", [True, False, 1.5, "1", None, 2**31, -(2**31) - 1])
def test_priority_must_be_a_32_bit_int_not_a_bool(priority: object) -> None:
    error = rejected("priority", priority=priority)
    if isinstance(priority, bool):
        assert "bool" in error.problem


def test_priority_range_ends_are_accepted() -> None:
    assert prepare_job("t", {}, now=NOW, priority=2**31 - 1).priority == 2**31 - 1
    assert prepare_job("t", {}, now=NOW, priority=-(2**31)).priority == -(2**31)


@pytest.mark.parametrize("max_attempts", [0, -1, 10_001, True, 2.0, None])
def test_max_attempts(max_attempts: object) -> None:
    # C15c: 0 and -1 are a clear validation error naming max_attempts
    error = rejected("max_attempts", max_attempts=max_attempts)
    if max_attempts in (0, -1) and not isinstance(max_attempts, bool):
        assert "between 1 and 10000" in error.problem


def test_max_attempts_accepts_one_and_the_limit() -> None:
    assert prepare_job("t", {}, now=NOW, max_attempts=1).max_attempts == 1
    assert prepare_job("t", {}, now=NOW, max_attempts=10_000).max_attempts == 10_000


def test_run_at_must_be_aware() -> None:
    error = rejected("run_at", run_at=datetime(2026, 1, 1, 12, 0))
    assert "naive" in error.problem
    rejected("run_at", run_at="2026-01-01T12:00:00Z")


def test_now_must_be_aware() -> None:
    rejected("now", now=datetime(2026, 1, 1))


def test_run_at_is_converted_to_utc() -> None:
    tokyo = timezone(timedelta(hours=9))
    new = prepare_job("t", {}, now=NOW, run_at=datetime(2026, 1, 1, 21, 0, tzinfo=tokyo))
    assert new.scheduled_at == NOW and new.scheduled_at.utcoffset() == timedelta(0)


def test_run_at_and_delay_are_exclusive() -> None:
    rejected("run_at", run_at=NOW, delay=5)


@pytest.mark.parametrize("delay", [-1, float("nan"), float("inf"), "5", True, timedelta(seconds=-1)])
def test_delay(delay: object) -> None:
    rejected("delay", delay=delay)


def test_delay_in_seconds_or_timedelta() -> None:
    assert prepare_job("t", {}, now=NOW, delay=1.5).scheduled_at == NOW + timedelta(seconds=1.5)
    assert prepare_job("t", {}, now=NOW, delay=timedelta(minutes=2)).scheduled_at == NOW + timedelta(minutes=2)
    assert prepare_job("t", {}, now=NOW, delay=0).scheduled_at == NOW


@pytest.mark.parametrize("key", ["", "k" * (IDEMPOTENCY_KEY_MAX_CHARS + 1), "a\x00b", 5, b"bytes"])
def test_idempotency_key(key: object) -> None:
    rejected("idempotency_key", idempotency_key=key)


def test_idempotency_key_accepts_up_to_the_limit() -> None:
    key = "k" * IDEMPOTENCY_KEY_MAX_CHARS
    assert prepare_job("t", {}, now=NOW, idempotency_key=key).idempotency_key == key


def test_payload_errors_name_the_path() -> None:
    error = rejected("payload.items[1].when", payload={"items": [1, {"when": NOW}]})
    assert isinstance(error, PayloadError)


def test_first_bad_field_is_named_in_argument_order() -> None:
    rejected("job_type", job_type="", queue="", priority=True)
    rejected("queue", queue="", priority=True)


def test_validate_seconds_zero_rule() -> None:
    assert validate_seconds(0, "poll_interval") == 0.0
    with pytest.raises(ValidationError) as info:
        validate_seconds(0, "lease_timeout", allow_zero=False)
    assert info.value.field == "lease_timeout"


@pytest.mark.parametrize("worker_id", ["", "w" * 201, "tab\there", None])
def test_worker_id(worker_id: object) -> None:
    with pytest.raises(ValidationError) as info:
        validate_worker_id(worker_id)
    assert info.value.field == "worker_id"
    assert validate_worker_id("host-1-1234-abc123") == "host-1-1234-abc123"


# -- text that is not UTF-8 -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"payload": {"s": "\ud800"}}, "payload.s"),
        ({"payload": {"\udcff": 1}}, "payload"),
        ({"idempotency_key": "k\ud800"}, "idempotency_key"),
        ({"job_type": "emails\udcff"}, "job_type"),
        ({"queue": "q\ud800"}, "queue"),
    ],
)
def test_text_that_is_not_utf8_names_its_field(overrides: dict[str, object], field: str) -> None:
    error = rejected(field, **overrides)
    str(error).encode("utf-8")


def test_a_key_that_is_not_utf8_says_why() -> None:
    error = rejected("idempotency_key", idempotency_key="order-\udc80")
    assert error.problem == "holds a lone surrogate (U+DC80 at index 6), which has no UTF-8 encoding"
