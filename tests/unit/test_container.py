"""The composition root: adapters chosen from the URLs, one instance per container, tether.connect."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import tether
from tether.adapters.clock import FakeClock, SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import ConfigurationError, PayloadError, ValidationError
from tether.domain.job import JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.container import (
    Container,
    build_container,
    connect,
    dispatcher_kind,
    from_settings,
    repository_kind,
)
from tether.entrypoints.service import Tether
from tether.entrypoints.settings import InvalidSetting, Settings


def test_memory_url_wires_memory_repository_and_polling_dispatcher() -> None:
    container = build_container(database_url="memory://", poll_interval=0.25)
    repository = container.repository()
    dispatcher = container.dispatcher()
    assert isinstance(repository, InMemoryJobRepository)
    assert isinstance(dispatcher, PollingDispatcher)
    assert dispatcher.repository is repository
    assert dispatcher.poll_interval == 0.25
    assert isinstance(container.clock(), SystemClock)
    app = container.app()
    assert isinstance(app, Tether)
    assert app.repository is repository and app.dispatcher is dispatcher
    # Singletons per container, separate between containers.
    assert container.repository() is repository and container.app() is app
    assert build_container(database_url="memory://").repository() is not repository
    app.close()


def test_selectors() -> None:
    assert repository_kind("memory://") == "memory"
    assert repository_kind("sqlite:///x.db") == "sql"
    assert repository_kind("postgresql+psycopg://u@h/db") == "sql"
    assert dispatcher_kind(None) == "polling"
    assert dispatcher_kind("redis://127.0.0.1:6379/0") == "redis"


def test_bad_url_is_refused_before_anything_opens_and_hides_the_password() -> None:
    with pytest.raises(InvalidSetting) as caught:
        build_container(database_url="oracle://scott:tiger@db/orcl")
    assert caught.value.setting == "database_url"
    assert "tiger" not in str(caught.value) and "oracle://scott:***@db/orcl" in str(caught.value)
    with pytest.raises(InvalidSetting) as caught:
        connect("redis://127.0.0.1:6379/0")
    assert caught.value.setting == "database_url"
    with pytest.raises(InvalidSetting) as caught:
        connect("memory://", redis_url="amqp://guest:guest@127.0.0.1/")
    assert caught.value.setting == "redis_url" and "guest:guest" not in str(caught.value)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"database_url": "mysql://app:hunter2@db/jobs"}, "database_url: unsupported URL 'mysql://app:***@db/jobs'; use memory://"),
        ({"redis_url": "amqp://guest:guest@mq/"}, "redis_url: must be a redis://, rediss:// or unix:// URL, got 'amqp://guest:***@mq/'"),
        ({"schema": "no-dashes"}, "schema: must be 1-63 of letters, digits and '_'"),
        ({"max_payload_bytes": 1}, "max_payload_bytes: must be an integer from 2 to"),
    ],
    ids=["database_url", "redis_url", "schema", "max_payload_bytes"],
)
def test_connect_names_its_own_argument_not_a_cli_flag_or_variable(arguments: dict[str, object], expected: str) -> None:
    """tether.connect reads no flag and no TETHER_* variable, so its errors start with the
    argument's name (the same name the CLI's settings use, without their flag and variable)."""
    with pytest.raises(InvalidSetting) as caught:
        connect(**arguments)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith(expected), message
    assert "TETHER_" not in message and "--" not in message.split(":", 1)[0]
    assert caught.value.setting == next(iter(arguments)) and "hunter2" not in message


def test_settings_keep_naming_flag_and_variable() -> None:
    """The CLI's paths build Settings: their errors still name the setting, its flag and its variable."""
    with pytest.raises(InvalidSetting, match=r"^database_url \(--database-url, TETHER_DATABASE_URL\): unsupported URL"):
        Settings(database_url="mysql://x")
    with pytest.raises(InvalidSetting, match=r"^poll_interval \(TETHER_POLL_INTERVAL\): must be > 0"):  # no CLI flag
        Settings.load(environ={"TETHER_POLL_INTERVAL": "0"})


def test_connect_is_exported_and_runs_a_job_end_to_end() -> None:
    assert tether.connect is connect
    clock = FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    app = tether.connect(clock=clock, retry_policy=RetryPolicy(base_seconds=0.01, cap_seconds=0.01))
    seen: list[dict[str, object]] = []

    @app.handler("orders.confirm")
    def confirm(payload: dict[str, object]) -> None:
        seen.append(payload)

    result = app.enqueue("orders.confirm", {"order": 17})
    assert result.created
    assert result.job.created_at == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # the injected clock
    app.worker(concurrency=1, max_wait=0.05).run(stop_when_idle=True, install_signal_handlers=False)
    assert seen == [{"order": 17}]
    assert app.get(result.job.id).status is JobStatus.COMPLETED
    app.close()


