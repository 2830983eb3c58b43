"""``tether workers list`` and ``tether jobs why`` on a SQLite file: tables, JSON, unknown ids; and the
note ``tether enqueue`` prints when live workers of the job's queue wait on Redis Streams."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tether.adapters.sqlalchemy import SqlAlchemyJobRepository, open_repository
from tether.domain.workers import WorkerEntry
from tether.entrypoints.cli import app
from typer.testing import CliRunner

from tests.unit.test_cli import SETTINGS_VARIABLES


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SETTINGS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture
def repo(db: str) -> Iterator[SqlAlchemyJobRepository]:
    repository = open_repository(db)
    yield repository
    repository.close()


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def record(repo: SqlAlchemyJobRepository, worker_id: str, *, seen_ago: float = 0.0, **changes: Any) -> WorkerEntry:
    now = datetime.now(UTC)
    fields: dict[str, Any] = {
        "worker_id": worker_id, "host": "box-1", "pid": 4321, "queues": None, "job_types": ("reports.build",),
        "concurrency": 8, "version": "0.1.0", "dispatcher": "polling", "heartbeat_interval": 60.0,
        "started_at": datetime(2026, 3, 1, 9, 30, tzinfo=UTC), "last_seen_at": now - timedelta(seconds=seen_ago),
    }
    fields.update(changes)
    entry = WorkerEntry(**fields)
    repo.record_worker(entry)
    return entry


# -- workers list ------------------------------------------------------------------------------------
def test_workers_list_of_an_empty_registry(db: str, repo: SqlAlchemyJobRepository) -> None:
    result = cli("workers", "list", "--database-url", db)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "0 worker pool(s): 0 alive, 0 gone"
    assert json.loads(cli("workers", "list", "--database-url", db, "--json").output) == {"workers": []}


def test_workers_list_shows_alive_and_gone_pools_as_a_table_and_as_json(db: str, repo: SqlAlchemyJobRepository) -> None:
    alive = record(repo, "box-1-4321-aaaaaa", queues=("default", "emails"), job_types=("emails.send", "reports.build"))
    record(repo, "box-2-99-bbbbbb", seen_ago=600, dispatcher="redis", host="box-2", pid=99, concurrency=2)
    result = cli("workers", "list", "--database-url", db)
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    assert lines[0] == "2 worker pool(s): 1 alive, 1 gone"
    rows = {line.split()[0]: line.split() for line in lines if line.startswith("box-")}
    assert rows["box-1-4321-aaaaaa"][:6] == ["box-1-4321-aaaaaa", "alive", "box-1", "4321", "default,", "emails"]
    assert rows["box-2-99-bbbbbb"][:5] == ["box-2-99-bbbbbb", "gone", "box-2", "99", "all"]
    assert "redis" in rows["box-2-99-bbbbbb"] and "2026-03-01" in rows["box-2-99-bbbbbb"]

    data = json.loads(cli("workers", "list", "--database-url", db, "--json").output)
    first = data["workers"][0]
    assert first == {
        "worker_id": "box-1-4321-aaaaaa", "status": "alive", "host": "box-1", "pid": 4321,
        "queues": ["default", "emails"], "job_types": ["emails.send", "reports.build"], "concurrency": 8,
        "dispatcher": "polling", "version": "0.1.0", "heartbeat_interval": 60.0,
        "started_at": "2026-03-01T09:30:00+00:00", "last_seen_at": alive.last_seen_at.isoformat(),
    }
    assert (data["workers"][1]["status"], data["workers"][1]["queues"]) == ("gone", None)


def test_workers_list_does_not_create_a_database(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    result = cli("workers", "list", "--database-url", f"sqlite:///{path}")
    assert result.exit_code == 2 and "no SQLite database at" in result.output
    assert not path.exists()


# -- jobs why ----------------------------------------------------------------------------------------
def enqueue(db: str, *args: str) -> int:
    result = cli("enqueue", "reports.build", "--database-url", db, "--json", *args)
    assert result.exit_code == 0, result.output
    return int(json.loads(result.stdout)["job"]["id"])


def test_jobs_why_prints_the_verdict_then_the_facts(db: str, repo: SqlAlchemyJobRepository) -> None:
    first = enqueue(db)
    result = cli("jobs", "why", str(first), "--database-url", db)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"job {first}: no live worker handles job type reports.build on queue default"
    facts = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in lines[1:]}
    assert list(facts) == ["status", "job_type", "queue", "priority", "attempts", "max_attempts", "created_at", "due_at",
                           "due_ahead", "live_workers"]
    assert (facts["status"], facts["due_ahead"], facts["live_workers"]) == ("queued", "0", "none")
    assert facts["due_at"].endswith(" UTC")

    record(repo, "w-1")
    second = enqueue(db)
    assert cli("jobs", "why", str(second), "--database-url", db).output.splitlines()[0] == (
        f"job {second}: waiting behind 1 due job of queue default that goes first")
    data = json.loads(cli("jobs", "why", str(second), "--database-url", db, "--json").output)
    assert (data["job_id"], data["status"], data["reason"]) == (second, "queued", "waiting")
    assert data["verdict"] == "waiting behind 1 due job of queue default that goes first"
    assert data["facts"]["due_ahead"] == 1 and data["facts"]["due_ahead_capped"] is False
    assert data["facts"]["live_workers"] == ["w-1"]
    assert datetime.fromisoformat(data["facts"]["due_at"]).tzinfo is not None


def test_jobs_why_of_a_running_and_a_dead_job_never_shows_the_token(db: str, repo: SqlAlchemyJobRepository) -> None:
    running, doomed = enqueue(db, "--priority", "5"), enqueue(db)
    now = datetime.now(UTC)
    record(repo, "w-1")
    held, dying = repo.lease(queues=None, worker_id="w-1", now=now, lease_timeout=600, limit=2)
    assert (held.id, dying.id) == (running, doomed) and held.lease_token and dying.lease_token
    repo.dead_letter(dying.id, dying.lease_token, now=now, error="ValueError: boom")
    text = cli("jobs", "why", str(running), "--database-url", db).output
    assert text.startswith(f"job {running}: running on worker w-1 since ")
    assert "(worker w-1 is alive, last seen 0 s ago)" in text.splitlines()[0]
    assert "  worker_status:       alive" in text.splitlines()
    as_json = cli("jobs", "why", str(running), "--database-url", db, "--json").output
    assert held.lease_token not in text and held.lease_token not in as_json
    assert "lease_token" not in as_json and json.loads(as_json)["facts"]["leased_by"] == "w-1"
    assert cli("jobs", "why", str(doomed), "--database-url", db).output.splitlines()[0] == (
        f"job {doomed}: dead after 1 attempt; last error: ValueError: boom")


def test_jobs_why_of_an_unknown_job_is_one_line_exit_2(db: str, repo: SqlAlchemyJobRepository) -> None:
    result = cli("jobs", "why", "424242", "--database-url", db)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["tether: error: job 424242: not found"]
    bad = cli("jobs", "why", "seven", "--database-url", db)
    assert bad.exit_code == 2 and bad.output.strip() == "tether: error: ID: must be an integer, got 'seven'"


# -- enqueue and workers on Redis Streams ------------------------------------------------------------
NOTE = ("tether: note: 1 live worker pool of queue default waits on Redis Streams (e.g. r-1); without --redis-url "
        "(or TETHER_REDIS_URL) they see this job only at their next sweep, seconds late")


def test_enqueue_without_a_redis_url_says_once_when_live_workers_of_its_queue_use_redis(
    db: str, repo: SqlAlchemyJobRepository
) -> None:
    def stderr_of(*args: str) -> str:
        result = cli("enqueue", "reports.build", "--database-url", db, *args)
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith("enqueued job ") or result.stdout.startswith("{")
        return result.stderr

    assert stderr_of() == ""  # no worker at all
    record(repo, "p-1")  # polling
    record(repo, "r-gone", dispatcher="redis", seen_ago=3600)
    record(repo, "r-other", dispatcher="redis", queues=("emails",))
    assert stderr_of() == ""
    record(repo, "r-1", dispatcher="redis")
    assert stderr_of() == NOTE + "\n"
    assert stderr_of("--json") == NOTE + "\n"  # stdout stays JSON
    assert stderr_of("--queue", "reports") == NOTE.replace("queue default", "queue reports") + "\n"
    record(repo, "r-2", dispatcher="redis")
    assert stderr_of().startswith("tether: note: 2 live worker pools of queue default wait on Redis Streams (e.g. r-1)")
    again = cli("enqueue", "reports.build", "--database-url", db, "--idempotency-key", "k")
    assert again.stderr == NOTE.replace("1 live worker pool of queue default waits", "2 live worker pools of queue default wait") + "\n"
    duplicate = cli("enqueue", "reports.build", "--database-url", db, "--idempotency-key", "k")
    assert duplicate.exit_code == 0 and duplicate.stderr == ""  # nothing enqueued: nothing to say
