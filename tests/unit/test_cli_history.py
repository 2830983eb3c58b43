"""The attempt history where people read it: ``tether jobs show`` (one line per attempt, and
``--json``), ``app.get``, and a worker pool's own outcomes; no lease token in any of them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tether.domain.history import AttemptOutcome
from tether.domain.job import JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.cli import app
from tether.entrypoints.container import connect
from typer.testing import CliRunner

T0 = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("TETHER_DATABASE_URL", "TETHER_REDIS_URL", "TETHER_SCHEMA", "TETHER_APP"):
        monkeypatch.delenv(name, raising=False)
    return f"sqlite:///{tmp_path / 'jobs.db'}"


def show(db: str, job_id: int, *options: str) -> Any:
    result = CliRunner().invoke(app, ["jobs", "show", str(job_id), "--database-url", db, *options])
    assert result.exit_code == 0, result.output
    return result.output


def three_attempts(db: str) -> tuple[int, list[str]]:
    """A job that failed on w-1, was released by w-2 at shutdown (the attempt given back, so the
    next one is #2 again), and completed on w-3; its tokens."""
    tether_app = connect(db)
    try:
        job = tether_app.enqueue("reports.build", {"n": 1}, run_at=T0).job
        repo, tokens = tether_app.repository, []

        def lease(worker: str, at: float) -> str:
            (leased,) = repo.lease(queues=None, worker_id=worker, now=T0 + timedelta(seconds=at), lease_timeout=60)
            tokens.append(leased.lease_token or "")
            return tokens[-1]

        repo.fail(job.id, lease("w-1", 0), now=T0 + timedelta(seconds=1.5), error="ValueError: no [b]ucket\nline 2",
                  retry_at=T0 + timedelta(seconds=2))
        repo.release(job.id, lease("w-2", 2), now=T0 + timedelta(seconds=4))
        repo.complete(job.id, lease("w-3", 5), now=T0 + timedelta(seconds=65))
        return job.id, tokens
    finally:
        tether_app.close()


def test_jobs_show_prints_one_line_per_attempt(db: str) -> None:
    job_id, tokens = three_attempts(db)
    output = show(db, job_id)
    lines = output.splitlines()
    start = lines.index("history: 3 attempt(s), oldest first, times UTC (at most 20 kept)")
    assert lines[start + 1:start + 4] == [
        "  #1    failed      2026-05-01 09:30:00      1.5 s  w-1  ValueError: no [b]ucket",
        "  #2    released    2026-05-01 09:30:02      2.0 s  w-2",
        "  #2    completed   2026-05-01 09:30:05      1 min  w-3",
    ]
    assert not any(token in output for token in tokens)


def test_jobs_show_says_a_short_attempt_in_milliseconds_as_the_dashboard_does(db: str) -> None:
    tether_app = connect(db)
    try:
        job = tether_app.enqueue("reports.build", {}, run_at=T0).job
        (leased,) = tether_app.repository.lease(queues=None, worker_id="w-1", now=T0, lease_timeout=60)
        tether_app.repository.fail(job.id, leased.lease_token or "", now=T0 + timedelta(seconds=0.006_09),
                                   error="ValueError: flaky", retry_at=T0 + timedelta(seconds=1))
    finally:
        tether_app.close()
    assert "  #1    failed      2026-05-01 09:30:00       6 ms  w-1  ValueError: flaky" in show(db, job.id).splitlines()
    assert json.loads(show(db, job.id, "--json"))["history"][0]["ended_at"] == "2026-05-01T09:30:00.006090+00:00"


def test_jobs_show_json_carries_the_history(db: str) -> None:
    job_id, tokens = three_attempts(db)
    output = show(db, job_id, "--json")
    shown = json.loads(output)
    assert shown["history"] == [
        {"attempt": 1, "after_retry": False, "worker_id": "w-1", "started_at": "2026-05-01T09:30:00+00:00",
         "ended_at": "2026-05-01T09:30:01.500000+00:00", "outcome": "failed", "error": "ValueError: no [b]ucket\nline 2"},
        {"attempt": 2, "after_retry": False, "worker_id": "w-2", "started_at": "2026-05-01T09:30:02+00:00",
         "ended_at": "2026-05-01T09:30:04+00:00", "outcome": "released", "error": None},
        {"attempt": 2, "after_retry": False, "worker_id": "w-3", "started_at": "2026-05-01T09:30:05+00:00",
         "ended_at": "2026-05-01T09:31:05+00:00", "outcome": "completed", "error": None},
    ]
    assert not any(token in output for token in tokens)


def test_jobs_show_marks_the_attempts_after_a_manual_retry(db: str) -> None:
    """A dead job retried by hand counts its attempts from 1 again: the line (and the JSON entry)
    of the first attempt after the retry says so; a released attempt's repeat number does not."""
    tether_app = connect(db)
    try:
        job = tether_app.enqueue("reports.build", {}, run_at=T0, max_attempts=1).job
        repo = tether_app.repository
        (leased,) = repo.lease(queues=None, worker_id="w-1", now=T0, lease_timeout=60)
        repo.fail(job.id, leased.lease_token or "", now=T0 + timedelta(seconds=1), error="ValueError: no", retry_at=None)
        tether_app.retry(job.id)
        (again,) = repo.lease(queues=None, worker_id="w-2", now=T0 + timedelta(days=400), lease_timeout=60)
        repo.complete(job.id, again.lease_token or "", now=T0 + timedelta(days=400, seconds=2))
    finally:
        tether_app.close()
    lines = [line for line in show(db, job.id).splitlines() if line.startswith("  ")]
    history = [line for line in lines if "#1" in line]
    assert len(history) == 2
    assert history[0].startswith("  #1    dead") and history[1].startswith("  after a retry: #1    completed")
    entries = json.loads(show(db, job.id, "--json"))["history"]
    assert [(e["attempt"], e["outcome"], e["after_retry"]) for e in entries] == [(1, "dead", False), (1, "completed", True)]


def test_a_job_without_an_ended_attempt_says_so(db: str) -> None:
    tether_app = connect(db)
    try:
        job_id = tether_app.enqueue("reports.build", {}).job.id
    finally:
        tether_app.close()
    assert "history: no attempt has ended yet" in show(db, job_id)
    assert json.loads(show(db, job_id, "--json"))["history"] == []


def test_app_get_returns_the_history_a_worker_pool_wrote(db: str) -> None:
    """A real pool: the first run fails, the retry completes; each entry names the pool's worker
    id, and ``app.get`` (like every public read) hides the lease token."""
    tether_app = connect(db)
    calls: list[int] = []
    try:
        @tether_app.handler("flaky")
        def flaky(payload: Any) -> None:
            calls.append(1)
            if len(calls) == 1:
                raise ConnectionError("refused")

        job_id = tether_app.enqueue("flaky", {}).job.id
        tether_app.retry_policy = RetryPolicy(base_seconds=0.01, cap_seconds=0.01)
        pool = tether_app.worker(concurrency=1, max_wait=0.05, worker_id="pool-7")
        pool.run(stop_when_idle=True, install_signal_handlers=False)
        job = tether_app.get(job_id)
    finally:
        tether_app.close()
    assert job.status is JobStatus.COMPLETED and job.lease_token is None
    assert [(a.number, a.worker_id, a.outcome, a.error) for a in job.history] == [
        (1, "pool-7", AttemptOutcome.FAILED, "ConnectionError: refused"),
        (2, "pool-7", AttemptOutcome.COMPLETED, None),
    ]
    assert all(a.started_at is not None and a.started_at <= a.ended_at for a in job.history)
