"""prepare_job and the field validators: every rejection names the field; nothing half-built."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest
from tether.domain.errors import PayloadError, TetherError, ValidationError
from tether.domain.job import NewJob
from tether.domain.limits import MAX_ATTEMPTS_LIMIT, MAX_INT_DIGITS, MAX_SECONDS, PRIORITY_MAX, PRIORITY_MIN
from tether.domain.timeutil import ensure_utc
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
        assert "from 1 to 10,000" in error.problem


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


# -- numbers and times: the ranges of tether.domain.limits ---------------------------------------
MINUS_5 = timezone(timedelta(hours=-5))


@pytest.mark.parametrize(
    ("delay", "problem"),
    [
        (1e15, "must be at most 3,155,760,000 seconds (100 years), got 1e+15"),
        (timedelta.max, "must be at most 3,155,760,000 seconds (100 years), got 8.64e+13"),
        (MAX_SECONDS + 1, "must be at most 3,155,760,000 seconds (100 years), got 3.15576e+09"),
        (timedelta(days=36_525, microseconds=1), "must be at most 3,155,760,000 seconds (100 years), got 3.15576e+09"),
        (10**400, "must be a finite number of seconds, got an integer of 401 digits"),
    ],
    ids=["1e15", "timedelta.max", "max+1", "timedelta-max+1us", "huge-int"],
)
def test_a_delay_over_100_years_is_refused(delay: object, problem: str) -> None:
    assert rejected("delay", delay=delay).problem == problem


def test_a_delay_of_100_years_is_accepted() -> None:
    # 36,525 days: 2100 is no leap year, so a day past the calendar's 100 years
    assert prepare_job("t", {}, now=NOW, delay=MAX_SECONDS).scheduled_at == datetime(2126, 1, 2, 12, 0, tzinfo=UTC)
    assert prepare_job("t", {}, now=NOW, delay=timedelta(days=36_525)).scheduled_at == datetime(2126, 1, 2, 12, 0, tzinfo=UTC)


def test_a_delay_that_would_pass_the_year_9999_is_refused() -> None:
    late = datetime(9999, 6, 1, tzinfo=UTC)
    error = rejected("delay", now=late, delay=365 * 86_400.0)
    assert error.problem == "3.1536e+07 seconds from 9999-06-01T00:00:00+00:00 is past the year 9999"
    assert prepare_job("t", {}, now=late, delay=86_400).scheduled_at == datetime(9999, 6, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    ("run_at", "problem"),
    [
        (datetime(9999, 12, 31, 23, 0, tzinfo=MINUS_5), "9999-12-31T23:00:00-05:00 is outside the years 1-9999 in UTC"),
        (datetime.max.replace(tzinfo=MINUS_5), "9999-12-31T23:59:59.999999-05:00 is outside the years 1-9999 in UTC"),
        (datetime(1, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=5))), "0001-01-01T01:00:00+05:00 is outside the years 1-9999 in UTC"),
        (datetime(9999, 12, 31, tzinfo=UTC), "9999-12-31T00:00:00+00:00 is more than 100 years from now (2026-01-01T12:00:00+00:00)"),
        (datetime(2126, 1, 2, 12, 0, 0, 1, tzinfo=UTC), "2126-01-02T12:00:00.000001+00:00 is more than 100 years from now (2026-01-01T12:00:00+00:00)"),
        (datetime(1926, 1, 1, 11, 59, 59, 999_999, tzinfo=UTC), "1926-01-01T11:59:59.999999+00:00 is more than 100 years from now (2026-01-01T12:00:00+00:00)"),
    ],
    ids=["9999-at-utc-5", "datetime.max-at-utc-5", "year-1-at-utc+5", "9999-utc", "100y+1us", "100y-1us-ago"],
)
def test_a_run_at_out_of_range_is_refused(run_at: datetime, problem: str) -> None:
    assert rejected("run_at", run_at=run_at).problem == problem


def test_a_run_at_within_100_years_either_side_is_accepted() -> None:
    ahead = datetime(2126, 1, 2, 7, 0, tzinfo=MINUS_5)  # 12:00 UTC, exactly 36,525 days ahead
    assert prepare_job("t", {}, now=NOW, run_at=ahead).scheduled_at == datetime(2126, 1, 2, 12, 0, tzinfo=UTC)
    ago = datetime(1926, 1, 1, 12, 0, tzinfo=UTC)  # exactly 36,525 days before
    assert prepare_job("t", {}, now=NOW, run_at=ago).scheduled_at == ago


@pytest.mark.parametrize("field", ["lease_timeout", "reap_interval", "older_than"])
def test_every_duration_is_at_most_100_years(field: str) -> None:
    assert validate_seconds(MAX_SECONDS, field) == 3_155_760_000.0
    for value in (MAX_SECONDS + 0.5, 1e15, timedelta.max):
        with pytest.raises(ValidationError) as info:
            validate_seconds(value, field)
        assert info.value.field == field


def test_ensure_utc_names_the_field_of_a_time_outside_utc() -> None:
    with pytest.raises(ValidationError) as info:
        ensure_utc(datetime.min.replace(tzinfo=timezone(timedelta(hours=1))), "retry_at")
    assert (info.value.field, info.value.problem) == ("retry_at", "0001-01-01T00:00:00+01:00 is outside the years 1-9999 in UTC")


def test_the_limits_are_the_documented_values() -> None:
    assert (PRIORITY_MIN, PRIORITY_MAX, MAX_ATTEMPTS_LIMIT) == (-2_147_483_648, 2_147_483_647, 10_000)
    assert MAX_SECONDS == 3_155_760_000 and MAX_INT_DIGITS == 4_300


class _Level(int):
    """An int subclass (as an IntEnum would be): the adapters convert it, its range still counts."""


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"priority": 2**40}, "priority", "must be an integer from -2,147,483,648 to 2,147,483,647, got 1099511627776"),
        ({"priority": -(2**31) - 1}, "priority", "must be an integer from -2,147,483,648 to 2,147,483,647, got -2147483649"),
        ({"priority": _Level(2**31)}, "priority", "must be an integer from -2,147,483,648 to 2,147,483,647, got 2147483648"),
        ({"max_attempts": 0}, "max_attempts", "must be an integer from 1 to 10,000, got 0"),
        ({"max_attempts": False}, "max_attempts", "must be an integer from 1 to 10,000, got False"),
        ({"max_attempts": 10**30}, "max_attempts", "must be an integer from 1 to 10,000, got 1000000000000000000000000000000"),
    ],
)
def test_a_new_job_built_without_prepare_job_holds_only_what_the_columns_hold(
    change: dict[str, object], field: str, problem: str
) -> None:
    """However a NewJob is made (evolved, or built by hand), no store is handed a number its
    INTEGER columns cannot hold (memory stored 2**40; SQLite raised OverflowError for 2**70;
    PostgreSQL said the store was unavailable)."""
    new = prepare_job("t", {}, now=NOW)
    with pytest.raises(ValidationError) as info:
        attrs.evolve(new, **change)
    assert (info.value.field, info.value.problem) == (field, problem)
    with pytest.raises(ValidationError) as info:
        NewJob(**{**attrs.asdict(new), **change})
    assert info.value.field == field
    edges = attrs.evolve(new, priority=PRIORITY_MIN, max_attempts=MAX_ATTEMPTS_LIMIT)
    assert (edges.priority, edges.max_attempts) == (-(2**31), 10_000)
    assert attrs.evolve(new, priority=True).priority is True  # odd int types in range: the adapters' to convert
