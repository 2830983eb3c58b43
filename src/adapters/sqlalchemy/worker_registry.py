"""The worker registry on the SQL repository: ``tether_workers``, one row per running worker pool.

A pool's refresh is one ``UPDATE`` of its own row (an ``INSERT`` when the row is missing: at start,
or after it was pruned or removed), in a transaction of its own, once per heartbeat interval:
never on the lease or completion path, and never read by a fenced write or the reaper.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, delete, insert, select, update
from sqlalchemy.engine import Connection
from tether.adapters.sqlalchemy.mapping import row_to_worker, worker_values
from tether.adapters.sqlalchemy.transactions import SqlTransactions
from tether.domain.timeutil import ensure_utc
from tether.domain.workers import WorkerEntry, with_gone_flag


class SqlWorkerRegistry(SqlTransactions):
    """``record_worker``, ``remove_worker``, ``list_workers`` and ``prune_workers`` on ``tether_workers``."""

    workers_table: Table

    def record_worker(self, entry: WorkerEntry) -> None:
        """Update this worker's row, or insert it when there is none (safe to repeat)."""
        ensure_utc(entry.started_at, "started_at")
        ensure_utc(entry.last_seen_at, "last_seen_at")
        t = self.workers_table
        values = worker_values(entry)
        changes = {k: v for k, v in values.items() if k != "worker_id"}

        def work(conn: Connection) -> None:
            if conn.execute(update(t).where(t.c.worker_id == entry.worker_id).values(**changes)).rowcount == 0:
                conn.execute(insert(t).values(**values))

        self._write("record a worker", work)

    def remove_worker(self, worker_id: str) -> bool:
        t = self.workers_table
        stmt = delete(t).where(t.c.worker_id == worker_id)
        return bool(self._write("remove a worker", lambda c: c.execute(stmt).rowcount, single=True))

    def list_workers(self, *, now: datetime) -> list[WorkerEntry]:
        now = ensure_utc(now, "now")
        t = self.workers_table
        stmt = select(t).order_by(t.c.started_at, t.c.worker_id)
        rows: list[Any] = self._read("list workers", lambda c: list(c.execute(stmt)))
        return [with_gone_flag(row_to_worker(r), now) for r in rows]

    def prune_workers(self, *, older_than: datetime) -> int:
        older_than = ensure_utc(older_than, "older_than")
        t = self.workers_table
        stmt = delete(t).where(t.c.last_seen_at < older_than)
        return int(self._write("prune workers", lambda c: c.execute(stmt).rowcount, single=True))


__all__ = ["SqlWorkerRegistry"]
