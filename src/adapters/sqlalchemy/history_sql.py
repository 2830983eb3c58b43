"""Attempt history in SQL: the ``history`` column's type, its JSON form, the append every outcome statement makes, and the completed attempt kept in the lease columns.

``history`` is a JSON array on the job row, NULL until the first attempt ends, held as JSON text
on PostgreSQL and SQLite alike.  Each entry is one object::

    {"attempt": 2, "worker": "host-1:4242", "started": ..., "ended": ..., "outcome": "failed",
     "error": "ValueError: ..."}

with times as each database writes them: on PostgreSQL as it puts a ``timestamptz`` into JSON,
ISO 8601 text with the writing session's UTC offset (``"2026-01-01T00:00:00.25+00:00"``: the
instant is exact whatever the session's ``TimeZone``); on SQLite integer microseconds since the
epoch, as its time columns.

**A completion appends nothing.**  The attempt a holder's completion ends (outcome ``completed``,
or ``cancelled`` when a cancellation was requested) is the row's last: its number is
``attempts``, its worker and start stay in ``leased_by`` and ``leased_at`` (the completion clears
only ``lease_token`` and ``lease_expires_at``), its end is ``finished_at`` and its outcome the
row's status.  Readers fold it back (:func:`fold_kept_attempt`): a ``completed`` or ``cancelled``
row whose ``leased_at`` is set reads as a job without a lease whose history ends with that
attempt, exactly the :class:`~tether.domain.job.Job` the domain's ``complete`` gives.  So the
batch completion, the hottest write there is, builds no JSON at all (appending the entry cost
about a tenth of the PostgreSQL drain), and a manual retry of such a cancelled row writes the
entry into ``history`` before it clears the lease columns (:func:`kept_attempt_sql`).  Rows
completed by earlier versions, with the entry appended and the lease columns cleared, read the
same.

Every other outcome (fail, dead-letter, release, snooze, the reaper) appends its entry in the
very statement that ends the attempt (:func:`append_sql`), computed in SQL from the row as it was
before the update (``attempts``, ``leased_by``, ``leased_at``, the cancellation request), so it
costs no extra round trip.  On PostgreSQL a row's first ended attempt is a one-entry array written
as text, its values through ``to_json`` (no ``jsonb`` value is built); a row that has history
already takes the ``jsonb`` path, ``||`` with the oldest entry dropped (``- 0``) only when
:data:`~tether.domain.history.HISTORY_LIMIT` entries are there.  On SQLite ``json_array``,
``json_insert(..., '$[#]', ...)`` and ``json_remove(..., '$[0]')``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator
from tether.domain.history import HISTORY_LIMIT, Attempt, AttemptOutcome, with_attempt
from tether.domain.job import JobStatus
from tether.domain.timeutil import UTC, from_micros, to_micros

#: The outcome of a holder's write when the row carries a cancellation request, else ``{other}``.
_OR_CANCELLED = "CASE WHEN {r}cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE {other} END"


class HistoryJson(TypeDecorator[Any]):
    """The ``history`` column: JSON text on PostgreSQL and SQLite; Python lists of entry objects
    (None: no attempt ended yet)."""

    impl = Text()
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return value
        return json.dumps(value, separators=(",", ":"))

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if isinstance(value, str):
            return json.loads(value)
        return value


_OUTCOMES = {outcome.value: outcome for outcome in AttemptOutcome}


def _time(value: Any) -> datetime | None:
    """An entry's time: integer microseconds (SQLite) or ISO 8601 text with an offset (PostgreSQL)."""
    if value is None:
        return None
    if isinstance(value, int):
        return from_micros(value)
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is UTC else parsed.astimezone(UTC)


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
            outcome=_OUTCOMES[entry["outcome"]],
            error=entry.get("error"),
        )
        for entry in value
    )


def time_value(dialect: str, value: datetime) -> datetime | int:
    """``value`` (aware UTC) as a statement passes it for a history entry on ``dialect``: the
    datetime itself on PostgreSQL (a ``timestamptz``), integer microseconds on SQLite."""
    if dialect == "postgresql":
        return value
    return to_micros(value)


def _stored_time(dialect: str, value: datetime) -> str | int:
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
            "started": None if a.started_at is None else _stored_time(dialect, a.started_at),
            "ended": _stored_time(dialect, a.ended_at),
            "outcome": a.outcome.value,
            "error": a.error,
        }
        for a in history
    ]


#: The statuses whose row may keep its last attempt in the lease columns, and that attempt's outcome.
_KEPT_OUTCOMES = {JobStatus.COMPLETED: AttemptOutcome.COMPLETED, JobStatus.CANCELLED: AttemptOutcome.CANCELLED}


