"""Settings: defaults, precedence (flags > TETHER_* environment > defaults) and validation."""

from __future__ import annotations

import pytest
from tether.domain.errors import ConfigurationError
from tether.entrypoints.settings import InvalidSetting, Settings, database_kind, redact_url


def test_defaults() -> None:
    settings = Settings.load(environ={})
    assert settings.database_url == "sqlite:///tether.db"
    assert settings.redis_url is None and settings.dispatcher_kind == "polling"
    assert (settings.lease_timeout, settings.reap_interval) == (60.0, 15.0)
    assert settings.concurrency == 4
    assert settings.prefetch is None  # the pool's default: as many as concurrency
    assert Settings.load(environ={"TETHER_PREFETCH": "12"}).prefetch == 12
    assert settings.queues is None
    assert settings.heartbeat_interval is None
    assert settings.log_level == "INFO"
    assert settings.max_payload_bytes == 65_536
    assert settings.job_timeout is None  # no limit
    assert Settings.load(environ={"TETHER_JOB_TIMEOUT": "2.5"}).job_timeout == 2.5


def test_environment_beats_defaults_and_flags_beat_environment() -> None:
    environ = {
        "TETHER_DATABASE_URL": "sqlite:///from-env.db",
        "TETHER_CONCURRENCY": "7",
        "TETHER_QUEUES": "mail, reports",
        "TETHER_LEASE_TIMEOUT": "60",
        "TETHER_LOG_LEVEL": "debug",
        "TETHER_REDIS_URL": "",  # empty means unset
    }
    from_env = Settings.load(environ=environ)
    assert from_env.database_url == "sqlite:///from-env.db"
    assert from_env.concurrency == 7
    assert from_env.queues == ("mail", "reports")
    assert from_env.lease_timeout == 60.0
    assert from_env.log_level == "DEBUG"
    assert from_env.redis_url is None

    flagged = Settings.load({"database_url": "memory://", "concurrency": 2, "queues": None}, environ=environ)
    assert flagged.database_url == "memory://"
    assert flagged.concurrency == 2
    assert flagged.queues == ("mail", "reports")  # a flag left unset (None) does not hide the variable


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        ({"database_url": "mysql://app@db/jobs"}, "database_url"),
        ({"database_url": "sqlite://"}, "database_url"),
        ({"database_url": "sqlite:///:memory:"}, "database_url"),
        ({"redis_url": "http://127.0.0.1:6379"}, "redis_url"),
        ({"schema": "1bad"}, "schema"),
        ({"schema": "drop table; --"}, "schema"),
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 1025}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"queues": ("ok", "not ok")}, "queues"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"lease_timeout": -1}, "lease_timeout"),
        ({"lease_timeout": float("inf")}, "lease_timeout"),
        ({"heartbeat_interval": 0}, "heartbeat_interval"),
        ({"lease_timeout": 30, "heartbeat_interval": 30}, "heartbeat_interval"),
        ({"reap_interval": 0}, "reap_interval"),
        ({"drain_timeout": -0.5}, "drain_timeout"),
        ({"job_timeout": 0}, "job_timeout"),
        ({"job_timeout": float("nan")}, "job_timeout"),
        ({"max_payload_bytes": 0}, "max_payload_bytes"),
        ({"max_payload_bytes": 1}, "max_payload_bytes"),  # below what Tether itself accepts ("{}")
        ({"log_level": "LOUD"}, "log_level"),
    ],
)
def test_bad_values_name_the_setting_flag_and_variable(values: dict[str, object], setting: str) -> None:
    with pytest.raises(InvalidSetting) as caught:
        Settings(**values)  # type: ignore[arg-type]
    assert caught.value.setting == setting
    message = str(caught.value)
    assert message.startswith(setting + " ")
    assert "TETHER_" + setting.upper() in message


def test_bad_environment_number_names_the_variable() -> None:
    with pytest.raises(InvalidSetting) as caught:
        Settings.load(environ={"TETHER_POLL_INTERVAL": "fast"})
    assert caught.value.setting == "poll_interval"
    assert "TETHER_POLL_INTERVAL='fast'" in str(caught.value)


def test_unknown_override_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="^colour: not a setting"):
        Settings.load({"colour": "blue"}, environ={})


