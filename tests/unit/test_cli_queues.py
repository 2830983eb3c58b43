"""``tether queues list | pause | resume | limit`` on a SQLite file: tables, JSON, and bad input
(one line naming the argument or flag, exit code 2, nothing written)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tether.adapters.sqlalchemy import SqlAlchemyJobRepository, open_repository
from tether.domain.validation import prepare_job
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


def test_pause_resume_limit_and_list(db: str, repo: SqlAlchemyJobRepository) -> None:
    now = datetime.now(UTC)
    repo.enqueue(prepare_job("mail.send", {}, now=now, queue="mail"), now=now)
    result = cli("queues", "pause", "mail", "--database-url", db)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "queue mail: paused, no running limit"
    result = cli("queues", "limit", "api", "--max-running", "3", "--database-url", db)  # a queue with no job yet
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "queue api: active, at most 3 running"
    listed = json.loads(cli("queues", "list", "--json", "--database-url", db).output)
    assert listed == {"queues": [
        {"name": "api", "paused": False, "max_running": 3, "max_running_per_key": None, "rate_limit": None, "rate_period": None,
         "counts": {"queued": 0, "running": 0, "retrying": 0, "completed": 0, "dead": 0, "cancelled": 0}},
        {"name": "mail", "paused": True, "max_running": None, "max_running_per_key": None, "rate_limit": None,
         "rate_period": None, "counts": {"queued": 1, "running": 0, "retrying": 0, "completed": 0, "dead": 0, "cancelled": 0}},
    ]}
    table = cli("queues", "list", "--database-url", db).output
    assert table.splitlines()[0] == "2 queue(s)" and "paused" in table and "active" in table
    resumed = json.loads(cli("queues", "resume", "mail", "--json", "--database-url", db).output)
    assert resumed["queue"]["paused"] is False and resumed["queue"]["name"] == "mail"
    rated = cli("queues", "limit", "api", "--rate", "100", "--per", "60", "--database-url", db)
    assert rated.exit_code == 0, rated.output
    assert rated.output.strip() == "queue api: active, at most 3 running, at most 100 per 60 s started"
    assert "100 per 60 s" in cli("queues", "list", "--database-url", db).output
    keyed = cli("queues", "limit", "api", "--max-running-per-key", "1", "--database-url", db)
    assert keyed.exit_code == 0, keyed.output
    assert keyed.output.strip() == "queue api: active, at most 3 running, at most 1 running per key, at most 100 per 60 s started"
    [api] = json.loads(cli("queues", "list", "--json", "--database-url", db).output)["queues"][:1]
    assert (api["max_running"], api["max_running_per_key"]) == (3, 1)
    header = cli("queues", "list", "--database-url", db).output.splitlines()[2]
    assert "per key" in header
    cleared = cli("queues", "limit", "api", "--clear", "--database-url", db)
    assert cleared.exit_code == 0 and cleared.output.strip() == "queue api: active, no running limit"
    assert [(s.name, s.paused, s.max_running, s.max_running_per_key, s.rate_limit) for s in repo.queue_states()] == [
        ("api", False, None, None, None), ("mail", False, None, None, None)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["limit", "api", "--max-running", "0"], "tether: error: --max-running: must be an integer from 1 to 1,000,000, got 0"),
        (["limit", "api", "--max-running", "-2"], "tether: error: --max-running: must be an integer from 1 to 1,000,000, got -2"),
        (["limit", "api", "--max-running", "lots"], "tether: error: --max-running: must be an integer from 1 to 1,000,000, got 'lots'"),
        (["limit", "api"], "tether: error: --max-running: give --max-running N, --max-running-per-key N, --rate N --per SECONDS, or --clear"),
        (["limit", "api", "--max-running", "2", "--clear"], "tether: error: --max-running: give --max-running N, --max-running-per-key N, --rate N --per SECONDS, or --clear"),
        (["limit", "api", "--max-running-per-key", "2", "--clear"], "tether: error: --max-running: give --max-running N"),
        (["limit", "api", "--max-running-per-key", "0"], "tether: error: --max-running-per-key: must be an integer from 1 to 1,000,000, got 0"),
        (["limit", "api", "--max-running-per-key", "1.5"], "tether: error: --max-running-per-key: must be an integer from 1 to 1,000,000, got '1.5'"),
        (["limit", "api", "--rate", "5"], "tether: error: --per: --rate and --per go together"),
        (["limit", "api", "--per", "5"], "tether: error: --rate: --rate and --per go together"),
        (["limit", "api", "--rate", "0", "--per", "5"], "tether: error: --rate: must be an integer from 1 to 1,000,000, got 0"),
        (["limit", "api", "--rate", "5", "--per", "0"], "tether: error: --per: must be > 0 seconds"),
        (["limit", "api", "--rate", "5", "--per", "0.0001"], "tether: error: --per: must be a number of seconds from 0.001 to 31,622,400, got 0.0001"),
        (["pause", "bad name"], "tether: error: QUEUE: 'bad name' is not a queue name"),
        (["resume", ""], "tether: error: QUEUE: '' is not a queue name"),
        (["limit", "x/y", "--max-running", "2"], "tether: error: QUEUE: 'x/y' is not a queue name"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    db: str, repo: SqlAlchemyJobRepository, args: list[str], message: str
) -> None:
    result = cli("queues", *args, "--database-url", db)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), result.output
    assert repo.queue_states() == []
