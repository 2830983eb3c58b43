"""The Tether app that the chaos test's worker processes run (``tether worker --app
tests.chaos.chaos_app:app``), configured from the environment the test gives each process.

Environment (all set by tests/chaos/test_chaos.py):

- ``TETHER_CHAOS_DATABASE_URL`` / ``TETHER_CHAOS_SCHEMA``: the test server and this run's schema;
- ``TETHER_CHAOS_REDIS_URL``: the private ``redis-server`` of the run;
- ``TETHER_CHAOS_APP_NAME``: the ``application_name`` of every connection of the app's engine,
  so the test can terminate these backends (and only these) on the shared server;
- ``TETHER_CHAOS_PARENT``: the test process's pid: a worker whose parent is gone dies at once
  (even a stopped one), so a test killed outright leaves no worker behind.

The one handler, ``chaos.work``, sleeps a few milliseconds, then records its execution (job id,
lease token, attempt, pid) in ``chaos_executions`` on a connection of its own, committed before
it returns, and then ends as the payload's ``kind`` says: ``ok`` returns, ``permanent`` raises
:class:`tether.PermanentError`, ``always`` raises an ordinary error (retried until its
``max_attempts`` are used up).
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import threading
import time
import uuid
from typing import Any

import psycopg
import tether
from sqlalchemy import event

DATABASE_URL = os.environ["TETHER_CHAOS_DATABASE_URL"]
SCHEMA = os.environ["TETHER_CHAOS_SCHEMA"]
APP_NAME = os.environ["TETHER_CHAOS_APP_NAME"]
PARENT = int(os.environ["TETHER_CHAOS_PARENT"])
#: Short dispatcher timings so a Redis restarted empty is healed within a second or two.
REDIS_OPTIONS = {"block": 0.2, "claim_idle": 2.0, "sweep_interval": 1.0}
#: Retries of the ``always`` jobs come back within a second or two (base 0.2 s doubling, cap 1 s).
RETRY_POLICY = tether.RetryPolicy(base_seconds=0.2, cap_seconds=1.0)
#: Handler time, seconds: uniform in this range before the execution is recorded.
WORK_SECONDS = (0.002, 0.006)
#: Attempts of the execution record's INSERT (reconnecting between them) before the handler fails.
RECORD_TRIES = 5

app = tether.connect(
    DATABASE_URL,
    schema=SCHEMA,
    redis_url=os.environ["TETHER_CHAOS_REDIS_URL"],
    redis_options=dict(REDIS_OPTIONS),
    retry_policy=RETRY_POLICY,
    pool_size=3,
    create=False,
)


@event.listens_for(app.repository.engine, "do_connect")  # type: ignore[attr-defined]
def _name_connection(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
    cparams["application_name"] = APP_NAME


app.repository.engine.dispose()  # type: ignore[attr-defined]  # the connections opened so far carry the default name


class Recorder:
    """One autocommit psycopg connection of this process (not the app's, and not one the test
    terminates), shared by the handler threads under a lock."""

    def __init__(self) -> None:
        self._conninfo = DATABASE_URL.replace("postgresql+psycopg://", "postgresql://", 1)
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    def record(self, job_id: int, token: str, attempt: int) -> None:
        """Insert one execution row and commit it; an insert whose outcome is unknown is repeated
        under the same execution id, so it is stored once.  Raises the last error after
        :data:`RECORD_TRIES` failed tries."""
        execution = uuid.uuid4().hex
        for tries_left in range(RECORD_TRIES - 1, -1, -1):
            try:
                with self._lock:
                    if self._conn is None or self._conn.closed:
                        self._conn = psycopg.connect(
                            self._conninfo, autocommit=True, application_name=f"{APP_NAME}-rec", connect_timeout=10
                        )
                    self._conn.execute(
                        f'INSERT INTO "{SCHEMA}".chaos_executions (execution, job_id, token, attempt, pid) '
                        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (execution) DO NOTHING",
                        (execution, job_id, token, attempt, os.getpid()),
                    )
                return
            except psycopg.Error:
                with self._lock:
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = None
                if not tries_left:
                    raise
                time.sleep(0.2)


recorder = Recorder()


@app.handler("chaos.work")
def work(payload: dict[str, Any], ctx: tether.JobContext) -> None:
    time.sleep(random.uniform(*WORK_SECONDS))
    recorder.record(ctx.job.id, ctx.token, ctx.attempt)
    if payload["kind"] == "permanent":
        raise tether.PermanentError(f"designed permanent failure of job {payload['n']}")
    if payload["kind"] == "always":
        raise RuntimeError(f"designed failure of job {payload['n']}, attempt {ctx.attempt}")


def _die_with_parent() -> None:
    """Linux: the kernel SIGKILLs this process when its parent dies (even while it is stopped by
    the test's SIGSTOP); elsewhere, and should the parent be gone already, a thread exits as soon
    as the parent changes."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (AttributeError, OSError):
        pass

    def watch() -> None:
        while os.getppid() == PARENT:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, name="chaos-orphan-watch", daemon=True).start()


PR_SET_PDEATHSIG = 1
_die_with_parent()
