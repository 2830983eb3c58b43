"""Writes on a running job under its lease token: complete (one or many), fail, dead-letter, heartbeat, release, snooze.

Each is one compare-and-set statement::

    UPDATE tether_jobs SET ... WHERE id = :id AND status = 'running' AND lease_token = :token
    RETURNING *

No row back means :class:`~tether.domain.errors.LeaseLost` and nothing changed.  ``fail`` decides
retrying vs dead in SQL (``attempts < max_attempts`` and a ``retry_at`` given), on the row as it is
at the moment of the write.  Every outcome (not the heartbeat) records ``cancelled`` instead when
the row carries a cancellation request (``CASE WHEN cancel_requested_at IS NOT NULL``, in the same
statement: :func:`~tether.domain.transitions.cancelled_outcome`), and appends the attempt it ends
to ``history`` (:func:`.history_sql.append_sql`, same statement), except a completion, whose
attempt stays in ``leased_by``/``leased_at`` (:mod:`.history_sql`).  When the connection dies and
the commit's outcome is unknown, the row is read back: still running under the token means the
write did not land (it is sent again); the intended state (or ``cancelled`` at this write's
``now``) means it did; anything else means someone else moved the job (LeaseLost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from sqlalchemy import and_, bindparam, case, null, select, text, update
from sqlalchemy.engine import Connection, Row
from tether.adapters.sqlalchemy.history_sql import append_sql, or_cancelled, time_value
from tether.adapters.sqlalchemy.mapping import row_to_job
from tether.adapters.sqlalchemy.reads import SqlReads
from tether.adapters.sqlalchemy.schema import status_is
from tether.adapters.sqlalchemy.transactions import _UnknownOutcome
from tether.domain.errors import LeaseLost, StorageUnavailable
from tether.domain.failure import sanitize_text
from tether.domain.history import AttemptOutcome, attempt_error, failure_outcomes
from tether.domain.job import Job, JobStatus
from tether.domain.timeutil import ensure_utc
from tether.domain.validation import validate_seconds

#: The SET values that clear a job's lease (every write that takes a job out of ``running``).
NO_LEASE: dict[str, Any] = {"lease_token": None, "leased_by": None, "leased_at": None, "lease_expires_at": None}
#: What a completion clears: the lease's token and expiry.  The completed attempt's worker and start
#: stay in ``leased_by``/``leased_at`` as the row's last history entry (:mod:`.history_sql`).
COMPLETED_LEASE: dict[str, Any] = {"lease_token": None, "lease_expires_at": None}


class SqlFencedWrites(SqlReads):
    """``complete``, ``complete_many``, ``fail``, ``dead_letter``, ``heartbeat`` and ``release``."""

    _no_lease: ClassVar[dict[str, Any]] = NO_LEASE

    def _fenced_statement(self, kind: str) -> Any:
        """The cached ``UPDATE ... WHERE id = :p_id AND status = 'running' AND lease_token = :p_token
        RETURNING *`` of a fenced write of ``kind`` (complete, retry, dead, heartbeat, snooze)."""
        stmt = self._statements.get(("fenced", kind))
        if stmt is not None:
            return stmt
        t = self.table
        now = bindparam("p_now", type_=t.c.finished_at.type)
        error = bindparam("p_error", type_=t.c.last_error.type)
        requested = t.c.cancel_requested_at.is_not(None)  # an operator's cancel: the outcome is cancelled
        retry = and_(t.c.cancel_requested_at.is_(None), t.c.attempts < t.c.max_attempts)
        cancelled = JobStatus.CANCELLED.value
        if kind == "complete":  # the attempt stays in the lease columns: no history written (see .history_sql)
            values = {
                "status": case((requested, cancelled), else_=JobStatus.COMPLETED.value),
                "finished_at": now,
                **COMPLETED_LEASE,
            }
        elif kind == "retry":  # retrying at p_retry_at while attempts are left, else dead (decided on the row)
            values = {
                "status": case(
                    (requested, cancelled), (retry, JobStatus.RETRYING.value), else_=JobStatus.DEAD.value
                ),
                "scheduled_at": case(
                    (retry, bindparam("p_retry_at", type_=t.c.scheduled_at.type)), else_=t.c.scheduled_at
                ),
                "finished_at": case((retry, null()), else_=now),
                "last_error": error,
                **self._no_lease,
            }
        elif kind == "dead":
            values = {
                "status": case((requested, cancelled), else_=JobStatus.DEAD.value),
                "finished_at": now,
                "last_error": error,
                **self._no_lease,
            }
        elif kind == "heartbeat":  # never shortens the lease
            expires = bindparam("p_expires", type_=t.c.lease_expires_at.type)
            values = {"lease_expires_at": case((t.c.lease_expires_at > expires, t.c.lease_expires_at), else_=expires)}
        elif kind == "snooze":  # queued at p_until, the attempt given back (a release: p_until = p_now)
            values = {
                "status": case((requested, cancelled), else_=JobStatus.QUEUED.value),
                "attempts": case((requested, t.c.attempts), (t.c.attempts > 0, t.c.attempts - 1), else_=0),
                "scheduled_at": case(
                    (requested, t.c.scheduled_at), else_=bindparam("p_until", type_=t.c.scheduled_at.type)
                ),
                "finished_at": case((requested, now), else_=t.c.finished_at),
                **self._no_lease,
            }
        else:  # pragma: no cover - programming error
            raise ValueError(kind)
        if kind not in ("heartbeat", "complete"):  # every other outcome appends the attempt it ends, in this statement
            values["history"] = text(self._history_append(kind))
        stmt = (
            update(t)
            .where(
                t.c.id == bindparam("p_id", type_=t.c.id.type),
                status_is(t.c.status, JobStatus.RUNNING),
                t.c.lease_token == bindparam("p_token", type_=t.c.lease_token.type),
            )
            .values(**values)
            .returning(*t.c)
        )
        self._statements[("fenced", kind)] = stmt
        return stmt

    def _history_append(self, kind: str) -> str:
        """SQL of the ``history`` a fenced outcome write of ``kind`` sets (``text()`` parameters
        of :meth:`_history_params`)."""
        outcome = {
            "retry": or_cancelled(
                "CASE WHEN attempts < max_attempts THEN CAST(:p_if_retrying AS text) ELSE CAST(:p_if_dead AS text) END"
            ),
            "dead": or_cancelled("CAST(:p_if_dead AS text)"),
            "snooze": or_cancelled("CAST(:p_given_back AS text)"),
        }[kind]
        error = "CAST(:p_attempt_error AS text)" if kind in ("retry", "dead") else "NULL"
        ended = "CAST(:p_ended AS timestamptz)" if self._dialect == "postgresql" else ":p_ended"
        return append_sql(self._dialect, outcome=outcome, error=error, ended=ended)

    def _history_params(
        self, now: datetime, error: str | None = None, given_back: AttemptOutcome | None = None
    ) -> dict[str, Any]:
        """The parameters of :meth:`_history_append`: the end time, and the failure's entry
        (outcomes and error) or the give-back's outcome."""
        params: dict[str, Any] = {"p_ended": time_value(self._dialect, now)}
        if error is not None:
            if_retrying, if_dead = failure_outcomes(error)
            params.update(p_if_retrying=if_retrying.value, p_if_dead=if_dead.value, p_attempt_error=attempt_error(error))
        if given_back is not None:
            params["p_given_back"] = given_back.value
        return params

    @property
    def _dialect(self) -> str:
        return self.engine.dialect.name

    def _fenced(
        self,
        kind: str,
        job_id: int,
        token: str,
        params: dict[str, Any],
        doing: str,
        landed: Callable[[Row[Any]], bool],
    ) -> Job:
        """Run the fenced write of ``kind`` (see :meth:`_fenced_statement`) with ``params``.

        Raises LeaseLost when no row matched.  When the connection is lost and the commit's outcome
        is unknown, the row is read back: still running under ``token`` means the write did not
        land and it is sent again; a row for which ``landed(row)`` holds, or that this write made
        ``cancelled`` (finished at ``params["p_now"]``), means it did; anything else means someone
        else moved the job, so LeaseLost.
        """
        stmt = self._fenced_statement(kind)
        params = {"p_id": job_id, "p_token": token, **params}
        for _ in range(self.retry_attempts):
            try:
                row = self._write_once(doing, lambda c: c.execute(stmt, params).first(), single=True)
            except _UnknownOutcome:
                row = self._read("check a write whose commit was interrupted", lambda c: self._get_row(c, job_id))
                if row is None:
                    raise LeaseLost(job_id, token) from None
                if row.status == JobStatus.RUNNING.value and row.lease_token == token:
                    continue  # it did not land; sending it again is safe
                if landed(row) or cancelled_by_write(row, params.get("p_now")):
                    return row_to_job(row)
                raise LeaseLost(job_id, token) from None
            if row is None:
                raise LeaseLost(job_id, token)
            return row_to_job(row)
        raise StorageUnavailable(f"{self.safe_url}: could not {doing}: the connection kept failing")

    def complete(self, job_id: int, token: str, *, now: datetime) -> Job:
        """Fenced: ``completed`` at ``now``.  Raises LeaseLost, StorageUnavailable."""
        now = ensure_utc(now, "now")
        return self._fenced(
            "complete", job_id, token, {"p_now": now}, "complete a job",
            lambda r: r.status == JobStatus.COMPLETED.value and r.finished_at == now,
        )

    def _complete_rows(
        self, conn: Connection, items: Sequence[tuple[int, str]], now: datetime
    ) -> dict[tuple[int, str], Row[Any]]:
        """Fenced completion of each (id, token) in ``items`` in this transaction; the rows written,
        by the (id, token) whose compare-and-set wrote them."""
        stmt = self._fenced_statement("complete")
        written: dict[tuple[int, str], Row[Any]] = {}
        for job_id, token in items:
            row = conn.execute(stmt, {"p_id": job_id, "p_token": token, "p_now": now}).first()
            if row is not None:
                written[(job_id, token)] = row
        return written

    #: Whether :meth:`_complete_rows` is one statement (run as its own transaction where allowed).
    _complete_rows_single: bool = False

    def complete_many(self, items: Sequence[tuple[int, str]], *, now: datetime) -> list[Job | LeaseLost]:
        """Fenced completion of several jobs in one round trip (PostgreSQL) or one transaction (SQLite).

        Each ``(job_id, token)`` is still its own compare-and-set; the result, in input order, is
        the completed :class:`Job` or the :class:`LeaseLost` error for that item (returned, not
        raised, so every caller learns its own outcome).  Lets a worker pool flush the completions
        of several threads at once.  Raises StorageUnavailable when the store stays unreachable.
        """
        now = ensure_utc(now, "now")
        pending = [(int(job_id), str(token)) for job_id, token in items]
        done: dict[tuple[int, str], Job | LeaseLost] = {}
        for _ in range(self.retry_attempts):
            if not pending:
                break
            batch = list(pending)
            try:
                rows = self._write_once(
                    "complete jobs", lambda c: self._complete_rows(c, batch, now), single=self._complete_rows_single  # noqa: B023
                )
                for job_id, token in batch:  # by (id, token): a stale token next to the current one is LeaseLost
                    row = rows.get((job_id, token))
                    done[(job_id, token)] = row_to_job(row) if row is not None else LeaseLost(job_id, token)
                pending = []
            except _UnknownOutcome:
                pending = self._recheck_completions(batch, now, done)
        if pending:
            raise StorageUnavailable(f"{self.safe_url}: could not complete jobs: the connection kept failing")
        return [done[(int(job_id), str(token))] for job_id, token in items]

    def _recheck_completions(
        self, batch: Sequence[tuple[int, str]], now: datetime, done: dict[tuple[int, str], Job | LeaseLost]
    ) -> list[tuple[int, str]]:
        """After a completion write whose commit was interrupted: read the rows of ``batch`` and
        record in ``done`` each item that landed (completed, or cancelled, at ``now``: the job) or never can
        (someone else moved the job: LeaseLost); returns the items still running under their
        token (they did not land; sending them again is safe)."""
        ids = [job_id for job_id, _ in batch]
        current = self._read(
            "check interrupted completions",
            lambda c: {int(r.id): r for r in c.execute(select(self.table).where(self.table.c.id.in_(ids)))},
        )
        pending = []
        for job_id, token in batch:
            row = current.get(job_id)
            if row is not None and row.status == JobStatus.RUNNING.value and row.lease_token == token:
                pending.append((job_id, token))  # did not land: send again
            elif row is not None and (
                (row.status == JobStatus.COMPLETED.value and row.finished_at == now) or cancelled_by_write(row, now)
            ):
                done[(job_id, token)] = row_to_job(row)
            else:
                done[(job_id, token)] = LeaseLost(job_id, token)
        return pending

    def fail(self, job_id: int, token: str, *, now: datetime, error: str, retry_at: datetime | None) -> Job:
        """Fenced: ``retrying`` at ``retry_at`` if given and attempts are left (decided in SQL on the
        row as written), else ``dead``.  ``error`` is stored sanitized.  Raises LeaseLost."""
        now = ensure_utc(now, "now")
        error = sanitize_text(error)
        if retry_at is None:
            return self._dead(job_id, token, now, error, "fail a job")
        retry_at = ensure_utc(retry_at, "retry_at")
        return self._fenced(
            "retry", job_id, token,
            {"p_now": now, "p_error": error, "p_retry_at": retry_at, **self._history_params(now, error)},
            "record a failure",
            lambda r: r.last_error == error
            and (
                (r.status == JobStatus.RETRYING.value and r.scheduled_at == retry_at)
                or (r.status == JobStatus.DEAD.value and r.finished_at == now)
            ),
        )

    def _dead(self, job_id: int, token: str, now: datetime, error: str, doing: str) -> Job:
        return self._fenced(
            "dead", job_id, token, {"p_now": now, "p_error": error, **self._history_params(now, error)}, doing,
            lambda r: r.status == JobStatus.DEAD.value and r.finished_at == now and r.last_error == error,
        )

    def dead_letter(self, job_id: int, token: str, *, now: datetime, error: str) -> Job:
        """Fenced: ``dead`` at once with ``error`` (sanitized).  Raises LeaseLost."""
        return self._dead(job_id, token, ensure_utc(now, "now"), sanitize_text(error), "dead-letter a job")

    def heartbeat(self, job_id: int, token: str, *, now: datetime, lease_timeout: float) -> Job:
        """Fenced: extend the lease to ``now + lease_timeout`` s (never shortens it).  Raises LeaseLost."""
        now = ensure_utc(now, "now")
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        expires = now + timedelta(seconds=lease_timeout)
        # A heartbeat whose outcome is unknown is re-sent while the lease still holds (repeatable).
        return self._fenced("heartbeat", job_id, token, {"p_expires": expires}, "extend a lease", lambda r: False)

    def release(self, job_id: int, token: str, *, now: datetime) -> Job:
        """Fenced: back to ``queued`` due ``now``, the attempt given back, ``last_error`` kept.
        Raises LeaseLost."""
        now = ensure_utc(now, "now")
        return self._give_back(job_id, token, now, now, AttemptOutcome.RELEASED, "release a job")

    def snooze(self, job_id: int, token: str, *, now: datetime, until: datetime) -> Job:
        """Fenced: back to ``queued`` due ``until``, the attempt given back, ``last_error`` kept.
        Raises LeaseLost."""
        return self._give_back(
            job_id, token, ensure_utc(now, "now"), ensure_utc(until, "until"), AttemptOutcome.SNOOZED, "snooze a job"
        )

    def _give_back(
        self, job_id: int, token: str, now: datetime, until: datetime, outcome: AttemptOutcome, doing: str
    ) -> Job:
        return self._fenced(
            "snooze", job_id, token, {"p_now": now, "p_until": until, **self._history_params(now, given_back=outcome)},
            doing,
            lambda r: r.status == JobStatus.QUEUED.value and r.scheduled_at == until and r.lease_token is None,
        )


def cancelled_by_write(row: Row[Any], now: datetime | None) -> bool:
    """True when ``row`` reads as a holder's outcome write at ``now`` that a cancellation request
    turned into ``cancelled`` (how an interrupted write learns that it landed)."""
    return now is not None and row.status == JobStatus.CANCELLED.value and row.finished_at == now


__all__ = ["COMPLETED_LEASE", "NO_LEASE", "SqlFencedWrites", "cancelled_by_write"]
