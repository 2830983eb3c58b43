"""A command given a Redis URL that does not answer (and no ``require_connection``): one
``tether: warning:`` line on stderr saying what this command does without Redis, then the
command's own work and exit code.  With Redis answering, no line at all.  The library and the
worker keep the dispatcher's own log record (workers lease from the database meanwhile).

Needs a Redis server on 127.0.0.1:6379 for the reachable case; port 1 answers nobody.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from tether.entrypoints.cli import app
from tether.entrypoints.container import connect
from typer.testing import CliRunner

DOWN = "redis://127.0.0.1:1/0"
UP = "redis://127.0.0.1:6379/0"
WARNING = "tether: warning: Redis at redis://127.0.0.1:1/0 unreachable ("


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_DATABASE_URL", "TETHER_REDIS_URL", "TETHER_REDIS_PREFIX", "TETHER_REDIS_CLUSTER", "TETHER_SCHEMA"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    with connect(url) as tether_app:
        tether_app.enqueue("emails.send", {"to": "a@example.com"})
    return url


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def warning_line(result: Any) -> str:
    """The one stderr line, with the connection error in its parentheses cut out."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith(WARNING), line
    rest = line[len(WARNING):]
    assert "Connection refused" in rest.split("); ", 1)[0], line
    return WARNING + "...); " + rest.split("); ", 1)[1]


#: What each command says it does while Redis is unreachable.
WITHOUT_REDIS = [
    (["jobs", "list"], "this command reads the database alone"),
    (["jobs", "show", "1"], "this command reads the database alone"),
    (["jobs", "why", "1"], "this command reads the database alone"),
    (["jobs", "cancel", "1"], "this command changes the database alone"),
    (["purge", "--older-than", "60"], "this command changes the database alone"),
    (["reap"], "this command changes the database alone"),
    (["queues", "list"], "this command reads the database alone"),
    (["queues", "pause", "default"], "this command changes the database alone"),
    (["queues", "resume", "default"], "the queue's due jobs are not announced; workers find them at their next sweep, seconds late"),
    (["queues", "limit", "default", "--max-running", "5"],
     "the queue's due jobs are not announced; workers find them at their next sweep, seconds late"),
]


@pytest.mark.parametrize(("args", "says"), WITHOUT_REDIS, ids=[" ".join(a) for a, _ in WITHOUT_REDIS])
def test_unreachable_redis_is_one_warning_line_worded_for_the_command(db: str, args: list[str], says: str) -> None:
    result = cli(*args, "--database-url", db, "--redis-url", DOWN)
    assert result.exit_code == 0, result.output
    assert warning_line(result) == WARNING + "...); " + says
    assert "tether: warning" not in result.stdout


def test_jobs_list_with_unreachable_redis_still_lists_the_jobs(db: str) -> None:
    result = cli("jobs", "list", "--database-url", db, "--redis-url", DOWN)
    assert result.exit_code == 0, result.output
    assert "emails.send" in result.stdout
    assert "workers lease" not in result.stderr


def test_the_tether_command_prints_only_the_warning_line_on_stderr(db: str) -> None:
    """Outside pytest no logging is set up: the dispatcher's record must not reach stderr bare."""
    result = subprocess.run(
        [sys.executable, "-m", "tether.entrypoints.cli", "jobs", "list", "--database-url", db, "--redis-url", DOWN],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "emails.send" in result.stdout
    assert warning_line(result) == WARNING + "...); this command reads the database alone"


def test_enqueue_with_unreachable_redis_stores_the_job_and_says_so(db: str) -> None:
    result = cli("enqueue", "emails.send", "--database-url", db, "--redis-url", DOWN)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("enqueued job 2 ")
    assert warning_line(result) == WARNING + "...); the job is stored in the database; workers find it at their next sweep, seconds late"
    with connect(db, create=False) as tether_app:
        assert tether_app.get(2).job_type == "emails.send"


def test_retry_with_unreachable_redis_says_the_job_waits_for_the_sweep(db: str) -> None:
    assert cli("jobs", "cancel", "1", "--database-url", db).exit_code == 0
    result = cli("retry", "1", "--database-url", db, "--redis-url", DOWN)
    assert result.exit_code == 0, result.output
    assert warning_line(result) == (
        WARNING + "...); the job is back in its queue in the database; workers find it at their next sweep, seconds late"
    )


@pytest.fixture
def redis_up() -> None:
    try:
        redis.Redis.from_url(UP, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:  # pragma: no cover - the environment's Redis
        pytest.skip(f"no Redis at {UP}: {exc}")


@pytest.mark.parametrize("args", [["jobs", "list"], ["enqueue", "emails.send"]], ids=["jobs list", "enqueue"])
def test_reachable_redis_prints_no_warning(db: str, redis_up: None, args: list[str]) -> None:
    prefix = f"tether-cli-test-{uuid.uuid4().hex[:8]}"
    result = cli(*args, "--database-url", db, "--redis-url", UP, "--redis-prefix", prefix)
    try:
        assert result.exit_code == 0, result.output
        assert result.stderr == ""
    finally:
        client = redis.Redis.from_url(UP)
        keys = list(client.scan_iter(f"{{{prefix}}}*")) + list(client.scan_iter(f"{prefix}*"))
        if keys:
            client.delete(*keys)


def test_the_library_still_logs_what_workers_do_meanwhile(caplog: pytest.LogCaptureFixture) -> None:
    """tether.connect (the worker's app, any producer) keeps the dispatcher's own warning."""
    with caplog.at_level(logging.WARNING, logger="tether.dispatch.redis"), connect("memory://", redis_url=DOWN):
        pass
    messages = [r.getMessage() for r in caplog.records if r.name == "tether.dispatch.redis"]
    assert any(
        m.startswith("Redis at redis://127.0.0.1:1/0 unreachable at start (")
        and m.endswith("); until it answers, workers lease straight from the database and the sweep publishes what producers could not")
        for m in messages
    ), messages


def test_the_command_and_the_dispatcher_name_the_same_record_attribute() -> None:
    from tether.adapters.redis_streams import health
    from tether.entrypoints.cli import options

    assert options.UNREACHABLE_AT_START == health.UNREACHABLE_AT_START
    assert options.REDIS_LOGGER == health.log.name


@pytest.mark.parametrize("long_running", [False, True], ids=["one-shot", "long-running"])
def test_a_long_running_command_holds_back_only_the_start_record(
    db: str, long_running: bool, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """A one-shot command keeps the dispatcher's later records off stderr (its one line said it);
    the dashboard, running for days, lets them through once the start's record is held back."""
    from tether.entrypoints.cli.options import REDIS_LOGGER, open_app
    from tether.entrypoints.settings import Settings

    settings = Settings.load({"database_url": db, "redis_url": DOWN})
    with caplog.at_level(logging.INFO, logger=REDIS_LOGGER), open_app(settings, long_running=long_running):
        logging.getLogger(REDIS_LOGGER).warning("Redis at %s answers again", DOWN)
    assert capsys.readouterr().err.startswith(WARNING)
    later = [r.getMessage() for r in caplog.records if r.getMessage().endswith("answers again")]
    assert later == ([f"Redis at {DOWN} answers again"] if long_running else [])
    assert not any("unreachable at start" in r.getMessage() for r in caplog.records)
