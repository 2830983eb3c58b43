"""Issue 3 item 9: a worker pool survives the server killing its connections.

A real :class:`~tether.entrypoints.worker.WorkerPool` (built by ``tether.connect`` on this run's
own schema) drains jobs while another connection runs ``pg_terminate_backend`` on every backend
the pool's engine has used, again and again.  The backends are found by pid, recorded from the
engine's checkout events (every Tether connects as ``application_name='tether'``, so the name
alone would also hit other test runs' connections on the shared server).

Expected: every job completed, its handler ran exactly once (attempts 1), nothing left running,
queued, retrying or dead; every worker thread still alive; warnings proportional to the kills
(rate-limited retries), never a flood and no ERROR from a dying thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.pool import NullPool
from tether.adapters.sqlalchemy.postgres import normalize_postgres_url
from tether.entrypoints.service import EnqueueRequest, Tether

from tests.conftest import DATABASE_URL
from tests.executions import Executions
from tests.postgres_fixtures import schema_name, temporary_app

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
JOBS = 1500
CONCURRENCY = 4
KILL_EVERY = 0.2  # seconds between two rounds of pg_terminate_backend


@pytest.fixture
def app() -> Iterator[Tether]:
    with temporary_app(schema_name("connloss"), poll_interval=0.2, pool_size=8) as application:
        yield application


class BackendKiller:
    """Terminates, every ``KILL_EVERY`` s, each backend the watched engine has checked out."""

    def __init__(self, engine: Any) -> None:
        self.pids: set[int] = set()
        self.killed = 0
        self.rounds = 0
        self.errors = 0  # statements of the pool's that failed (a killed connection in use)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._admin = create_engine(normalize_postgres_url(DATABASE_URL), poolclass=NullPool)
        event.listen(engine, "checkout", self._checked_out)
        event.listen(engine, "handle_error", self._failed)
        self._engine = engine
        self._thread = threading.Thread(target=self._run, name="test-killer", daemon=True)

    def _checked_out(self, dbapi_connection: Any, record: Any, proxy: Any) -> None:
        with self._lock:
            self.pids.add(int(dbapi_connection.info.backend_pid))

    def _failed(self, context: Any) -> None:
        with self._lock:
            self.errors += 1

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(KILL_EVERY):
            with self._lock:
                pids = sorted(self.pids)
            with self._admin.connect() as conn:
                killed = conn.execute(
                    text(
                        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE pid = ANY(:pids) AND pid <> pg_backend_pid()"
                    ),
                    {"pids": pids},
                ).scalar_one()
            self.killed += int(killed)
            self.rounds += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        event.remove(self._engine, "checkout", self._checked_out)
        event.remove(self._engine, "handle_error", self._failed)
        self._admin.dispose()


def test_pool_drains_every_job_exactly_once_while_its_connections_are_killed(
    app: Tether, caplog: pytest.LogCaptureFixture
) -> None:
    executions = Executions()

    @app.handler("connloss.record")
    def record(payload: dict[str, Any], ctx: Any) -> None:
        time.sleep(0.004)  # long enough that the drain spans many kill rounds
        executions.record(ctx.job.id)

    results = app.enqueue_many([EnqueueRequest("connloss.record", {"n": n}) for n in range(JOBS)])
    job_ids = {result.job.id for result in results}
    assert len(job_ids) == JOBS

    caplog.set_level(logging.WARNING, logger="tether")
    killer = BackendKiller(app.repository.engine)  # type: ignore[attr-defined]
    pool = app.worker(concurrency=CONCURRENCY, lease_timeout=120, reap_interval=1.0, drain_timeout=10)
    killer.start()
    pool.start()
    try:
        executions.wait_for_drain(app, JOBS, timeout=90)
        threads = [t for t in threading.enumerate() if t.name.startswith("tether-")]
        alive = collections.Counter(t.name for t in threads if t.is_alive())
    finally:
        killer.stop()
        stats = pool.stop()

    records = [r for r in caplog.records if r.name.startswith("tether")]
    print(f"kill rounds {killer.rounds}, backends killed {killer.killed}, statements failed {killer.errors}, log records {len(records)}, stats {stats}")
    # The killing really happened, many times, while the pool worked.
    assert killer.rounds >= 5 and killer.killed >= 5, (killer.rounds, killer.killed)
    # Every job completed, each handler ran once, nothing is left behind.
    executions.assert_each_ran_once(app, job_ids)
    assert stats.completed == JOBS and stats.lease_lost == 0 and stats.failed == 0 and stats.dead == 0, stats
    # No worker thread died while its connections were being killed.
    assert alive[f"tether-worker-{CONCURRENCY - 1}"] == 1 and alive["tether-acquire"] == 1, alive
    assert sum(1 for name in alive if name.startswith("tether-worker-")) == CONCURRENCY, alive
    assert alive["tether-heartbeat"] == 1, alive
    # Logs: bounded by the incidents, and nothing logged as a crash.
    assert len(records) <= 3 * killer.killed + 20, (len(records), killer.killed)
    assert [r.getMessage() for r in records if r.levelno >= logging.ERROR] == []