def test_connect_passes_app_options_through() -> None:
    app = connect("memory://", max_payload_bytes=64, default_queue="mail", default_max_attempts=5)
    job = app.enqueue("mail.send", {"to": "a@example.com"}).job
    assert job.queue == "mail" and job.max_attempts == 5
    with pytest.raises(PayloadError):
        app.enqueue("mail.send", {"body": "x" * 100})
    assert app.list() == [app.get(job.id)]  # nothing else was written
    app.close()


def test_connect_refuses_unknown_options_and_bad_values() -> None:
    with pytest.raises(ConfigurationError, match="^pool_sise: not an option of tether.connect"):
        connect("memory://", pool_sise=4)
    with pytest.raises(ConfigurationError, match="^retry_policy:"):
        connect("memory://", retry_policy={"base_seconds": 1})
    with pytest.raises(InvalidSetting, match=r"^poll_interval: must be > 0 seconds, got 0$"):  # the argument's name
        connect("memory://", poll_interval=0)
    with pytest.raises(ConfigurationError, match=r"^redis_options: unknown option\(s\) 'prefx' \(known: prefix, "):
        connect("memory://", redis_url="redis://127.0.0.1:1/0", redis_options={"prefx": "x"})
    with pytest.raises(ValidationError, match="^default_queue:"):
        connect("memory://", default_queue="no spaces allowed")


def test_from_settings_applies_payload_limit_and_poll_interval() -> None:
    app = from_settings(Settings(database_url="memory://", max_payload_bytes=32, poll_interval=0.5))
    assert isinstance(app.dispatcher, PollingDispatcher) and app.dispatcher.poll_interval == 0.5
    with pytest.raises(PayloadError):
        app.enqueue("x", {"text": "y" * 40})
    assert app.counts()[JobStatus.QUEUED] == 0
    app.close()


def test_clock_can_be_overridden_on_the_container() -> None:
    container = Container()
    container.config.from_dict({"database_url": "memory://", "redis_url": None, "poll_interval": 1.0, "redis": {}})
    clock = FakeClock()
    with container.clock.override(clock):
        app = container.app()
        assert app.clock is clock
        app.close()


def test_sqlite_url_opens_a_file_database(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    app = connect(f"sqlite:///{path}")
    try:
        assert type(app.repository).__name__ == "SqliteJobRepository"
        job = app.enqueue("reports.build", {"month": "2026-02"}, idempotency_key="feb").job
    finally:
        app.close()
    assert path.exists()
    reopened = connect(f"sqlite:///{path}")
    try:
        again = reopened.enqueue("reports.build", {"month": "2026-02"}, idempotency_key="feb")
        assert not again.created and again.job.id == job.id
    finally:
        reopened.close()


def test_a_dispatcher_that_fails_to_start_closes_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[InMemoryJobRepository] = []
    original_close = InMemoryJobRepository.close

    def spy_close(self: InMemoryJobRepository) -> None:
        closed.append(self)
        original_close(self)

    monkeypatch.setattr(InMemoryJobRepository, "close", spy_close)
    with pytest.raises(ValidationError, match="^block:"):
        connect("memory://", redis_url="redis://127.0.0.1:6379/0", redis_options={"block": -1})
    assert len(closed) == 1


@pytest.mark.parametrize(
    ("value", "problem"),
    [(-3, "must be an integer from 1 to 1,000, got -3"), (0, "must be an integer from 1 to 1,000, got 0"),
     ("x", "must be an integer, got str 'x'"), (2.5, "must be an integer, got float 2.5"),
     (True, "must be an integer, got bool True")],
)
@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_bad_pool_size_is_an_invalid_setting_naming_the_argument_and_opens_nothing(
    tmp_path: Path, store: str, value: object, problem: str
) -> None:
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path / 'jobs.db'}"
    with pytest.raises(tether.InvalidSetting) as caught:
        tether.connect(url, pool_size=value)
    assert str(caught.value) == f"pool_size: {problem}"
    assert isinstance(caught.value, tether.ConfigurationError)
    assert not (tmp_path / "jobs.db").exists()


def test_connecting_imports_no_web_framework(tmp_path: Path) -> None:
    """dependency-injector's container module imports FastAPI, Flask and Starlette whenever they are
    installed (about 0.2 s of every worker and CLI start); the container never needs them."""
    import subprocess
    import sys

    probe = (
        "import sys, tether; app = tether.connect('memory://'); app.close(); "
        "print(sorted(m for m in ('fastapi', 'flask', 'starlette', 'dependency_injector.wiring') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out.strip() == "[]"
