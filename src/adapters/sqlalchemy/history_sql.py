"""Attempt history in SQL: the ``history`` column's type, its JSON form, and the append every outcome statement makes.

``history`` is a JSON array on the job row, NULL until the first attempt ends: ``jsonb`` on
PostgreSQL, JSON text on SQLite.  Each entry is one object::

    {"attempt": 2, "worker": "host-1:4242", "started": ..., "ended": ..., "outcome": "failed",
     "error": "ValueError: ..."}

with times as each database stores its times: ISO 8601 UTC text with microseconds on PostgreSQL
(``"2026-01-01T00:00:00.000000+00:00"``), integer microseconds since the epoch on SQLite.

The entry is appended by the very statement that ends the attempt (:func:`append_sql`: a fenced
outcome write, a batch completion, the reaper), computed in SQL from the row as it was before the
update (``attempts``, ``leased_by``, ``leased_at``, the cancellation request), so it costs no
extra round trip: on PostgreSQL a ``jsonb`` concatenation, with the oldest entry dropped
(``history - 0``) only when :data:`~tether.domain.history.HISTORY_LIMIT` entries are there
already; on SQLite ``json_insert(..., '$[#]', ...)`` and ``json_remove(..., '$[0]')``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine
from tether.domain.history import HISTORY_LIMIT, Attempt, AttemptOutcome
from tether.domain.timeutil import UTC, from_micros, to_micros

#: ``{col}`` (a timestamptz) as ``datetime.isoformat(timespec="microseconds")`` of it in UTC.
_PG_ISO = "to_char({col} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US') || '+00:00'"

#: The outcome of a holder's write when the row carries a cancellation request, else ``{other}``.
_OR_CANCELLED = "CASE WHEN {r}cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE {other} END"


class HistoryJson(TypeDecorator[Any]):
    """The ``history`` column: ``jsonb`` on PostgreSQL, JSON text on SQLite; Python lists of entry
    objects either way (None: no attempt ended yet)."""

    impl = Text()
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        return json.dumps(value, separators=(",", ":"))

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if isinstance(value, str):
            return json.loads(value)
        return value


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, int):
        return from_micros(value)
    return datetime.fromisoformat(value).astimezone(UTC)


def history_from_json(value: Any) -> tuple[Attempt, ...]:
    """The :class:`~tether.domain.history.Attempt` entries of a ``history`` value (a list of
    entry objects, its JSON text, or None)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = json.loads(value)
    return tuple(
        Attempt(
            number=int(entry["attempt"]),
            worker_id=entry.get("worker"),
            started_at=_time(entry.get("started")),
            ended_at=_time(entry["ended"]),  # type: ignore[arg-type]
            outcome=AttemptOutcome(entry["outcome"]),
            error=entry.get("error"),
        )
        for entry in value
    )


def time_value(dialect: str, value: datetime) -> str | int:
    """``value`` (aware UTC) as a history entry stores it on ``dialect``."""
    if dialect == "postgresql":
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    return to_micros(value)


def history_to_json(history: tuple[Attempt, ...], dialect: str) -> list[dict[str, Any]] | None:
    """The ``history`` value of ``history`` on ``dialect`` (None when empty)."""
    if not history:
        return None
    return [
        {
            "attempt": a.number,
            "worker": a.worker_id,
            "started": None if a.started_at is None else time_value(dialect, a.started_at),
            "ended": time_value(dialect, a.ended_at),
            "outcome": a.outcome.value,
            "error": a.error,
        }
        for a in history
    ]


def or_cancelled(other: str, row: str = "") -> str:
    """SQL of an attempt's outcome: ``'cancelled'`` when the row carries a cancellation request,
    else the SQL ``other``; ``row`` is the table's alias in the statement ('' for none)."""
    return _OR_CANCELLED.format(r=f"{row}." if row else "", other=other)


def append_sql(dialect: str, *, outcome: str, error: str, ended: str, row: str = "", named: bool = False) -> str:
    """SQL of ``history`` with the row's running attempt appended as ended, trimmed to
    :data:`~tether.domain.history.HISTORY_LIMIT` entries (see the module docstring).

    Args:
        dialect: ``"postgresql"`` or ``"sqlite"``.
        outcome, error: SQL of the entry's outcome and error text (``NULL`` for none).
        ended: SQL of the end time in the entry's form (:func:`time_value`), usually a parameter.
        row: the table's alias in the statement ('' for none).
        named: the statement goes through SQLAlchemy's ``text()`` (``:name`` parameters), so the
            colons of the SQL's own literals are escaped.
    """
    r = f"{row}." if row else ""
    if dialect == "postgresql":
        started = _PG_ISO.format(col=f"{r}leased_at")
        if named:
            started = started.replace(":", "\\:")
        current = f"coalesce({r}history, CAST('[]' AS jsonb))"
        entry = (
            f"jsonb_build_object('attempt', {r}attempts, 'worker', {r}leased_by, 'started', {started}, "
            f"'ended', {ended}, 'outcome', {outcome}, 'error', {error})"
        )
        return (
            f"(CASE WHEN jsonb_array_length({current}) >= {HISTORY_LIMIT} THEN {current} - 0 ELSE {current} END) "
            f"|| jsonb_build_array({entry})"
        )
    current = f"coalesce({r}history, '[]')"
    entry = (
        f"json_object('attempt', {r}attempts, 'worker', {r}leased_by, 'started', {r}leased_at, "
        f"'ended', {ended}, 'outcome', {outcome}, 'error', {error})"
    )
    return (
        f"json_insert(CASE WHEN json_array_length({current}) >= {HISTORY_LIMIT} THEN json_remove({current}, '$[0]') "
        f"ELSE {current} END, '$[#]', {entry})"
    )


__all__ = [
    "HistoryJson",
    "append_sql",
    "history_from_json",
    "history_to_json",
    "or_cancelled",
    "time_value",
]
