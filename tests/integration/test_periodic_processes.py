"""Three worker processes on one PostgreSQL schema share an ``every=1`` schedule: over twelve ticks
each tick enqueues exactly one job, none more than one period ahead, and each runs once.

The processes are real ones (``tether.connect`` and ``app.worker(...).run()`` in a child
interpreter each, stopped by SIGTERM), so the schedule's compare-and-set on ``tether_schedules`` is
all that keeps them from enqueuing a tick twice; ``test_periodic_pools.py`` runs the same rule
with three pools of one process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tether.domain.job import JobStatus
from tether.domain.schedules import is_tick_key

from tests.conftest import DATABASE_URL
from tests.integration.test_periodic_pools import TICKS, check_one_job_per_tick
from tests.postgres_fixtures import schema_name, temporary_app

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PROCESSES = 3

CHILD = textwrap.dedent(
    """
    import os, sys
    import tether

    url, schema, runs = sys.argv[1], sys.argv[2], sys.argv[3]
    app = tether.connect(url, schema=schema, create=False, poll_interval=0.1, pool_size=4)

    @app.periodic(every=1, overlap=True)
    @app.handler("beat")
    def beat(payload, ctx):
        with open(runs, "a") as f:  # one short line per run: job id and process
            f.write(f"{ctx.job.id} {os.getpid()}\\n")

    print("READY", flush=True)
    app.worker(concurrency=2, max_wait=0.1, heartbeat_interval=1.0, lease_timeout=30).run()
    app.close()
    """
)


def test_three_worker_processes_enqueue_each_tick_of_an_every_second_schedule_once(tmp_path: Path) -> None:
    with temporary_app(schema_name("periodic_processes"), poll_interval=0.1) as app:
        schema = app.repository.schema  # type: ignore[attr-defined]
        script, runs = tmp_path / "child.py", tmp_path / "runs.txt"
        script.write_text(CHILD)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        children = [
            subprocess.Popen([sys.executable, str(script), DATABASE_URL, schema, str(runs)], stdout=subprocess.PIPE, env=env)
            for _ in range(PROCESSES)
        ]
        try:
            for child in children:
                assert child.stdout is not None and child.stdout.readline().strip() == b"READY"
            deadline = time.monotonic() + TICKS + 10
            while time.monotonic() < deadline:
                ticks = [j for j in app.list(limit=1000) if is_tick_key(j.idempotency_key)]
                done = [j for j in ticks if j.status is JobStatus.COMPLETED]
                if len(done) >= TICKS + 1:
                    break
                time.sleep(0.2)
        finally:
            for child in children:
                child.send_signal(signal.SIGTERM)
            for child in children:
                try:
                    assert child.wait(timeout=30) == 0
                finally:
                    if child.poll() is None:
                        child.kill()
        _, window = check_one_job_per_tick(app)  # whichever process enqueued each tick
        assert all(j.status is JobStatus.COMPLETED for j in window)
        run_ids = [int(line.split()[0]) for line in runs.read_text().splitlines()]
        assert len(run_ids) == len(set(run_ids)), "a tick's job ran twice"
        assert {j.id for j in window} <= set(run_ids)
