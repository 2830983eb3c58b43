"""Passwords of database and Redis URLs never appear in an error, a log line or the CLI's output.

Each case gives a URL holding the password ``S3cr3tPW`` (in the authority, in a ``password=``
query parameter, in a URL that does not parse) for a server that cannot be reached, or for the
test PostgreSQL server (which trusts every password), then reads the error text, every log record
captured at DEBUG from every logger, and the CLI's stdout and stderr: the password is in none of
them, and where the URL is shown its password reads ``***``.
"""

from __future__ import annotations

import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tether
from tether import TetherError
from tether.adapters.sqlalchemy import open_repository
from tether.domain.redaction import redact_url
from tether.entrypoints.cli import app as cli_app
from typer.testing import CliRunner

from tests.conftest import DATABASE_URL
from tests.postgres_fixtures import schema_name

SECRET = "S3cr3tPW"
UNREACHABLE_DATABASES = [
    f"postgresql+psycopg://app:{SECRET}@127.0.0.1:1/jobs",
    f"postgresql://app@127.0.0.1:1/jobs?password={SECRET}",
    f"postgresql://app:{SECRET}@127.0.0.1:1/jobs?sslmode=disable&password={SECRET}",
    f"postgres://app:{SECRET}@no-such-host.invalid/jobs",
]
MALFORMED_DATABASES = [
    f"postgresql://app:{SECRET}@127.0.0.1:notaport/jobs",
    f"postgresql://app:{SECRET}@[::1/jobs",
    f"postgresql://app:pa/{SECRET}@127.0.0.1:1/jobs",
    f"mysql://app:{SECRET}@127.0.0.1/jobs",
    f"sqlite://app:{SECRET}@x/jobs.db",
]
UNREACHABLE_REDIS = [
    f"redis://:{SECRET}@127.0.0.1:1/0",
    f"redis://default:{SECRET}@127.0.0.1:1/0",
    f"redis://127.0.0.1:1/0?password={SECRET}",
    f"redis://{SECRET}@127.0.0.1:1/0",
    f"rediss://:{SECRET}@127.0.0.1:1/0",
]
MALFORMED_REDIS = [f"redis://:{SECRET}@[::1/0", f"redis://:{SECRET}@127.0.0.1:x/0", f"http://:{SECRET}@127.0.0.1/0"]


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def assert_hidden(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text, text


def everything_logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record as a handler would write it, tracebacks included."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


def cli(*args: str) -> Any:
    return CliRunner().invoke(cli_app, list(args), env={"TETHER_DATABASE_URL": "", "TETHER_REDIS_URL": ""})


def test_redact_url_hides_every_password_form() -> None:
    assert redact_url(f"postgresql://app:{SECRET}@db/jobs") == "postgresql://app:***@db/jobs"
    assert redact_url(f"postgresql://app@db/jobs?sslmode=require&password={SECRET}") == (
        "postgresql://app@db/jobs?sslmode=require&password=***"
    )
    assert redact_url(f"postgresql://app:pa/{SECRET}@db/jobs") == "postgresql://app:***@db/jobs"
    assert redact_url(f"postgresql://app:{SECRET}@[::1/jobs") == "postgresql://app:***@[::1/jobs"
    assert redact_url(f"redis://{SECRET}@cache/0", bare_userinfo_is_secret=True) == "redis://***@cache/0"
    assert redact_url("postgresql://app@db/jobs") == "postgresql://app@db/jobs"


@pytest.mark.parametrize("url", UNREACHABLE_DATABASES + MALFORMED_DATABASES)
def test_a_database_url_that_fails_shows_its_password_nowhere(url: str, logs: pytest.LogCaptureFixture) -> None:
    with pytest.raises(TetherError) as connect_error:
        tether.connect(url)
    with pytest.raises(TetherError) as open_error:
        open_repository(url)
    result = cli("jobs", "list", "--database-url", url)
    assert result.exit_code in (1, 2), result.output
    assert result.stderr.startswith("tether: error: ") and len(result.stderr.splitlines()) == 1
    assert "***" in str(connect_error.value) + str(open_error.value) + result.stderr
    assert_hidden(str(connect_error.value), str(open_error.value), result.stdout, result.stderr, everything_logged(logs))


@pytest.mark.parametrize("url", UNREACHABLE_REDIS)
def test_an_unreachable_redis_shows_its_password_nowhere(url: str, tmp_path: Path, logs: pytest.LogCaptureFixture) -> None:
    with pytest.raises(TetherError) as required:
        tether.connect("memory://", redis_url=url, redis_options={"require_connection": True})
    assert "***" in str(required.value)
    # Not required: the app degrades to polling, and its enqueues and a worker pool run on;
    # what they log about the lost Redis must not name the password either.
    with tether.connect("memory://", redis_url=url, redis_options={"block": 0.05, "sweep_interval": 0.05}) as app:
        done: list[int] = []
        app.register("secrets.job", lambda payload: done.append(payload["n"]))
        for n in range(3):
            app.enqueue("secrets.job", {"n": n})
        stats = app.worker(concurrency=2, max_wait=0.05).run(stop_when_idle=True)
        assert stats.completed == 3 and sorted(done) == [0, 1, 2]
        shown = repr(app.dispatcher)
    database = f"sqlite:///{tmp_path / 'jobs.db'}"
    enqueued = cli("enqueue", "secrets.job", "--database-url", database, "--redis-url", url)
    assert "***" in shown
    assert_hidden(str(required.value), shown, enqueued.stdout, enqueued.stderr, everything_logged(logs))


@pytest.mark.parametrize("url", MALFORMED_REDIS)
def test_a_malformed_redis_url_is_one_error_naming_the_setting_without_its_password(
    url: str, tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(TetherError) as error:
        tether.connect("memory://", redis_url=url)
    assert str(error.value).startswith("redis_url: ")
    result = cli("enqueue", "x", "--database-url", f"sqlite:///{tmp_path / 'jobs.db'}", "--redis-url", url)
    assert result.exit_code == 2 and result.stderr.startswith("tether: error: redis_url (--redis-url")
    assert "***" in str(error.value) and "***" in result.stderr
    assert_hidden(str(error.value), result.stdout, result.stderr, everything_logged(logs))
    assert not (tmp_path / "jobs.db").exists()


@pytest.mark.postgres
def test_a_working_postgres_url_with_a_password_is_shown_hidden_in_logs_reprs_and_the_worker_line(
    tmp_path: Path, logs: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test server trusts every password, so the URL works; what Tether prints of it must not
    show the password, from the repository's repr to the worker's start line and the reaper's logs."""
    head, rest = DATABASE_URL.split("://", 1)
    user_host = rest.split("@", 1)
    url = f"{head}://{user_host[0].split(':')[0]}:{SECRET}@{user_host[1]}?password={SECRET}" if len(user_host) == 2 else DATABASE_URL
    if SECRET not in url:
        pytest.skip("the test database URL names no user")
    schema = schema_name("secrets")
    module = tmp_path / "secrets_app.py"
    module.write_text(textwrap.dedent(f"""
        import tether
        app = tether.connect({url!r}, schema={schema!r})

        @app.handler("secrets.job")
        def job(payload):
            return None
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with tether.connect(url, schema=schema) as app:
            app.enqueue("secrets.job", {})
            assert "***" in repr(app.repository)
            assert_hidden(repr(app.repository), repr(app.dispatcher))
        result = cli("worker", "--app", "secrets_app:app", "--until-idle", "--log-level", "DEBUG", "--concurrency", "1")
        assert result.exit_code == 0, result.output
        assert_hidden(result.stdout, result.stderr, everything_logged(logs))
        assert "***" in result.stderr + everything_logged(logs)
    finally:
        sys.modules.pop("secrets_app", None)
        with tether.connect(DATABASE_URL, schema=schema) as app:
            app.repository.drop_schema()  # type: ignore[attr-defined]
