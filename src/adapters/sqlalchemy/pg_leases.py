"""Leases and completions on PostgreSQL: the lease, ``complete_many`` and ``complete_and_lease`` statements.

- **Leases**: one round trip leases up to ``k`` jobs::

      UPDATE tether_jobs SET status = 'running', attempts = attempts + 1, lease_token = ..., ...
      FROM (SELECT id FROM tether_jobs
            WHERE status IN ('queued', 'retrying') AND scheduled_at <= :now
              AND attempts < max_attempts [AND queue IN (...)]
            ORDER BY priority DESC, scheduled_at, id
            LIMIT :k FOR UPDATE SKIP LOCKED) AS chosen
      WHERE tether_jobs.id = chosen.id RETURNING tether_jobs.*

  Concurrent workers skip each other's locked rows instead of queueing behind them.  The partial
  indexes of :mod:`.schema` give the rows in lease order, so the cost does not grow with the
  number of finished rows (case C19).  It is sent straight on a pooled psycopg connection
  (:mod:`.pg_driver`): the lease is on the path from a job's publish to its handler's start.
- **Fencing tokens** of a batch lease are ``md5(secret || id)``, where ``secret`` is 128 random
  bits drawn (from the OS's CSPRNG) for that one lease call: unique per lease, and known to the
  caller before the statement runs.  If the connection dies while the lease commits, the
  repository reads back the rows leased under that secret and returns them, so a lost reply
  never silently burns an attempt.
- **Completions**: :meth:`~PgLeases.complete_many` flushes many fenced completions in one
  ``UPDATE ... FROM unnest(ids, tokens)``, each still a compare-and-set with its own outcome;
  :meth:`~PgLeases.complete_and_lease` sends those completions and a lease as one statement.  A
  row carrying a cancellation request is written ``cancelled`` instead of ``completed`` by the
  same statement (:data:`COMPLETED_OR_CANCELLED`).  A completion writes no history: the attempt it
  ends stays in ``leased_by``/``leased_at`` as the row's last entry (:mod:`.history_sql`), so the
  hottest write there is builds no JSON.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy import Text, cast, func, literal, select, text
from sqlalchemy.engine import Connection, Row
from tether.adapters.sqlalchemy import pg_key_limits
from tether.adapters.sqlalchemy.mapping import row_to_job
from tether.adapters.sqlalchemy.pg_connections import PgConnections
from tether.adapters.sqlalchemy.pg_driver import JOB_COLUMNS, job_from_tuple
from tether.adapters.sqlalchemy.schema import RESTRICTED_PREDICATE, status_is
from tether.adapters.sqlalchemy.transactions import _UnknownOutcome
from tether.domain.errors import LeaseLost, StorageRowError, StorageUnavailable
from tether.domain.job import Job, JobStatus, lease_order_key, listed_order_key
from tether.domain.timeutil import ensure_utc, to_micros
from tether.domain.validation import validate_job_types, validate_seconds, validate_worker_id

#: The status a fenced completion writes on the row ``j``: ``cancelled`` when an operator asked to
#: cancel the job while it ran (:func:`tether.domain.transitions.complete`), else ``completed``.
COMPLETED_OR_CANCELLED = "CASE WHEN j.cancel_requested_at IS NULL THEN 'completed' ELSE 'cancelled' END"


class PgLeases(PgConnections):
    """``lease``, ``complete_many`` (through :meth:`_complete_rows`) and ``complete_and_lease`` on PostgreSQL."""

    _cache_limited = True

    def _lease_parts(self, shape: str, skip: bool = False, typed: bool = False) -> tuple[str, str]:
        """The two parts every lease statement shares, psycopg ``%(name)s`` parameters from
        :meth:`_lease_params` plus ``p_secret``: the ``chosen`` CTE body (the best ``p_limit``
        due rows of the queue filter ``shape`` in lease order, skipping rows other workers hold
        locked, and with ``skip`` the ids of ``p_skip``, rows that failed alone: see
        :mod:`.row_faults`) and the UPDATE that leases them, each under ``md5(p_secret || id)``,
        returning :data:`JOB_COLUMNS`.

        Shapes: ``all``, ``one`` (``p_queue``), ``many`` (``p_queues``), ``listed`` (``p_queues``:
        the best of each listed queue in turn, each queue's rows read from the partial lease index
        and no row locked past the limit): the plain path, which leaves paused and limited queues
        out; ``limited`` (``p_queue``) and ``limited_id`` (``p_queue``, ``p_id``): one limited
        queue, at most its free slots (its ``max_running`` less its running jobs with unexpired
        leases at ``p_now``, and its ``rate_limit`` less its starts in the rate window of
        ``p_now_us``; none when it is paused or no longer limited, or has a per-key limit);
        ``limited_key`` and ``limited_key_id``: the same for a queue with a per-key limit, each
        key within its ``max_running_per_key`` (:mod:`.pg_key_limits`).  With ``typed``, only rows
        whose ``job_type`` is in ``p_types`` (a filtered lease: every shape's statement is
        otherwise the same text)."""
        table = self._qualified_table
        columns = ", ".join(f"j.{name}" for name in JOB_COLUMNS)
        controls = self._qualified_name(self.queues_table.name)
        queue_filter = {"all": "", "one": " AND queue = %(p_queue)s", "listed": " AND queue = q.name",
                        "many": " AND queue = ANY(CAST(%(p_queues)s AS text[]))",
                        "limited": " AND queue = %(p_queue)s", "limited_key": " AND queue = %(p_queue)s",
                        "limited_id": " AND queue = %(p_queue)s AND id = %(p_id)s",
                        "limited_key_id": " AND queue = %(p_queue)s AND id = %(p_id)s"}[shape]
        keyed = shape.startswith("limited_key")
        free_slots = None
        if shape.startswith("limited"):
            running = (
                f"SELECT count(*) FROM {table} WHERE status = 'running' AND queue = %(p_queue)s "
                "AND lease_expires_at > %(p_now)s"
            )
            window = "(%(p_now_us)s / c.rate_period_us) * c.rate_period_us"
            least = (
                f"LEAST(CASE WHEN c.max_running IS NULL THEN NULL ELSE c.max_running - ({running}) END, "
                "CASE WHEN c.rate_limit IS NULL THEN NULL ELSE c.rate_limit - "
                f"(CASE WHEN c.window_start_us = {window} THEN c.window_starts ELSE 0 END) END)"
            )
            if keyed:  # only a per-key limit: p_limit, the key rule cuts the rows
                room = pg_key_limits.room(controls, least)
                queue_filter += pg_key_limits.key_filter(table, controls)
            else:  # a per-key limit set since the list of limited queues was read: nothing yet
                room = (
                    f"SELECT GREATEST({least}, 0) "
                    f"FROM {controls} AS c WHERE c.name = %(p_queue)s AND NOT c.paused "
                    "AND (c.max_running IS NOT NULL OR c.rate_limit IS NOT NULL) AND c.max_running_per_key IS NULL"
                )
            free_slots = f"COALESCE(({room}), 0)"
        else:
            queue_filter += f" AND queue NOT IN (SELECT name FROM {controls} WHERE {RESTRICTED_PREDICATE})"
        if skip:  # only while rows that failed alone are left out (see .row_faults)
            queue_filter += " AND id <> ALL(CAST(%(p_skip)s AS bigint[]))"
        if typed:  # a lease filtered by job type (a pool with both thread and async handlers)
            queue_filter += " AND job_type = ANY(CAST(%(p_types)s AS text[]))"
        due = (
            f"FROM {table} WHERE status IN ('queued', 'retrying') "
            f"AND scheduled_at <= %(p_now)s AND attempts < max_attempts{queue_filter} "
            "ORDER BY priority DESC, scheduled_at, id LIMIT %(p_limit)s FOR UPDATE SKIP LOCKED"
        )
        chosen = f"SELECT id {due}"
        if shape == "listed":  # queue by queue in the order listed, each through the partial lease index
            chosen = (
                "SELECT c.id FROM unnest(CAST(%(p_queues)s AS text[])) WITH ORDINALITY AS q(name, pos) "
                f"CROSS JOIN LATERAL ({chosen}) AS c LIMIT %(p_limit)s"
            )
        elif free_slots is not None:
            # The free slots cut the p_limit rows down afterwards: a LIMIT the planner cannot read
            # would make it expect a tenth of the table and hash-join all of it.
            chosen = (
                pg_key_limits.ranked_chosen(table, controls, due, free_slots) if keyed else
                f"SELECT picked.id FROM (SELECT id, priority, scheduled_at {due}) AS picked "
                f"ORDER BY picked.priority DESC, picked.scheduled_at, picked.id LIMIT {free_slots}"
            )
        update = (
            f"UPDATE {table} AS j SET status = 'running', attempts = j.attempts + 1, "
            "lease_token = md5(%(p_secret)s || CAST(j.id AS text)), leased_by = %(p_worker)s, "
            "leased_at = %(p_now)s, lease_expires_at = %(p_expires)s FROM chosen WHERE j.id = chosen.id "
            f"RETURNING {columns}"
        )
        return chosen, update

    def _lease_sql(self, shape: str, skip: bool = False, typed: bool = False) -> str:
        """The lease statement (:meth:`_lease_parts`) for a queue filter of ``shape``."""
        key = ("lease_sql", shape, skip, "typed") if typed else ("lease_sql", shape, skip)
        sql = self._statements.get(key)
        if sql is None:
            chosen, update = self._lease_parts(shape, skip, typed)
            sql = self._statements[key] = f"WITH chosen AS ({chosen}) {update}"
        return sql

    def lease(
        self, *, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int = 1,
        listed_order: bool = False, job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """As the base class, in one statement (:meth:`_lease_sql`) sent straight on a pooled psycopg
        connection (:mod:`.pg_driver`): the lease is on the path from a job's publish to its
        handler's start.  A lease whose reply was lost is read back by its secret.  With
        ``job_types``, the same statement with the job-type filter (``typed``)."""
        now = ensure_utc(now, "now")
        worker_id = validate_worker_id(worker_id)
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        types = None if job_types is None else validate_job_types(job_types)
        if limit < 1 or (queues is not None and not queues) or (types is not None and not types):
            return []
        shape = self._listed_shape(queues, listed_order)
        skip = self._skipped.ids()
        sql = self._lease_sql(shape, bool(skip), types is not None)
        order = listed_order_key(queues) if shape == "listed" else lease_order_key
        base = self._lease_params(queues, worker_id, now, lease_timeout, limit)
        if skip:
            base["p_skip"] = skip
        typed: dict[str, Any] = {}
        if types is not None:
            base["p_types"] = types
            typed["job_types"] = types
        for attempt in range(self.retry_attempts):
            secret = secrets.token_hex(16)
            try:
                rows = self._driver_once("lease jobs", sql, {**base, "p_secret": secret})
            except StorageRowError:  # one row refused: the others go through, one by one
                return self._lease_row_by_row(
                    queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit,
                    listed=shape == "listed", **typed,
                )
            except _UnknownOutcome:
                recovered = self._read(
                    "check an interrupted lease",
                    lambda c: self._rows_leased_under(c, secret, worker_id, now, lease_timeout),  # noqa: B023
                )
                if recovered:
                    return sorted((row_to_job(r) for r in recovered), key=order)
                if attempt + 1 < self.retry_attempts:
                    self._sleep(attempt)
                continue
            jobs = [job_from_tuple(r) for r in rows]
            if len(jobs) < limit:  # the limited queues: one short counting transaction each
                jobs += self._limited_top_up(
                    queues, worker_id, now, lease_timeout, limit - len(jobs), shape == "listed", **typed
                )
            return sorted(jobs, key=order)
        # never "no job" because the store kept failing (the contract of lease)
        raise StorageUnavailable(f"{self.safe_url}: could not lease jobs: the connection kept failing")

    def _listed_shape(self, queues: Sequence[str] | None, listed_order: bool) -> str:
        """The queue filter's shape, ``listed`` for a listed-order lease of several queues."""
        return "listed" if listed_order and queues is not None and len(queues) > 1 else self._queue_shape(queues)

    def _limited_top_up(
        self, queues: Sequence[str] | None, worker_id: str, now: datetime, lease_timeout: float, limit: int,
        listed: bool, job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """:meth:`_top_up_limited` (the limited queues in the order listed with ``listed``, the
        rows that failed alone left out); a row refused there sends the limited queues' leases
        one by one (:meth:`_lease_row_by_row`, which skips the bad row for a while); another
        storage error leases nothing more (the plain lease's jobs are still handed out; the next
        lease meets the trouble again)."""
        typed = {} if job_types is None else {"job_types": job_types}
        try:
            return self._top_up_limited(
                queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit, listed=listed,
                skip=self._skipped.ids(), **typed,
            )
        except StorageRowError:
            limited = self._limited_queues(queues, listed=True)
            try:
                return self._lease_row_by_row(
                    queues=limited, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit, listed=True,
                    **typed,
                ) if limited else []
            except StorageUnavailable:
                return []
        except StorageUnavailable:
            return []

    def _limited_sql(self, shape: str, skip: bool = False, typed: bool = False) -> str:
        """The limited-queue lease as one simple query of two statements, an implicit transaction:
        lock the queue's row, then (a new statement, so a new snapshot that sees every lease
        committed before the lock was granted) count its running jobs and lease at most the
        remainder (:meth:`_lease_parts` shape ``limited``/``limited_id``, ``limited_key``/``limited_key_id``
        for a queue with a per-key limit), counting the leases in
        the queue's rate window (``window_start_us``, ``window_starts``) in the same statement."""
        key = ("limited_sql", shape, skip, "typed") if typed else ("limited_sql", shape, skip)
        sql = self._statements.get(key)
        if sql is None:
            controls = self._qualified_name(self.queues_table.name)
            chosen, update = self._lease_parts(shape, skip, typed)
            window = "(%(p_now_us)s / c.rate_period_us) * c.rate_period_us"
            count_starts = (  # the rate window's starts, in the same statement as the lease
                f"UPDATE {controls} AS c SET window_start_us = {window}, window_starts = "
                f"(CASE WHEN c.window_start_us = {window} THEN c.window_starts ELSE 0 END) + (SELECT count(*) FROM leased) "
                "WHERE c.name = %(p_queue)s AND c.rate_limit IS NOT NULL AND EXISTS (SELECT 1 FROM leased)"
            )
            sql = self._statements[key] = (
                f"SELECT 1 FROM {controls} WHERE name = %(p_queue)s FOR UPDATE; "
                f"WITH chosen AS ({chosen}), leased AS ({update}), starts AS ({count_starts}) SELECT * FROM leased"
            )
        return str(sql)

    def _lease_limited_alone(
        self, queue: str, *, worker_id: str, now: datetime, lease_timeout: float, limit: int, job_id: int | None = None,
        skip: Sequence[int] = (), job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """The limited-queue lease (:meth:`_limited_sql`) in **one** round trip: both statements
        go in one simple query (parameters bound client-side), which PostgreSQL runs as one
        transaction, so the queue's row stays locked only while the server runs them.  A reply
        lost while it commits is read back by the lease's secret."""
        shape = "limited_key" if queue in self._keyed_limited else "limited"
        sql = self._limited_sql(shape if job_id is None else f"{shape}_id", bool(skip), job_types is not None)
        params: dict[str, Any] = {
            **self._lease_params([queue], worker_id, now, lease_timeout, limit), "p_queue": queue, "p_id": job_id,
            "p_now_us": to_micros(now),
        }
        if skip:
            params["p_skip"] = list(skip)
        if job_types is not None:
            params["p_types"] = list(job_types)

        def run(driver: Any) -> list[tuple[Any, ...]]:
            cursor = psycopg.ClientCursor(driver)
            cursor.execute(sql, params)
            cursor.nextset()  # past the lock's row: the leased rows
            return cursor.fetchall()

        for attempt in range(self.retry_attempts):
            secret = secrets.token_hex(16)
            params["p_secret"] = secret
            try:
                rows = self._write_once("lease jobs of a limited queue", run, connect=self._driver_connection)
            except _UnknownOutcome:
                recovered = self._read(
                    "check an interrupted lease",
                    lambda c: self._rows_leased_under(c, secret, worker_id, now, lease_timeout),  # noqa: B023
                )
                if recovered:
                    return [row_to_job(r) for r in recovered]
                if attempt + 1 < self.retry_attempts:
                    self._sleep(attempt)
                continue
            return [job_from_tuple(r) for r in rows]
        raise StorageUnavailable(f"{self.safe_url}: could not lease jobs of queue {queue}: the connection kept failing")

    def _rows_leased_under(
        self, conn: Connection, secret: str, worker_id: str, now: datetime, lease_timeout: float
    ) -> list[Row[Any]]:
        t = self.table
        expires = now + timedelta(seconds=lease_timeout)
        stmt = select(t).where(
            status_is(t.c.status, JobStatus.RUNNING),
            t.c.lease_expires_at == expires,
            t.c.leased_by == worker_id,
            t.c.lease_token == func.md5(literal(secret, Text()) + cast(t.c.id, Text())),
        )
        return list(conn.execute(stmt))

    _complete_rows_single = True

    def _complete_rows(
        self, conn: Connection, items: Sequence[tuple[int, str]], now: datetime
    ) -> dict[tuple[int, str], Row[Any]]:
        """All the fenced completions in one statement: ``UPDATE ... FROM unnest(ids, tokens)``;
        each row comes back with the token that matched it (``fenced_token``)."""
        statement = self._statements.get("complete_many")
        if statement is None:  # built once: rebuilding a text() costs a cache-key walk per call
            statement = text(
                f"UPDATE {self._qualified_table} AS j SET status = {COMPLETED_OR_CANCELLED}, finished_at = :now, "
                "lease_token = NULL, lease_expires_at = NULL "
                "FROM unnest(CAST(:ids AS bigint[]), CAST(:tokens AS text[])) AS v(id, token) "
                "WHERE j.id = v.id AND j.status = 'running' AND j.lease_token = v.token "
                "RETURNING j.*, v.token AS fenced_token"
            ).columns(*self.table.c, fenced_token=Text())
            self._statements["complete_many"] = statement
        rows = conn.execute(  # .all(): one fetchall, not a fetchone per row
            statement, {"now": now, "ids": [i for i, _ in items], "tokens": [tok for _, tok in items]}
        ).all()
        return {(int(row.id), row.fenced_token): row for row in rows}

    def _complete_and_lease_sql(self, shape: str, typed: bool = False) -> str:
        """The SQL of :meth:`complete_and_lease` for a queue filter of ``shape`` (psycopg
        ``%(name)s`` parameters): the ``complete_many`` update and the lease
        (:meth:`_lease_parts`) as two data-modifying CTEs of one statement (they touch disjoint
        rows: one needs ``running``, the other ``queued``/``retrying``), their rows returned
        together, told apart by the last column (true: completed by this statement).  Columns are
        listed as :data:`JOB_COLUMNS`, so :func:`job_from_tuple` reads them by position whatever
        the physical column order.  ``typed``: the lease part with the job-type filter."""
        key = ("complete_and_lease", shape, "typed") if typed else ("complete_and_lease", shape)
        sql = self._statements.get(key)
        if sql is None:
            table = self._qualified_table
            columns = ", ".join(f"j.{name}" for name in JOB_COLUMNS)
            chosen, update = self._lease_parts(shape, typed=typed)
            sql = self._statements[key] = (
                f"WITH done AS (UPDATE {table} AS j SET status = {COMPLETED_OR_CANCELLED}, finished_at = %(p_now)s, "
                "lease_token = NULL, lease_expires_at = NULL "
                "FROM unnest(CAST(%(p_ids)s AS bigint[]), CAST(%(p_tokens)s AS text[])) AS v(id, token) "
                "WHERE j.id = v.id AND j.status = 'running' AND j.lease_token = v.token "
                f"RETURNING {columns}, v.token AS fenced_token), "
                f"chosen AS ({chosen}), "
                f"leased AS ({update}, CAST(NULL AS text) AS fenced_token) "
                "SELECT *, true FROM done UNION ALL SELECT *, false FROM leased"
            )
        return sql

    def complete_and_lease(
        self,
        items: Sequence[tuple[int, str]],
        *,
        now: datetime,
        queues: Sequence[str] | None,
        worker_id: str,
        lease_timeout: float,
        limit: int,
        listed_order: bool = False,
        job_types: Sequence[str] | None = None,
    ) -> tuple[list[Job | LeaseLost], list[Job]]:
        """The fenced completions of ``items`` and a lease of up to ``limit`` jobs (only of
        ``job_types`` when given) in **one** statement (one round trip, one commit): see
        :meth:`_complete_and_lease_sql`.

        Each item is still its own compare-and-set on (id, ``running``, token), answered by the
        (id, token) that matched (a stale token next to the current one is LeaseLost); leased
        tokens are ``md5(secret || id)`` as in :meth:`lease`.  When the connection dies during
        the statement, both halves are read back (the statement is atomic: it landed whole or not
        at all): the rows leased under the secret, and each item's row (completed at ``now``:
        done; still running under its token: not landed, so the statement is sent again with a
        fresh secret; else LeaseLost).  Raises StorageUnavailable past the retries.
        """
        now = ensure_utc(now, "now")
        types = None if job_types is None else validate_job_types(job_types)
        typed: dict[str, Any] = {} if types is None else {"job_types": types}
        if not items or limit < 1 or (queues is not None and not queues) or types == [] or self._skipped.ids():
            # (while rows that failed alone are left out, the lease is a statement of its own)
            return super().complete_and_lease(
                items, now=now, queues=queues, worker_id=worker_id, lease_timeout=lease_timeout, limit=limit,
                listed_order=listed_order, **typed,
            )
        worker_id = validate_worker_id(worker_id)
        lease_timeout = validate_seconds(lease_timeout, "lease_timeout", allow_zero=False)
        shape = self._listed_shape(queues, listed_order)
        order = listed_order_key(queues) if shape == "listed" else lease_order_key
        sql = self._complete_and_lease_sql(shape, types is not None)
        batch = [(int(job_id), str(token)) for job_id, token in items]
        base = self._lease_params(queues, worker_id, now, lease_timeout, limit)
        if types is not None:
            base["p_types"] = types
        done: dict[tuple[int, str], Job | LeaseLost] = {}
        for attempt in range(self.retry_attempts):
            secret = secrets.token_hex(16)
            params = {**base, "p_secret": secret, "p_ids": [i for i, _ in batch], "p_tokens": [t for _, t in batch]}
            try:
                # raw rows on the driver, mapped by position: no per-statement SQLAlchemy overhead
                rows = self._driver_once("complete and lease jobs", sql, params)
            except StorageRowError:
                # A row refused (a trigger, a constraint), not the connection: the completions
                # alone (raising StorageRowError again if one of theirs is the bad row, for the
                # caller to write them one by one), then the lease, which leaves the bad row out.
                done.update(zip(batch, self.complete_many(batch, now=now)))
                jobs = self.lease(
                    queues=queues, worker_id=worker_id, now=now, lease_timeout=lease_timeout, limit=limit,
                    listed_order=listed_order, **typed,
                )
                return [done[(int(i), str(t))] for i, t in items], jobs
            except _UnknownOutcome:
                leased = self._read(
                    "check an interrupted lease",
                    lambda c: self._rows_leased_under(c, secret, worker_id, now, lease_timeout),  # noqa: B023
                )
                pending = self._recheck_completions(batch, now, done)
                if pending and not leased:  # it did not land: send it again (the others are answered)
                    batch = pending
                    if attempt + 1 < self.retry_attempts:
                        self._sleep(attempt)
                    continue
                jobs = sorted((row_to_job(r) for r in leased), key=order)
                return [done[(int(i), str(t))] for i, t in items], jobs
            jobs = []
            for row in rows:
                if row[-1]:
                    done[(row[0], row[-2])] = job_from_tuple(row)
                else:
                    jobs.append(job_from_tuple(row))
            for key in batch:
                if key not in done:
                    done[key] = LeaseLost(*key)
            if len(jobs) < limit:  # the limited queues: one short counting transaction each
                jobs += self._limited_top_up(
                    queues, worker_id, now, lease_timeout, limit - len(jobs), shape == "listed", **typed
                )
            return [done[(int(i), str(t))] for i, t in items], sorted(jobs, key=order)
        raise StorageUnavailable(f"{self.safe_url}: could not complete and lease jobs: the connection kept failing")


__all__ = ["COMPLETED_OR_CANCELLED", "PgLeases"]
