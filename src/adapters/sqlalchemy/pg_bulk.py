"""Bulk enqueue on PostgreSQL: the statements and their parameters.

Two statement shapes, chosen per batch by :func:`shared_fields`:

- **alike** (the common bulk case: one job type, queue, priority, max attempts and due time, no
  idempotency key): the shared values are scalar parameters and the payloads one JSON array of
  strings, ``json_array_elements_text(:payloads) WITH ORDINALITY``; no ``ON CONFLICT`` (a row
  without a key conflicts with nothing) and the new ids come back as one sorted ``bigint[]``
  (``array_agg`` over the ``RETURNING`` rows), not one result row per job.  Compared with the
  general shape this halves the JSON the server parses and the client builds, and the rows
  sent back (measured in bench/pg_drain.py; docs/benchmarks.md).
- **general** (anything else): one ``json_to_recordset`` document of every row, with
  ``ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`` only when some
  row has a key.

Both insert the rows in input order (``ORDER BY`` the ordinality), so the identities, drawn from
the column's sequence as the rows are inserted, ascend with the input: sorted ids map back to the
input by position.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from tether.adapters.sqlalchemy.schema import KEYED_PREDICATE
from tether.domain.job import EnqueueResult, Job, JobStatus, NewJob
from tether.domain.timeutil import UTC

#: Compact JSON with non-ASCII text kept as is (the server decodes it back to the same text).
_DOCUMENT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

_COLUMNS = ("job_type, queue, payload, priority, status, attempts, max_attempts, scheduled_at, created_at, "
            "idempotency_key")


class SharedFields(NamedTuple):
    """The values every job of an "alike" batch shares, as exact ``str``/``int``/aware-UTC types."""

    job_type: str
    queue: str
    priority: int
    max_attempts: int
    scheduled_at: datetime


def shared_fields(new_jobs: Sequence[NewJob], now: datetime) -> SharedFields | None:
    """The fields all of ``new_jobs`` share when the batch can take the "alike" statement: no
    idempotency key, no headers, no concurrency key, exact-``str`` payloads, and one job type, queue, priority, max attempts and
    ``scheduled_at``; else None (the general statement handles it).

    The shared values must be of the exact types the database hands back (``str``, ``int``, a
    ``datetime`` in :data:`~tether.domain.timeutil.UTC`), so the jobs built from them equal what
    :meth:`get` reads; the others must equal them (a ``scheduled_at`` equal as an instant stores
    the same ``timestamptz``).
    """
    if not new_jobs or not (type(now) is datetime and now.tzinfo is UTC):
        return None
    first = new_jobs[0]
    job_type, queue, priority, attempts, due = (
        first.job_type, first.queue, first.priority, first.max_attempts, first.scheduled_at)
    if not (type(job_type) is str and type(queue) is str and type(priority) is int and type(attempts) is int
            and type(due) is datetime and due.tzinfo is UTC):
        return None
    for n in new_jobs:  # identity first: bulk requests share the very same objects
        if (n.idempotency_key is not None or n.headers_json is not None or n.concurrency_key is not None
                or type(n.payload_json) is not str):
            return None
        value: object = n.job_type
        if value is not job_type and not (type(value) is str and value == job_type):
            return None
        value = n.queue
        if value is not queue and not (type(value) is str and value == queue):
            return None
        value = n.priority
        if value is not priority and not (type(value) is int and value == priority):
            return None
        value = n.max_attempts
        if value is not attempts and not (type(value) is int and value == attempts):
            return None
        if n.scheduled_at is not due and n.scheduled_at != due:
            return None
    return SharedFields(job_type, queue, priority, attempts, due)


def alike_statement(table: str) -> str:
    """The "alike" insert into ``table`` (a quoted, schema-qualified name); parameters ``:t``, ``:q``,
    ``:r``, ``:m``, ``:s`` (the shared fields), ``:now`` and ``:payloads`` (:func:`alike_params`).
    One row back: the new ids, ascending."""
    return (
        f"WITH inserted AS (INSERT INTO {table} ({_COLUMNS}) "
        "SELECT CAST(:t AS text), CAST(:q AS text), u.p, CAST(:r AS integer), 'queued', 0, CAST(:m AS integer), "
        "CAST(:s AS timestamptz), CAST(:now AS timestamptz), NULL "
        "FROM json_array_elements_text(CAST(:payloads AS json)) WITH ORDINALITY AS u(p, n) "
        "ORDER BY u.n RETURNING id) "
        "SELECT array_agg(id ORDER BY id) FROM inserted"
    )


def alike_params(new_jobs: Sequence[NewJob], shared: SharedFields, now: datetime) -> dict[str, Any]:
    """The parameters of :func:`alike_statement` for ``new_jobs``."""
    return {
        "t": shared.job_type, "q": shared.queue, "r": shared.priority, "m": shared.max_attempts,
        "s": shared.scheduled_at, "now": now,
        "payloads": _DOCUMENT.encode([n.payload_json for n in new_jobs]),
    }


def alike_results(new_jobs: Sequence[NewJob], ids: Sequence[int], shared: SharedFields,
                  now: datetime) -> list[EnqueueResult]:
    """One ``created`` result per job, in input order, with ids ascending: each :class:`Job` is
    what :func:`~tether.domain.transitions.create` makes of its NewJob (queued, no attempts, no
    lease), built from the shared fields (exact types, see :func:`shared_fields`)."""
    queued = JobStatus.QUEUED
    job_type, queue, priority, attempts, due = shared
    return [
        EnqueueResult(Job(job_id, job_type, queue, n.payload_json, priority, queued, 0, attempts, due, now), True)
        for n, job_id in zip(new_jobs, ids)
    ]


def general_statement(table: str, *, keyed: bool) -> str:
    """The general insert into ``table``: one ``json_to_recordset`` document (:func:`general_params`);
    ``keyed``: key conflicts are skipped (``ON CONFLICT (idempotency_key) WHERE idempotency_key IS
    NOT NULL DO NOTHING``: the conflict target is the partial unique index of :mod:`.schema`).
    Rows back: ``(id, idempotency_key)`` of each row inserted."""
    return (
        f"INSERT INTO {table} ({_COLUMNS}, headers, concurrency_key) "
        "SELECT u.t, u.q, u.p, u.r, 'queued', 0, u.m, COALESCE(u.s, CAST(:now AS timestamptz)), "
        "CAST(:now AS timestamptz), u.k, u.h, u.c "
        "FROM ROWS FROM (json_to_recordset(CAST(:rows AS json)) AS (t text, q text, p text, "
        "r integer, m integer, s timestamptz, k text, h text, c text)) WITH ORDINALITY AS u(t, q, p, r, m, s, k, h, c, n) "
        "ORDER BY u.n " + (f"ON CONFLICT (idempotency_key) WHERE {KEYED_PREDICATE} DO NOTHING " if keyed else "")
        + "RETURNING id, idempotency_key"
    )


def general_params(new_jobs: Sequence[NewJob], now: datetime) -> tuple[dict[str, Any], bool]:
    """The parameters of :func:`general_statement` and whether any row has an idempotency key.

    Payloads are JSON strings holding the canonical text (no NUL: the domain rejects it); times
    are ISO 8601 with microseconds and offset; a ``scheduled_at`` equal to ``now`` is left out
    (``COALESCE`` to ``:now``), as is a missing key, header text or concurrency key (null)."""
    rows: list[dict[str, Any]] = []
    keyed = False
    for new_job in new_jobs:
        row = {"t": new_job.job_type, "q": new_job.queue, "p": new_job.payload_json, "r": new_job.priority,
               "m": new_job.max_attempts}
        if new_job.scheduled_at != now:
            row["s"] = new_job.scheduled_at.isoformat()
        if new_job.idempotency_key is not None:
            row["k"] = new_job.idempotency_key
            keyed = True
        if new_job.headers_json is not None:
            row["h"] = new_job.headers_json
        if new_job.concurrency_key is not None:
            row["c"] = new_job.concurrency_key
        rows.append(row)
    return {"rows": _DOCUMENT.encode(rows), "now": now}, keyed


__all__ = ["SharedFields", "alike_params", "alike_results", "alike_statement", "general_params",
           "general_statement", "shared_fields"]
