"""A per-key running limit with real worker processes on PostgreSQL.

Four worker processes of eight threads each serve a queue with ``max_running_per_key=1`` and jobs
of ten concurrency keys, shuffled.  The handlers themselves count how many of them run at once,
per key and overall (a row per key locked and updated at each start and end, then the overall
row): the highest count of every key is exactly 1, and overall more than one key ran at once.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import tether
from sqlalchemy import text
from tether.domain.job import JobStatus
from tether.entrypoints.service import Tether

from tests.conftest import DATABASE_URL
from tests.postgres_fixtures import schema_name, temporary_app

pytestmark = pytest.mark.postgres

KEYS = [f"customer-{n}" for n in range(10)]
JOBS_PER_KEY = 12

CHILD = textwrap.dedent(
    """
    import sys, time
    import tether
    from sqlalchemy import text

    url, schema = sys.argv[1], sys.argv[2]
    app = tether.connect(url, schema=schema, poll_interval=0.05, pool_size=12)
    engine = app.repository.engine

    def bump(key, delta):
        with engine.begin() as conn:  # the key's row first, then the overall row: one lock order
            for name in (key, "*"):
                conn.execute(text(
                    f'UPDATE "{schema}".probe SET running = running + :d, peak = GREATEST(peak, running + :d) '
                    "WHERE name = :k"
                ), {"d": delta, "k": name})

    @app.handler("api.call", queue="api")
    def call(payload, ctx):
        bump(ctx.job.concurrency_key, 1)
        try:
            time.sleep(0.03)
        finally:
            bump(ctx.job.concurrency_key, -1)

    print("READY", flush=True)
    app.worker(concurrency=8, max_wait=0.2).run(stop_when_idle=True)
    """
)


@pytest.fixture
def app() -> Iterator[Tether]:
    with temporary_app(schema_name("key_limit_workers"), poll_interval=5.0) as application:
        yield application


def test_a_per_key_limit_of_one_holds_across_four_processes_of_eight_threads(app: Tether, tmp_path: Path) -> None:
    schema = app.repository.schema  # type: ignore[attr-defined]
    engine = app.repository.engine  # type: ignore[attr-defined]
    with engine.begin() as conn:
        conn.execute(text(f'CREATE TABLE "{schema}".probe (name text PRIMARY KEY, running int NOT NULL, peak int NOT NULL)'))
        for name in [*KEYS, "*"]:
            conn.execute(text(f'INSERT INTO "{schema}".probe VALUES (:k, 0, 0)'), {"k": name})
    app.limit_queue("api", max_running_per_key=1)
    keys = KEYS * JOBS_PER_KEY
    random.Random(7).shuffle(keys)
    app.enqueue_many([tether.EnqueueRequest("api.call", {"n": i}, queue="api", concurrency_key=k) for i, k in enumerate(keys)])
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen([sys.executable, str(script), DATABASE_URL, schema], stdout=subprocess.PIPE, env=env)
        for _ in range(4)
    ]
    try:
        for child in children:
            assert child.wait(timeout=180) == 0
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert app.counts("api")[JobStatus.COMPLETED] == len(keys)
    with engine.connect() as conn:
        rows = {name: (running, peak) for name, running, peak in conn.execute(text(f'SELECT * FROM "{schema}".probe'))}
    overall = rows.pop("*")
    assert all(running == 0 for running, _ in rows.values()) and overall[0] == 0
    peaks = {name: peak for name, (_, peak) in rows.items()}
    assert peaks == {k: 1 for k in KEYS}, f"the handlers saw these most of one key running at once: {peaks}"
    assert overall[1] > 1, "no two keys ever ran at once: the per-key limit held back the other keys"
