"""Rows of ``tether_jobs`` to :class:`~tether.domain.job.Job` and back; rows of ``tether_workers`` to
:class:`~tether.domain.workers.WorkerEntry` and back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tether.adapters.sqlalchemy.history_sql import fold_kept_attempt, history_from_json, history_to_json
from tether.domain.job import Job, JobStatus, NewJob
from tether.domain.schedules import ScheduleState
from tether.domain.timeutil import UTC
from tether.domain.transitions import create
from tether.domain.workers import WorkerEntry


def row_to_job(row: Any) -> Job:
    """The :class:`Job` of a ``tether_jobs`` row (a Row or mapping with every column); a completed
    attempt kept in the lease columns is folded into the history
    (:func:`~tether.adapters.sqlalchemy.history_sql.fold_kept_attempt`)."""
    m: Mapping[str, Any] = row._mapping if hasattr(row, "_mapping") else row
    status = JobStatus(m["status"])
    attempts = int(m["attempts"])
    leased_by, leased_at, history = fold_kept_attempt(
        status, attempts, m["leased_by"], m["leased_at"], m["finished_at"], history_from_json(m["history"])
    )
    return Job(
        id=int(m["id"]),
        job_type=m["job_type"],
        queue=m["queue"],
        payload_json=m["payload"],
        priority=int(m["priority"]),
        status=status,
        attempts=attempts,
        max_attempts=int(m["max_attempts"]),
        scheduled_at=m["scheduled_at"],
        created_at=m["created_at"],
        idempotency_key=m["idempotency_key"],
        lease_token=m["lease_token"],
        leased_by=leased_by,
        leased_at=leased_at,
        lease_expires_at=m["lease_expires_at"],
        last_error=m["last_error"],
        finished_at=m["finished_at"],
        cancel_requested_at=m["cancel_requested_at"],
        history=history,
        headers_json=m["headers"],
        concurrency_key=m["concurrency_key"],
    )


def _plain_utc(value: datetime) -> datetime:
    """``value`` as the database hands a timestamp back: a plain ``datetime`` in UTC."""
    if type(value) is datetime and value.tzinfo is UTC:
        return value
    value = value.astimezone(UTC)
    return datetime(
        value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond, tzinfo=UTC
    )


def inserted_job(new_job: NewJob, job_id: int, now: datetime) -> Job:
    """The :class:`Job` that :func:`row_to_job` would give for the row just inserted from
    ``new_job`` with id ``job_id`` at ``now`` (queued, no attempts), built without reading it back.

    Every value is as the database returns it: plain ``str`` and ``int``, aware UTC datetimes
    (text and ``timestamptz``/microsecond columns store these exactly).
    """
    n = new_job
    if (
        type(n.job_type) is str
        and type(n.queue) is str
        and type(n.payload_json) is str
        and type(n.priority) is int
        and type(n.max_attempts) is int
        and (n.idempotency_key is None or type(n.idempotency_key) is str)
        and (n.headers_json is None or type(n.headers_json) is str)
        and (n.concurrency_key is None or type(n.concurrency_key) is str)
        and type(n.scheduled_at) is datetime
        and n.scheduled_at.tzinfo is UTC
        and type(now) is datetime
        and now.tzinfo is UTC
    ):
        return create(n, job_id=job_id, now=now)
    plain = NewJob(
        job_type=str(n.job_type),
        queue=str(n.queue),
        payload_json=str(n.payload_json),
        priority=int(n.priority),
        max_attempts=int(n.max_attempts),
        scheduled_at=_plain_utc(n.scheduled_at),
        idempotency_key=None if n.idempotency_key is None else str(n.idempotency_key),
        headers_json=None if n.headers_json is None else str(n.headers_json),
        concurrency_key=None if n.concurrency_key is None else str(n.concurrency_key),
    )
    return create(plain, job_id=job_id, now=_plain_utc(now))


def new_job_values(new_job: NewJob, now: datetime) -> dict[str, Any]:
    """Column values of a freshly enqueued job (``queued``, no attempts, created at ``now``)."""
    return {
        "job_type": new_job.job_type,
        "queue": new_job.queue,
        "payload": new_job.payload_json,
        "priority": new_job.priority,
        "status": JobStatus.QUEUED.value,
        "attempts": 0,
        "max_attempts": new_job.max_attempts,
        "scheduled_at": new_job.scheduled_at,
        "created_at": now,
        "idempotency_key": new_job.idempotency_key,
        "headers": new_job.headers_json,
        "concurrency_key": new_job.concurrency_key,
    }


def job_state_values(job: Job, dialect: str) -> dict[str, Any]:
    """The mutable columns of ``job`` (everything but id and the enqueue-time fields), its
    history in the form of ``dialect`` (``"postgresql"``, ``"sqlite"``)."""
    return {
        "status": job.status.value,
        "attempts": job.attempts,
        "scheduled_at": job.scheduled_at,
        "lease_token": job.lease_token,
        "leased_by": job.leased_by,
        "leased_at": job.leased_at,
        "lease_expires_at": job.lease_expires_at,
        "last_error": job.last_error,
        "finished_at": job.finished_at,
        "cancel_requested_at": job.cancel_requested_at,
        "history": history_to_json(job.history, dialect),
    }


def row_to_worker(row: Any) -> WorkerEntry:
    """The :class:`WorkerEntry` of a ``tether_workers`` row (``gone`` left False)."""
    m: Mapping[str, Any] = row._mapping if hasattr(row, "_mapping") else row
    return WorkerEntry(
        worker_id=m["worker_id"],
        host=m["host"],
        pid=int(m["pid"]),
        queues=None if m["queues"] is None else json.loads(m["queues"]),
        job_types=json.loads(m["job_types"]),
        concurrency=int(m["concurrency"]),
        version=m["version"],
        dispatcher=m["dispatcher"],
        heartbeat_interval=float(m["heartbeat_interval"]),
        started_at=m["started_at"],
        last_seen_at=m["last_seen_at"],
    )


def worker_values(entry: WorkerEntry) -> dict[str, Any]:
    """Column values of ``entry`` (every column; names as JSON arrays)."""
    return {
        "worker_id": entry.worker_id,
        "host": entry.host,
        "pid": entry.pid,
        "queues": None if entry.queues is None else json.dumps(list(entry.queues)),
        "job_types": json.dumps(list(entry.job_types)),
        "concurrency": entry.concurrency,
        "version": entry.version,
        "dispatcher": entry.dispatcher,
        "heartbeat_interval": float(entry.heartbeat_interval),
        "started_at": entry.started_at,
        "last_seen_at": entry.last_seen_at,
    }


def row_to_schedule(row: Any) -> ScheduleState:
    """The :class:`ScheduleState` of a ``tether_schedules`` row, with ``last_job_status`` from a
    ``last_job_status`` column when the row has one (``live`` left True)."""
    m: Mapping[str, Any] = row._mapping if hasattr(row, "_mapping") else row
    status = m.get("last_job_status")
    return ScheduleState(
        name=m["name"],
        job_type=m["job_type"],
        queue=m["queue"],
        spec=m["spec"],
        tz=m["tz"],
        fingerprint=m["fingerprint"],
        next_tick_at=m["next_tick_at"],
        declared_by=m["declared_by"],
        declared_at=m["declared_at"],
        declared_until=m["declared_until"],
        last_tick_at=m["last_tick_at"],
        last_job_id=None if m["last_job_id"] is None else int(m["last_job_id"]),
        last_job_status=None if status is None else JobStatus(status),
    )


def schedule_declaration_values(state: ScheduleState) -> dict[str, Any]:
    """The columns a declaration writes (everything but the mark: ``last_tick_at``, ``last_job_id``)."""
    return {
        "name": state.name,
        "job_type": state.job_type,
        "queue": state.queue,
        "spec": state.spec,
        "tz": state.tz,
        "fingerprint": state.fingerprint,
        "next_tick_at": state.next_tick_at,
        "declared_by": state.declared_by,
        "declared_at": state.declared_at,
        "declared_until": state.declared_until,
    }


__all__ = [
    "inserted_job",
    "job_state_values",
    "new_job_values",
    "row_to_job",
    "row_to_schedule",
    "row_to_worker",
    "schedule_declaration_values",
    "worker_values",
]
