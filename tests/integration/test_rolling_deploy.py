"""A rolling deploy: two worker processes on one PostgreSQL store, only one of them with the handler
of a new job type.  The old worker hands those jobs back (no attempt used) instead of sending them
to ``dead``; every one of them is completed, once, by the worker that has the handler.

Run with polling and with Redis Streams (where a job handed back must be published again, or only
the sweep would find it).  The job type's hand-back delay is shortened to 1 s in the children; the
waits are bounded and nothing is timed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import redis
import tether
from tether.adapters.clock import SystemClock
from tether.adapters.sqlalchemy import PostgresJobRepository
from tether.domain.job import JobStatus

from tests.conftest import DATABASE_URL, REDIS_URL, redis_connection, wait_for
from tests.postgres_fixtures import schema_name, temporary_repository
from tests.redis_fixtures import temporary_prefix

JOBS = 100

CHILD = textwrap.dedent(
    """
    import json, os, sys
    import attrs
    import tether
    from tether.entrypoints import execution

    execution.UNKNOWN_TYPE_SNOOZE = 1.0
    url, schema, redis_url, prefix, capable, records = sys.argv[1:7]
    options = {"poll_interval": 0.05}
    if redis_url != "-":
        options.update(redis_url=redis_url, redis_options={"prefix": prefix})
    app = tether.connect(url, schema=schema, create=False, **options)

    @app.handler("mail.send")  # both versions know this one
    def send(payload):
        pass

    if capable == "yes":  # only the new version knows this one
        @app.handler("reports.build")
        def build(payload, ctx):
            line = json.dumps({"job": ctx.job.id, "pid": os.getpid(), "attempt": ctx.attempt}) + "\\n"
            fd = os.open(records, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    print("READY", flush=True)
    stats = app.worker(concurrency=4, lease_timeout=30, reap_interval=0.5, max_wait=0.2).run()
    print("STATS " + json.dumps(attrs.asdict(stats)), flush=True)
    app.close()
    """
)


@pytest.fixture
def store() -> Iterator[PostgresJobRepository]:
    with temporary_repository(schema_name(f"deploy{time.monotonic_ns() % 1_000_000}")) as repo:
        yield repo


def start(script: Path, store: PostgresJobRepository, redis_url: str, prefix: str, capable: bool, records: Path) -> Any:
    child = subprocess.Popen(
        [sys.executable, str(script), DATABASE_URL, store.schema or "", redis_url, prefix, "yes" if capable else "no",
         str(records)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.strip() == "READY", line + child.stderr.read() if child.stderr else line
    return child


def stop(child: Any) -> dict[str, int]:
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    stats = [line for line in out.splitlines() if line.startswith("STATS ")]
    assert stats, out + err
    return json.loads(stats[-1][len("STATS "):])


@pytest.mark.postgres
@pytest.mark.parametrize("dispatch", ["polling", pytest.param("redis", marks=pytest.mark.redis)])
def test_jobs_of_a_type_one_worker_lacks_all_run_on_the_one_that_has_it(
    store: PostgresJobRepository, tmp_path: Path, dispatch: str
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(CHILD)
    records = tmp_path / "records.jsonl"
    redis_url = REDIS_URL if dispatch == "redis" else "-"
    client: redis.Redis | None = redis_connection() if dispatch == "redis" else None
    with temporary_prefix(client, "deploy") if client is not None else nullcontext("-") as prefix:
        old = start(script, store, redis_url, prefix, capable=False, records=records)  # the old version runs first
        new = None
        try:
            producer = tether.connect(DATABASE_URL, schema=store.schema, create=False,
                               **({"redis_url": REDIS_URL, "redis_options": {"prefix": prefix}} if client else {}))
            try:
                ids = [producer.enqueue("reports.build", {"n": n}).job.id for n in range(JOBS)]
                mail = [producer.enqueue("mail.send", {"n": n}).job.id for n in range(10)]
            finally:
                producer.close()
            # the old worker meets the new jobs first and hands them back, due a little later
            wait_for(lambda: len(store.due_jobs(now=SystemClock().now(), queues=None, limit=JOBS + 10)) < JOBS + 10,
                     what="the old worker to hand back some jobs")
            new = start(script, store, redis_url, prefix, capable=True, records=records)
            wait_for(lambda: store.count_by_status(job_types=["reports.build"])[JobStatus.COMPLETED] == JOBS,
                     timeout=120, what="every reports.build job to complete")
            wait_for(lambda: store.count_by_status(job_types=["mail.send"])[JobStatus.COMPLETED] == len(mail),
                     what="the mail jobs to complete")
        finally:
            old_stats = stop(old)
            new_stats = stop(new) if new is not None else None
        if client is not None:
            client.close()
    assert new_stats is not None
    jobs = [store.get(job_id) for job_id in ids]
    assert {job.status for job in jobs} == {JobStatus.COMPLETED}  # none dead
    assert {job.attempts for job in jobs} == {1}  # handing back used no attempt
    runs = [json.loads(line) for line in records.read_text().splitlines()]
    assert sorted(run["job"] for run in runs) == sorted(ids)  # each run exactly once ...
    assert {run["pid"] for run in runs} == {new.pid}  # ... by the worker that has the handler
    assert old_stats["no_handler"] >= 1 and old_stats["dead"] == 0 and new_stats["dead"] == 0
    assert new_stats["completed"] + old_stats["completed"] == JOBS + len(mail)
