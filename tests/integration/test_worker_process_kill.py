"""Workers that really die: cases C05 and C06 with real child processes on a SQLite file.

Each worker is a child process (``python child.py``) running ``app.worker(...).run(stop_when_idle=
True)`` on the same SQLite file; handlers append a line per run to a records file (fsynced before
anything else happens).  Leases are 2 s (10 s in C06), the reaper runs every 0.2 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.sqlalchemy import open_repository
from tether.domain.job import JobStatus
from tether.domain.validation import prepare_job

LEASE_TIMEOUT = 2.0

CHILD = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from tether.adapters.clock import SystemClock
    from tether.adapters.polling import PollingDispatcher
    from tether.adapters.sqlalchemy import open_repository
    from tether.entrypoints.service import Tether

    url, records, lease_timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    repo, clock = open_repository(url), SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock)

    def record(ctx, name):
        line = json.dumps({"name": name, "job": ctx.job.id, "attempt": ctx.attempt, "pid": os.getpid(),
                           "worker": ctx.worker_id, "at": time.time()}) + "\\n"
        fd = os.open(records, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    @app.handler("killer")
    def killer(payload, ctx):
        record(ctx, "killer")
        os.kill(os.getpid(), signal.SIGKILL)

    @app.handler("healthy")
    def healthy(payload, ctx):
        record(ctx, "healthy")
        time.sleep(0.05)

    @app.handler("hang_once")
    def hang_once(payload, ctx):
        record(ctx, "hang_once")
        if ctx.attempt == 1:
            ctx.sleep(120)   # the parent SIGKILLs this process meanwhile

    print("READY", flush=True)
    app.worker(concurrency=1, lease_timeout=lease_timeout, heartbeat_interval=lease_timeout / 4,
               reap_interval=0.2, drain_timeout=5).run(stop_when_idle=True)
    """
)


@pytest.fixture
def setup(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    repo = open_repository(url)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    records = tmp_path / "records.jsonl"
    yield url, repo, script, records
    repo.close()


def enqueue(repo, job_type: str, **kw) -> int:
    clock = SystemClock()
    return repo.enqueue(prepare_job(job_type, {}, now=clock.now(), **kw), now=clock.now()).job.id


def start_worker(url: str, script: Path, records: Path, lease_timeout: float = LEASE_TIMEOUT) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script), url, str(records), str(lease_timeout)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def read_records(records: Path) -> list[dict]:
    if not records.exists():
        return []
    return [json.loads(line) for line in records.read_text().splitlines() if line.strip()]


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=10)


@pytest.mark.slow
def test_c05_a_job_that_kills_its_worker_every_time_ends_dead_after_three_runs(setup) -> None:
    url, repo, script, records = setup
    killer = enqueue(repo, "killer", max_attempts=3, priority=10)
    healthy = [enqueue(repo, "healthy") for _ in range(10)]
    exits: list[int] = []
    # a supervisor: restart the worker whenever it dies, until one ends cleanly (queues idle)
    for _ in range(8):
        proc = start_worker(url, script, records)
        try:
            _out, err = proc.communicate(timeout=60)
        finally:
            stop(proc)
        exits.append(proc.returncode)
        if proc.returncode == 0:
            break
    assert exits[:3] == [-signal.SIGKILL] * 3 and exits[-1] == 0, (exits, err)
    runs = read_records(records)
    killer_runs = [r for r in runs if r["name"] == "killer"]
    assert [r["attempt"] for r in killer_runs] == [1, 2, 3]
    assert len({r["pid"] for r in killer_runs}) == 3
    final = repo.get(killer)
    assert (final.status, final.attempts, final.lease_token) == (JobStatus.DEAD, 3, None)
    assert final.last_error is not None and final.last_error.startswith("LeaseExpired:")
    assert "worker was lost" in final.last_error and "attempt 3 of 3" in final.last_error
    assert [repo.get(j).status for j in healthy] == [JobStatus.COMPLETED] * 10
    assert sorted(r["job"] for r in runs if r["name"] == "healthy") == sorted(healthy)  # each ran exactly once


@pytest.mark.slow
def test_c06_a_killed_workers_job_comes_back_and_does_not_hold_capacity(setup) -> None:
    url, repo, script, records = setup
    j = enqueue(repo, "hang_once", queue="q", priority=1)
    k = enqueue(repo, "healthy", queue="q")
    # a 10 s lease leaves worker B time to start before J's lease expires, even on a busy machine
    # (with 5 s, a start-up slowed by a loaded CI machine sometimes came after the expiry)
    a = start_worker(url, script, records, lease_timeout=10.0)
    try:
        deadline = time.monotonic() + 30
        while not any(r["name"] == "hang_once" for r in read_records(records)):
            assert time.monotonic() < deadline and a.poll() is None, "worker A never started J"
            time.sleep(0.02)
        os.kill(a.pid, signal.SIGKILL)
        a.wait(timeout=10)
    finally:
        stop(a)
    held = repo.get(j)
    assert (held.status, held.attempts) == (JobStatus.RUNNING, 1)
    assert repo.get(k).status is JobStatus.QUEUED  # capacity 1: A never took K
    expires = held.lease_expires_at
    assert expires is not None

    b = start_worker(url, script, records, lease_timeout=10.0)
    try:
        b.communicate(timeout=60)
    finally:
        stop(b)
    assert b.returncode == 0
    runs = read_records(records)
    j_runs = [r for r in runs if r["job"] == j]
    k_runs = [r for r in runs if r["job"] == k]
    assert [r["attempt"] for r in j_runs] == [1, 2]
    assert [r["attempt"] for r in k_runs] == [1]
    assert j_runs[0]["pid"] == a.pid and j_runs[1]["pid"] == b.pid == k_runs[0]["pid"]
    # B leased K at once, before J's lease had expired, and J only after the expiry
    assert k_runs[0]["at"] < expires.timestamp() <= j_runs[1]["at"]
    final_j = repo.get(j)
    assert (final_j.status, final_j.attempts) == (JobStatus.COMPLETED, 2)
    assert final_j.last_error is not None and final_j.last_error.startswith("LeaseExpired:")
    assert repo.get(k).status is JobStatus.COMPLETED