def fold_kept_attempt(
    status: JobStatus, attempts: int, leased_by: str | None, leased_at: datetime | None, finished_at: datetime | None,
    history: tuple[Attempt, ...],
) -> tuple[str | None, datetime | None, tuple[Attempt, ...]]:
    """``(leased_by, leased_at, history)`` of a job as read from its row's values (aware UTC
    datetimes): for a ``completed`` or ``cancelled`` row that kept its completed attempt in the
    lease columns (see the module docstring), no lease and that attempt appended to ``history``
    (bounded as every append is); any other row as it is."""
    outcome = _KEPT_OUTCOMES.get(status) if leased_at is not None else None
    if outcome is None or finished_at is None:
        return leased_by, leased_at, history
    attempt = Attempt(number=attempts, worker_id=leased_by, started_at=leased_at, ended_at=finished_at, outcome=outcome)
    return None, None, with_attempt(history, attempt)


def kept_attempt_sql(dialect: str, row: str = "") -> str:
    """SQL of ``history`` with the completed attempt a ``completed`` or ``cancelled`` row keeps in
    its lease columns written in (outcome: the row's status, ended: ``finished_at``), for a write
    that clears those columns (a manual retry); any other row's ``history`` as it is."""
    r = f"{row}." if row else ""
    ended = f"{r}finished_at"
    appended = append_sql(dialect, outcome=f"{r}status", error="NULL", ended=ended, row=row)
    return (
        f"CASE WHEN {r}leased_at IS NOT NULL AND {r}status IN ('completed', 'cancelled') "
        f"THEN {appended} ELSE {r}history END"
    )


def or_cancelled(other: str, row: str = "") -> str:
    """SQL of an attempt's outcome: ``'cancelled'`` when the row carries a cancellation request,
    else the SQL ``other``; ``row`` is the table's alias in the statement ('' for none)."""
    return _OR_CANCELLED.format(r=f"{row}." if row else "", other=other)


def append_sql(dialect: str, *, outcome: str, error: str, ended: str, row: str = "") -> str:
    """SQL of ``history`` with the row's running attempt appended as ended, trimmed to
    :data:`~tether.domain.history.HISTORY_LIMIT` entries (see the module docstring).

    The common cases cost least: a row without history (its first attempt) builds a one-entry
    array, a row below the bound appends; only a full one drops its oldest entry first.

    Args:
        dialect: ``"postgresql"`` or ``"sqlite"``.
        outcome, error: SQL of the entry's outcome and error text (``NULL`` for none).
        ended: SQL of the end time: a ``timestamptz`` on PostgreSQL, integer microseconds on SQLite.
        row: the table's alias in the statement ('' for none).
    """
    r = f"{row}." if row else ""
    if dialect == "postgresql":
        entry = (  # the entry as JSON text; to_json quotes and escapes each value ('null' for NULL)
            f"'{{\"attempt\":' || {r}attempts || ',\"worker\":' || COALESCE(CAST(to_json({r}leased_by) AS text), 'null') "
            f"|| ',\"started\":' || COALESCE(CAST(to_json({r}leased_at) AS text), 'null') "
            f"|| ',\"ended\":' || CAST(to_json({ended}) AS text) "
            f"|| ',\"outcome\":' || CAST(to_json(CAST({outcome} AS text)) AS text) "
            f"|| ',\"error\":' || COALESCE(CAST(to_json(CAST({error} AS text)) AS text), 'null') || '}}'"
        )
        stored = f"CAST({r}history AS jsonb)"
        return (
            f"CASE WHEN {r}history IS NULL THEN '[' || {entry} || ']' "
            f"ELSE CAST((CASE WHEN jsonb_array_length({stored}) < {HISTORY_LIMIT} THEN {stored} "
            f"ELSE {stored} - 0 END) || jsonb_build_array(CAST({entry} AS jsonb)) AS text) END"
        )
    entry = (
        f"json_object('attempt', {r}attempts, 'worker', {r}leased_by, 'started', {r}leased_at, "
        f"'ended', {ended}, 'outcome', {outcome}, 'error', {error})"
    )
    return (
        f"CASE WHEN {r}history IS NULL THEN json_array({entry}) "
        f"WHEN json_array_length({r}history) < {HISTORY_LIMIT} THEN json_insert({r}history, '$[#]', {entry}) "
        f"ELSE json_insert(json_remove({r}history, '$[0]'), '$[#]', {entry}) END"
    )


__all__ = [
    "HistoryJson",
    "append_sql",
    "fold_kept_attempt",
    "history_from_json",
    "history_to_json",
    "kept_attempt_sql",
    "or_cancelled",
    "time_value",
]