def test_errors_never_show_a_password() -> None:
    with pytest.raises(InvalidSetting) as caught:
        Settings(database_url="mysql://app:hunter2@db/jobs")
    assert "hunter2" not in str(caught.value)
    assert "mysql://app:***@db/jobs" in str(caught.value)
    with pytest.raises(InvalidSetting) as caught:
        Settings(redis_url="http://:hunter2@cache:6379/0")
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://app:s3cret@db:5432/prod", "postgresql+psycopg://app:***@db:5432/prod"),
        ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
        ("postgresql+psycopg://app@db/prod", "postgresql+psycopg://app@db/prod"),
        ("sqlite:////var/lib/app/jobs.db", "sqlite:////var/lib/app/jobs.db"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("memory://", "memory"),
        ("sqlite:///tether.db", "sqlite"),
        ("sqlite:////tmp/x/tether.db", "sqlite"),
        ("sqlite+pysqlite:///tether.db?timeout=5", "sqlite"),
        ("postgresql+psycopg://postgres@127.0.0.1:5432/test", "postgresql"),
        ("postgresql://postgres@127.0.0.1/test", "postgresql"),
    ],
)
def test_database_kind(url: str, kind: str) -> None:
    assert database_kind(url) == kind


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (
            "sqlite://relative.db",
            ("'sqlite://relative.db' has two slashes, so 'relative.db' is read as a host name, and SQLite takes none; "
            "write sqlite:///relative.db for a path relative to the current directory, "
            "or sqlite:////absolute/path/relative.db for an absolute one"),
        ),
        (
            "sqlite://data/jobs.db?timeout=5",
            ("'sqlite://data/jobs.db?timeout=5' has two slashes, so 'data' is read as a host name, and SQLite takes none; "
            "write sqlite:///data/jobs.db for a path relative to the current directory, "
            "or sqlite:////absolute/path/jobs.db for an absolute one"),
        ),
        (
            "sqlite:jobs.db",
            ("'sqlite:jobs.db' is not a SQLite URL; write sqlite:///jobs.db for a path relative to the current directory, "
            "or sqlite:////absolute/path/jobs.db for an absolute one"),
        ),
    ],
)
def test_a_sqlite_url_of_the_wrong_shape_says_which_forms_are_right(url: str, problem: str) -> None:
    """sqlite://relative.db is the classic slip: SQLAlchemy would read relative.db as a host; the
    setting is refused before anything is opened, with the two right forms."""
    with pytest.raises(InvalidSetting) as raised:
        Settings(database_url=url)
    assert raised.value.setting == "database_url"
    assert raised.value.problem == problem
    with pytest.raises(InvalidSetting):
        database_kind(url)


def test_redis_prefix_defaults_to_tether_and_is_validated() -> None:
    assert Settings().redis_prefix == "tether"
    assert Settings.load(environ={"TETHER_REDIS_PREFIX": "shop"}).redis_prefix == "shop"
    with pytest.raises(InvalidSetting) as raised:
        Settings(redis_prefix="a b")
    assert raised.value.setting == "redis_prefix"
    assert "TETHER_REDIS_PREFIX" in str(raised.value)


@pytest.mark.parametrize(("raw", "expected"), [("1", True), ("true", True), ("Yes", True), ("on", True), ("0", False), ("false", False), ("no", False), ("OFF", False)])
def test_redis_cluster_switch_reads_the_usual_spellings_from_the_environment(raw: str, expected: bool) -> None:
    settings = Settings.load(environ={"TETHER_REDIS_URL": "redis://10.0.0.1:7000", "TETHER_REDIS_CLUSTER": raw})
    assert settings.redis_cluster is expected
    assert Settings().redis_cluster is False


def test_redis_cluster_switch_rejects_other_values_and_needs_a_redis_url() -> None:
    with pytest.raises(InvalidSetting) as raised:
        Settings.load(environ={"TETHER_REDIS_URL": "redis://10.0.0.1:7000", "TETHER_REDIS_CLUSTER": "maybe"})
    assert raised.value.setting == "redis_cluster"
    assert "TETHER_REDIS_CLUSTER='maybe'" in str(raised.value)
    with pytest.raises(InvalidSetting) as raised:
        Settings(redis_cluster=True)
    assert raised.value.setting == "redis_cluster"
    assert "--redis-cluster" in str(raised.value) and "redis_url" in str(raised.value)
    with pytest.raises(InvalidSetting):
        Settings(redis_url="redis://10.0.0.1:7000", redis_cluster="yes")  # type: ignore[arg-type]
