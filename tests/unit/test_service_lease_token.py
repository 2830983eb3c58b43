"""The lease token is the lease holder's alone: no job the ``Tether`` API (or the CLI) returns
carries it, even for a job running right now; only the repository port and the handler's
``ctx.token`` do."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.job import Job, JobStatus
from tether.domain.lease import without_token
from tether.entrypoints.cli import app as cli_app
from tether.entrypoints.container import connect
from tether.entrypoints.service import EnqueueRequest, Tether
from typer.testing import CliRunner


def running_app() -> tuple[Tether, FakeClock, Job]:
    """An app whose one job (idempotency key ``k``) is running under a lease right now."""
    clock = FakeClock()
    repo = InMemoryJobRepository()
    app = Tether(repo, PollingDispatcher(repo, clock), clock)
    app.enqueue("work", {"n": 1}, idempotency_key="k")
    [leased] = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
    assert leased.lease_token is not None and repo.get(leased.id).lease_token == leased.lease_token
    return app, clock, leased


def test_no_public_read_of_a_running_job_returns_its_lease_token() -> None:
    app, _clock, leased = running_app()
    got = app.get(leased.id)
    assert (got.status, got.lease_token, got.leased_by) == (JobStatus.RUNNING, None, "w")
    assert got == without_token(leased)  # everything else as stored
    assert [j.lease_token for j in app.list()] == [None]
    assert [j.lease_token for j in app.list(status="running")] == [None]

    again = app.enqueue("work", {"n": 2}, idempotency_key="k")  # the key's job is the running one
    assert (again.created, again.job.id, again.job.status, again.job.lease_token) == (False, leased.id, JobStatus.RUNNING, None)
    [batch] = app.enqueue_many([EnqueueRequest("work", idempotency_key="k")])
    assert (batch.created, batch.job.lease_token) == (False, None)

    # the repository port still carries it: the holder's writes go through
    assert app.repository.get(leased.id).lease_token == leased.lease_token


def test_reaped_and_retried_jobs_carry_no_token() -> None:
    app, clock, leased = running_app()
    clock.advance(61)
    reaped = app.reap()
    assert [(j.id, j.lease_token) for j in reaped] == [(leased.id, None)]
    job = app.repository.get(leased.id)
    while job.status is not JobStatus.DEAD:  # use up the attempts
        clock.advance(3600)
        [job] = app.repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
        job = app.repository.fail(job.id, job.lease_token or "", now=clock.now(), error="boom", retry_at=clock.now())
    assert app.retry(leased.id).lease_token is None


def test_a_job_without_a_token_is_returned_as_it_is() -> None:
    app, _clock, _leased = running_app()
    queued = app.enqueue("other").job
    assert queued.lease_token is None and without_token(queued) is queued


def test_the_cli_never_prints_a_running_jobs_lease_token(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    tether_app = connect(url)
    try:
        tether_app.enqueue("work", idempotency_key="k")
        [leased] = tether_app.repository.lease(queues=None, worker_id="w", now=datetime.now(UTC), lease_timeout=600)
    finally:
        tether_app.close()
    token = leased.lease_token
    assert token
    runner = CliRunner()
    outputs = [
        runner.invoke(cli_app, [*args, "--database-url", url])
        for args in (
            ["jobs", "show", str(leased.id), "--json"],
            ["jobs", "show", str(leased.id)],
            ["jobs", "list", "--json"],
            ["jobs", "list", "--status", "running"],
            ["enqueue", "work", "--idempotency-key", "k", "--json"],
        )
    ]
    for result in outputs:
        assert result.exit_code == 0, result.output
        assert token not in result.output and token[:12] not in result.output
    shown = json.loads(outputs[0].output)
    assert shown["status"] == "running" and shown["leased_by"] == "w"
    assert datetime.fromisoformat(shown["lease_expires_at"]) > datetime.now(UTC) + timedelta(seconds=500)


def test_a_jobs_repr_never_shows_its_lease_token() -> None:
    _app, _clock, leased = running_app()
    assert leased.lease_token is not None
    assert leased.lease_token not in repr(leased) and "lease_token" not in repr(leased)
    assert "leased_by='w'" in repr(leased)  # the rest of the job is still there
