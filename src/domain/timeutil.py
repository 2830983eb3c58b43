"""Time rules: every datetime Tether stores or compares is timezone-aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime

from tether.domain.errors import ValidationError


def ensure_utc(value: object, field: str) -> datetime:
    """Return ``value`` converted to UTC.

    Raises:
        ValidationError: ``value`` is not a datetime, or is naive (no tzinfo): a naive time
            could mean any zone, so it is refused rather than guessed; or it is outside the
            years 1-9999 once in UTC (9999-12-31 23:00 at UTC-5 is year 10000 in UTC).
    """
    if not isinstance(value, datetime):
        raise ValidationError(field, f"must be a timezone-aware datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValidationError(field, "must be timezone-aware (naive datetimes are rejected; use datetime.now(timezone.utc))")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValidationError(field, f"{value.isoformat()} is outside the years 1-9999 in UTC") from None


def to_micros(value: datetime) -> int:
    """Whole microseconds since the Unix epoch of an aware datetime (the SQLite storage form)."""
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    """The aware UTC datetime of ``value`` microseconds since the Unix epoch."""
    from datetime import timedelta

    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(value))


__all__ = ["UTC", "ensure_utc", "from_micros", "to_micros"]  # UTC re-exported: the one every layer uses
