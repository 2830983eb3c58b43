"""Recovery at the default settings: a ``tether worker`` process killed with SIGKILL in the middle
of a job, and the job running again in another worker process within two minutes.

Both workers are real ``tether worker`` processes on one SQLite file, started with no timing flag
and no ``TETHER_*`` timing variable, so the lease (60 s), heartbeat (10 s) and reaper (15 s)
intervals are the defaults.  Before the kill the running job's lease is seen extended by a
heartbeat, so a long handler keeps its lease at these settings.  The test takes about a minute
and a half (the lease has to run out).
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
from tether.adapters.sqlalchemy import open_repository
from tether.domain.job import JobStatus
from tether.entrypoints.settings import DEFAULT_LEASE_TIMEOUT, DEFAULT_REAP_INTERVAL

APP = textwrap.dedent(
    """
    import json, os, sys, time
    import tether

    app = tether.connect(os.environ["CRASH_DATABASE_URL"])

    @app.handler("long")
    def long(payload, ctx):
        line = json.dumps({"attempt": ctx.attempt, "pid": os.getpid(), "at": time.time()}) + "\\n"
        with open(os.environ["CRASH_RECORDS"], "a") as records:
            records.write(line)
            records.flush()
            os.fsync(records.fileno())
        if ctx.attempt == 1:
            ctx.sleep(600)  # the test kills this worker meanwhile
    """
)
#: The promise: a killed worker's job runs again within this many seconds.
RECOVERY_BOUND = 120.0


def worker_environment(tmp_path: Path, url: str) -> dict[str, str]:
    """The test's environment without any TETHER_* setting (the defaults apply), plus the app's."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("TETHER_")}
    env.update(CRASH_DATABASE_URL=url, CRASH_RECORDS=str(tmp_path / "records.jsonl"), PYTHONPATH=str(tmp_path))
    return env


def start_worker(tmp_path: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether.entrypoints.cli", "worker", "--app", "crash_app:app", *extra],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def records(tmp_path: Path) -> list[dict]:
    path = tmp_path / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_a_job_of_a_killed_worker_runs_again_within_two_minutes_at_default_settings(tmp_path: Path) -> None:
    assert DEFAULT_LEASE_TIMEOUT + DEFAULT_REAP_INTERVAL < RECOVERY_BOUND
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    (tmp_path / "crash_app.py").write_text(APP)
    env = worker_environment(tmp_path, url)
    repo = open_repository(url)
    processes: list[subprocess.Popen[str]] = []
    try:
        import tether

        with tether.connect(url) as producer:
            job_id = producer.enqueue("long").job.id
        a = start_worker(tmp_path, env)
        processes.append(a)
        deadline = time.monotonic() + 60
        while not records(tmp_path):
            assert a.poll() is None, a.communicate()[1]
            assert time.monotonic() < deadline, "worker A never started the job"
            time.sleep(0.05)
        first = repo.get(job_id)
        assert first.status is JobStatus.RUNNING and first.lease_expires_at is not None
        # the default heartbeat (every 10 s) extends the lease of the long handler
        while (held := repo.get(job_id)).lease_expires_at == first.lease_expires_at:
            assert time.monotonic() < deadline + 30, "the running job's lease was never extended"
            time.sleep(0.2)
        assert held.status is JobStatus.RUNNING and held.lease_expires_at > first.lease_expires_at  # type: ignore[operator]

        os.kill(a.pid, signal.SIGKILL)
        a.wait(timeout=10)
        killed_at = time.time()
        b = start_worker(tmp_path, env, "--until-idle")
        processes.append(b)
        _out, err = b.communicate(timeout=RECOVERY_BOUND + 60)
        assert b.returncode == 0, err
        runs = records(tmp_path)
        assert [r["attempt"] for r in runs] == [1, 2]
        assert runs[0]["pid"] == a.pid and runs[1]["pid"] == b.pid
        assert runs[1]["at"] - killed_at < RECOVERY_BOUND, runs
        final = repo.get(job_id)
        assert (final.status, final.attempts) == (JobStatus.COMPLETED, 2)
        assert final.last_error is not None and final.last_error.startswith("LeaseExpired:")
    finally:
        for proc in processes:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=10)
        repo.close()
