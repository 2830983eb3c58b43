"""The ``tether`` CLI through Typer's CliRunner: bad input is one line, exit code 2, nothing
written; the commands work on a SQLite file database."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tether.adapters.sqlalchemy.migrations import SCHEMA_VERSION
from tether.domain.errors import PermanentError
from tether.domain.job import JobStatus
from tether.entrypoints.cli import app
from tether.entrypoints.container import connect
from typer.testing import CliRunner

NEXT_VERSION = SCHEMA_VERSION + 1  # no such schema version yet

SETTINGS_VARIABLES = (
    "TETHER_DATABASE_URL",
    "TETHER_REDIS_URL",
    "TETHER_SCHEMA",
    "TETHER_CONCURRENCY",
    "TETHER_ASYNC_CONCURRENCY",
    "TETHER_QUEUES",
    "TETHER_POLL_INTERVAL",
    "TETHER_LEASE_TIMEOUT",
    "TETHER_HEARTBEAT_INTERVAL",
    "TETHER_REAP_INTERVAL",
    "TETHER_DRAIN_TIMEOUT",
    "TETHER_JOB_TIMEOUT",
    "TETHER_MAX_PAYLOAD_BYTES",
    "TETHER_LOG_LEVEL",
    "TETHER_APP",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SETTINGS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def cli_json(*args: str) -> Any:
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def one_error_line(result: Any) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("tether: error: "), result.output
    return lines[0][len("tether: error: ") :]


#: Every bad value is one line starting with the flag (or argument) the user typed, never a Python
#: field name or Typer's wording ("Invalid value for ..."); settings name setting, flag and variable.
BAD_INPUT = [
    (["enqueue", "x", "--payload", "{bad"], "--payload: is not valid JSON"),
    (["enqueue", "x", "--payload", "[1, NaN]"], "--payload: payload[1] is nan; JSON has no NaN or Infinity"),
    (["enqueue", "x", "--payload", json.dumps("y" * 70_000)], "--payload: is 70002 bytes"),
    (["enqueue", "not a type!"], "JOB_TYPE: 'not a type!' is not a job type"),
    (["enqueue"], "JOB_TYPE: is required"),
    (["enqueue", "x", "--queue", "no spaces"], "--queue: 'no spaces' is not a queue name"),
    (["enqueue", "x", "--max-attempts", "0"], "--max-attempts: must be an integer from 1 to 10,000, got 0"),
    (["enqueue", "x", "--max-attempts", "lots"], "--max-attempts: must be an integer, got 'lots'"),
    (["enqueue", "x", "--priority", "99999999999"], "--priority: must be an integer from -2,147,483,648 to 2,147,483,647"),
    (["enqueue", "x", "--priority", "high"], "--priority: must be an integer, got 'high'"),
    (["enqueue", "x", "--run-at", "2026-05-01T09:30:00"], "--run-at: '2026-05-01T09:30:00' has no UTC offset"),
    (["enqueue", "x", "--run-at", "next tuesday"], "--run-at: 'next tuesday' is not an ISO 8601 date-time"),
    (["enqueue", "x", "--run-at", "2026-05-01T09:30:00Z", "--delay", "5"], "--run-at: give --run-at or --delay, not both"),
    (["enqueue", "x", "--delay", "-1"], "--delay: must be >= 0 seconds, got -1.0"),
    (["enqueue", "x", "--delay", "soon"], "--delay: must be a number of seconds, got 'soon'"),
    (["enqueue", "x", "--idempotency-key", ""], "--idempotency-key: must be a string of 1-255 characters"),
    (["enqueue", "x", "--concurrency-key", ""], "--concurrency-key: must be a string of 1-255 characters"),
    (["enqueue", "x", "--concurrency-key", "c" * 256], "--concurrency-key: must be a string of 1-255 characters"),
    # text that has no UTF-8 encoding (undecodable argv bytes arrive as lone surrogates)
    (["enqueue", "x", "--payload", '{"s": "\\ud800"}'],
     "--payload: payload.s holds a lone surrogate (U+D800 at index 0), which has no UTF-8 encoding"),
    (["enqueue", "x", "--payload", '{"k": {"a\udcffb": 1}}'],
     "--payload: payload.k has a key ('a\\udcffb') that holds a lone surrogate (U+DCFF at index 1)"),
    (["enqueue", "x\udcff"], "JOB_TYPE: 'x\\udcff' is not a job type"),
    (["enqueue", "x", "--queue", "q\udcff"], "--queue: 'q\\udcff' is not a queue name"),
    (["enqueue", "x", "--idempotency-key", "k\udcff"],
     "--idempotency-key: holds a lone surrogate (U+DCFF at index 1), which has no UTF-8 encoding"),
    # numbers and times out of range (tether.domain.limits)
    (["enqueue", "x", "--payload", '{"n": 1' + "0" * 4300 + "}"], "--payload: holds an integer of more than 4,300 digits"),
    (["enqueue", "x", "--payload", '{"n": [1e5, -1' + "0" * 4300 + "]}"], "--payload: holds an integer of more than 4,300 digits"),
    (["enqueue", "x", "--delay", "1e15"], "--delay: must be at most 3,155,760,000 seconds (100 years), got 1e+15"),
    (["enqueue", "x", "--delay", "3155760001"], "--delay: must be at most 3,155,760,000 seconds (100 years), got 3.15576e+09"),
    (["enqueue", "x", "--run-at", "9999-12-31T23:00:00-05:00"],
     "--run-at: 9999-12-31T23:00:00-05:00 is outside the years 1-9999 in UTC"),
    (["enqueue", "x", "--run-at", "0001-01-01T00:30:00+01:00"],
     "--run-at: 0001-01-01T00:30:00+01:00 is outside the years 1-9999 in UTC"),
    (["enqueue", "x", "--run-at", "2999-01-01T00:00:00Z"], "--run-at: 2999-01-01T00:00:00+00:00 is more than 100 years from now"),
    (["enqueue", "x", "--priority", "2147483648"], "--priority: must be an integer from -2,147,483,648 to 2,147,483,647, got 2147483648"),
    (["enqueue", "x", "--priority", "-2147483649"], "--priority: must be an integer from -2,147,483,648 to 2,147,483,647, got -2147483649"),
    (["enqueue", "x", "--max-attempts", "10001"], "--max-attempts: must be an integer from 1 to 10,000, got 10001"),
    (["purge", "--older-than", "1e15"], "--older-than: must be at most 3,155,760,000 seconds (100 years), got 1e+15"),
    (["jobs", "list", "--status", "finished"], "--status: must be one of queued, running, retrying, completed, dead, cancelled, got 'finished'"),
    (["jobs", "list", "-s", "bogus"], "--status: must be one of queued, running, retrying, completed, dead, cancelled, got 'bogus'"),
    (["jobs", "list", "--queue", "a b"], "--queue: 'a b' is not a queue name"),
    (["jobs", "list", "--limit", "0"], "--limit: must be an integer from 1 to 10,000, got 0"),
    (["jobs", "list", "-n", "many"], "--limit: must be an integer from 1 to 10,000, got 'many'"),
    (["jobs", "list", "--offset", "-1"], "--offset: must be an integer >= 0, got -1"),
    (["jobs", "list", "--jsn"], "--jsn: no such option (did you mean --json?)"),
    (["purge", "--older-than", "-5"], "--older-than: must be >= 0 seconds, got -5.0"),
    (["purge", "--older-than", "nan"], "--older-than: must be a finite number of seconds, got nan"),
    (["purge", "--older-than", "a week"], "--older-than: must be a number of seconds, got 'a week'"),
    (["purge"], "--older-than: is required"),
    (["jobs", "show", "seven"], "ID: must be an integer, got 'seven'"),
    (["jobs", "cancel"], "--all: name jobs (ID or --key) or a filter (--queue, --status, --job-type), or pass --all"),
    (["jobs", "cancel", "--status", "completed"], "--status: must be one of queued, retrying, running, got 'completed'"),
    (["jobs", "cancel", "-s", "bogus"], "--status: must be one of queued, retrying, running, got 'bogus'"),
    (["jobs", "cancel", "seven"], "ID: must be an integer >= 1, got 'seven'"),
    (["jobs", "cancel", "3", "--queue", "a"], "--queue: cancels the jobs a filter matches; not with job ids or --key"),
    (["jobs", "cancel", "3", "--key", "k"], "--key: give job ids or --key, not both"),
    (["jobs", "cancel", "--queue", "a", "--all"], "--all: cancels every job; not with --queue, --status or --job-type"),
    (["jobs", "cancel", "--queue", "a b"], "--queue: 'a b' is not a queue name"),
    (["jobs", "cancel", "--job-type", "a b"], "--job-type: 'a b' is not a job type"),
    (["retry", "seven"], "ID: must be an integer, got 'seven'"),
    (["worker", "--app", "tether_no_such_module_here:app"], "--app: cannot import 'tether_no_such_module_here'"),
    (["worker", "--app", "json:dumps", "--concurrency", "0"], "concurrency (--concurrency, TETHER_CONCURRENCY): must be an integer from 1"),
    (["worker", "--app", "json:dumps", "-c", "many"], "concurrency (--concurrency, TETHER_CONCURRENCY): must be an integer, got 'many'"),
    (["worker", "--app", "json:dumps", "--prefetch", "-1"], "prefetch (--prefetch, TETHER_PREFETCH): must be an integer from 0"),
    (
        ["worker", "--app", "json:dumps", "--drain-timeout", "later"],
        "drain_timeout (--drain-timeout, TETHER_DRAIN_TIMEOUT): must be a number of seconds, got 'later'",
    ),
    (
        ["worker", "--app", "tether.testing:fake_app", "--until-idle", "--lease-timeout", "1e15"],
        "lease_timeout (--lease-timeout, TETHER_LEASE_TIMEOUT): must be at most 3,155,760,000 seconds (100 years), got 1e+15",
    ),
    (
        ["worker", "--app", "tether.testing:fake_app", "--until-idle", "--drain-timeout", "1e300"],
        "drain_timeout (--drain-timeout, TETHER_DRAIN_TIMEOUT): must be at most 3,155,760,000 seconds (100 years)",
    ),
    (
        ["worker", "--app", "json:dumps", "--async-concurrency", "0"],
        "async_concurrency (--async-concurrency, TETHER_ASYNC_CONCURRENCY): must be an integer from 1 to 100,000, got 0",
    ),
    (
        ["worker", "--app", "json:dumps", "--async-concurrency", "many"],
        "async_concurrency (--async-concurrency, TETHER_ASYNC_CONCURRENCY): must be an integer, got 'many'",
    ),
    (["worker", "--app", "json:dumps", "--job-timeout", "0"], "job_timeout (--job-timeout, TETHER_JOB_TIMEOUT): must be > 0 seconds, got 0.0"),
    (["worker", "--app", "json:dumps", "--job-timeout", "inf"], "job_timeout (--job-timeout, TETHER_JOB_TIMEOUT): must be a finite number of seconds, got inf"),
    (
        ["worker", "--app", "json:dumps", "--job-timeout", "soon"],
        "job_timeout (--job-timeout, TETHER_JOB_TIMEOUT): must be a number of seconds, got 'soon'",
    ),
    (["worker", "--app", "json:nothing"], "--app: 'json' has no attribute 'nothing'"),
    (["worker", "--app", "json:dumps"], "--app: calling json:dumps() failed: TypeError"),
    (["worker", "--app", "json:JSONDecoder"], "--app: json:JSONDecoder is a type, not a tether.Tether"),
    (["worker", "--app", "os:getpid"], "--app: os:getpid is an int, not a tether.Tether"),
    (["worker", "--app", "tether.testing:fake_app", "--worker-id", ""], "--worker-id: must be 1-200 printable characters"),
    (["worker"], "--app: is required (or set TETHER_APP)"),
    (["db", "upgrade", "--from-version", "1"], "--from-version: only with --sql"),
    (["db", "upgrade", "--sql", "--from-version", str(NEXT_VERSION)],
     f"--from-version: {NEXT_VERSION} is not a schema version of this Tether"),
    (["db", "upgrade", "--sql", "--from-version", "one"], "--from-version: must be an integer, got 'one'"),
    (["frobnicate"], "frobnicate: no such command (commands: dashboard, db, demo, enqueue, jobs, "),
    (["jobs", "show", "1", "2", "3"], "2 3: unexpected arguments of tether jobs show"),
    (["queues", "limit", "api", "0"], ("0: unexpected argument of tether queues limit (values go with its options: "
                                       "--max-running, --max-running-per-key, --rate, --per)")),
]


@pytest.mark.parametrize(("args", "expected"), BAD_INPUT, ids=[" ".join(a)[:40] for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, args: list[str], expected: str) -> None:
    path = tmp_path / "jobs.db"
    takes_db = args[0] in ("enqueue", "jobs", "purge", "retry", "db", "queues")
    result = cli(*args, *(["--database-url", f"sqlite:///{path}"] if takes_db else []))
    assert result.exit_code == 2, result.output
    assert one_error_line(result).startswith(expected)
    assert not path.exists()


ROOT_COMMANDS = "dashboard, db, demo, enqueue, jobs, purge, queues, reap, retry, schedules, worker, workers"

#: An unknown command is named first, like an unknown option, with the commands of its group (and
#: Typer's close guesses, when it has some); never Click's "No such command 'x'.".
UNKNOWN_COMMANDS = [
    (["frobnicate"], f"frobnicate: no such command (commands: {ROOT_COMMANDS})"),
    (["jbos"], f"jbos: no such command (did you mean jobs? commands: {ROOT_COMMANDS})"),
    (["queue"], f"queue: no such command (did you mean queues or enqueue? commands: {ROOT_COMMANDS})"),
    (["jobs", "frobnicate"], "frobnicate: no such command of tether jobs (commands: cancel, list, show, why)"),
    (["jobs", "lst"], "lst: no such command of tether jobs (did you mean list? commands: cancel, list, show, why)"),
    (["queues", "nope"], "nope: no such command of tether queues (commands: limit, list, pause, resume)"),
    (["db", "frob"], "frob: no such command of tether db (commands: init, upgrade, version)"),
]


@pytest.mark.parametrize(("args", "expected"), UNKNOWN_COMMANDS, ids=[" ".join(a) for a, _ in UNKNOWN_COMMANDS])
def test_an_unknown_command_is_one_line_naming_it_and_its_groups_commands_exit_2(args: list[str], expected: str) -> None:
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert one_error_line(result) == expected


def test_a_value_from_the_environment_is_named_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """--app read from TETHER_APP: the message names TETHER_APP, which is what the user set."""
    monkeypatch.setenv("TETHER_APP", "tether_no_such_module_here:app")
    result = cli("worker")
    assert result.exit_code == 2
    assert one_error_line(result).startswith("TETHER_APP: cannot import 'tether_no_such_module_here'")


@pytest.mark.parametrize(
    ("variable", "value", "command", "expected"),
    [
        (
            "TETHER_CONCURRENCY", "many", ["worker", "--app", "json:dumps"],
            "concurrency (--concurrency, TETHER_CONCURRENCY): must be an integer, got 'many'",
        ),
        (
            "TETHER_REDIS_CLUSTER", "maybe", ["jobs", "list", "--database-url", "memory://"],
            "redis_cluster (--redis-cluster, TETHER_REDIS_CLUSTER): must be 1/0, true/false, yes/no or on/off, got 'maybe'",
        ),
    ],
    ids=["int", "switch"],
)
def test_an_unparsable_setting_variable_names_setting_flag_and_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, command: list[str], expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    result = cli(*command)
    assert result.exit_code == 2
    assert one_error_line(result) == expected


def test_every_command_names_flags_in_its_errors() -> None:
    """Each command's ValidationError is reported under the flag (FlagNamingCommand); a command
    added without it would print Python field names."""
    import typer
    from tether.entrypoints.cli.values import FlagNamingCommand

    def leaves(command: Any) -> list[Any]:
        children = getattr(command, "commands", None)
        return [command] if children is None else [leaf for child in children.values() for leaf in leaves(child)]

    commands = leaves(typer.main.get_command(app))
    assert len(commands) >= 11
    assert all(isinstance(command, FlagNamingCommand) for command in commands), [c.name for c in commands]


DEMO_BAD_INPUT = [
    (["--path", "{missing}"], "--path: '{missing}' is not a directory"),
    (["--workers", "0"], "--workers: must be an integer from 1 to 256, got 0"),
    (["--workers", "four"], "--workers: must be an integer, got 'four'"),
    (["--pattern", "a/b.py"], "--pattern: must be a file-name glob"),
    # The demo reads no TETHER_* variable, so its URLs are named by the flag alone.
    (["--database-url", "mongodb://u:hunter2@h/db"], "--database-url: unsupported URL 'mongodb://u:***@h/db'"),
    (["--redis-url", "http://cache"], "--redis-url: must be a redis://"),
    (
        ["--fresh", "--database-url", "postgresql+psycopg://u@h/db"],
        "--fresh: only a SQLite file or memory:// can be started afresh",
    ),
]


@pytest.mark.parametrize(("args", "expected"), DEMO_BAD_INPUT, ids=[a[0] for a, _ in DEMO_BAD_INPUT])
def test_demo_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path: Path, args: list[str], expected: str) -> None:
    missing = str(tmp_path / "nope")
    out = tmp_path / "out"
    result = cli("demo", *(a.replace("{missing}", missing) for a in args), "--out", str(out))
    assert result.exit_code == 2, result.output
    assert one_error_line(result).startswith(expected.replace("{missing}", missing))
    assert "hunter2" not in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    "command",
    [["jobs", "list"], ["jobs", "show", "1"], ["jobs", "why", "1"], ["retry", "1"], ["purge", "--older-than", "0"], ["reap"]],
)
def test_commands_other_than_enqueue_do_not_create_a_database(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "typo.db"
    result = cli(*command, "--database-url", f"sqlite:///{path}")
    assert result.exit_code == 2
    assert one_error_line(result) == (
        f"database_url (--database-url, TETHER_DATABASE_URL): no SQLite database at {path}; check the URL, or create it "
        f"with `tether db init --database-url sqlite:///{path}`"
    )
    assert not path.exists()


@pytest.mark.parametrize("command", [["jobs", "list"], ["db", "init"], ["db", "version"], ["enqueue", "x"], ["reap"]])
def test_a_two_slash_sqlite_url_gets_the_url_shape_error_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """Not "run tether db init --database-url sqlite://relative.db" (the same bad URL), nor
    SQLAlchemy's parse error: the URL's shape is what is wrong, and the message gives both right forms."""
    monkeypatch.chdir(tmp_path)
    result = cli(*command, "--database-url", "sqlite://relative.db")
    assert result.exit_code == 2
    assert one_error_line(result) == (
        "database_url (--database-url, TETHER_DATABASE_URL): 'sqlite://relative.db' has two slashes, so 'relative.db' "
        "is read as a host name, and SQLite takes none; write sqlite:///relative.db for a path relative to the current "
        "directory, or sqlite:////absolute/path/relative.db for an absolute one"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_missing_relative_sqlite_file_says_where_it_was_looked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlite:///tmp/x.db is ./tmp/x.db: the message shows the absolute path it meant and, as /tmp
    exists, the four-slash URL of /tmp/x.db."""
    monkeypatch.chdir(tmp_path)
    result = cli("jobs", "list", "--database-url", "sqlite:///tmp/x.db")
    assert result.exit_code == 2
    assert one_error_line(result) == (
        "database_url (--database-url, TETHER_DATABASE_URL): no SQLite database at tmp/x.db (relative to the current "
        f"directory: {tmp_path}/tmp/x.db; for /tmp/x.db write sqlite:////tmp/x.db); check the URL, or create it with "
        "`tether db init --database-url sqlite:///tmp/x.db`"
    )
    created = cli("db", "init", "--database-url", "sqlite:///tmp/x.db")
    assert created.exit_code == 2
    assert one_error_line(created) == (
        f"sqlite:///tmp/x.db: cannot open the SQLite file tmp/x.db (relative to the current directory: {tmp_path}/tmp/x.db; "
        f"for /tmp/x.db write sqlite:////tmp/x.db): its directory {tmp_path}/tmp does not exist"
    )


def test_bad_database_url_names_the_setting_and_hides_the_password(tmp_path: Path) -> None:
    result = cli("enqueue", "x", "--database-url", "mysql://app:hunter2@db/jobs")
    assert result.exit_code == 2
    line = one_error_line(result)
    assert line.startswith("database_url (--database-url, TETHER_DATABASE_URL): unsupported URL 'mysql://app:***@db/jobs'")
    assert "hunter2" not in result.output


def test_bad_environment_value_is_bad_input(monkeypatch: pytest.MonkeyPatch, db: str) -> None:
    monkeypatch.setenv("TETHER_LEASE_TIMEOUT", "-3")
    result = cli("worker", "--app", "json:dumps")
    assert result.exit_code == 2
    assert one_error_line(result).startswith(
        "lease_timeout (--lease-timeout, TETHER_LEASE_TIMEOUT): must be > 0 seconds, got -3.0"
    )


def test_enqueue_list_show_with_idempotency(db: str) -> None:
    first = cli_json(
        "enqueue",
        "emails.send",
        "--payload",
        '{"to": "a@example.com", "n": 1}',
        "--queue",
        "mail",
        "--priority",
        "5",
        "--max-attempts",
        "4",
        "--idempotency-key",
        "welcome-42",
        "--database-url",
        db,
    )
    assert first["created"] is True
    job = first["job"]
    assert (job["job_type"], job["queue"], job["priority"], job["max_attempts"], job["status"]) == (
        "emails.send",
        "mail",
        5,
        4,
        "queued",
    )
    assert job["payload"] == {"to": "a@example.com", "n": 1}
    assert job["concurrency_key"] is None
    keyed = cli_json("enqueue", "emails.send", "--concurrency-key", "customer-42", "--database-url", db)["job"]
    assert keyed["concurrency_key"] == "customer-42"
    assert cli_json("jobs", "show", str(keyed["id"]), "--database-url", db)["concurrency_key"] == "customer-42"

    again = cli(
        "enqueue", "emails.send", "--payload", '{"to": "b@example.com"}', "--idempotency-key", "welcome-42", "--database-url", db
    )
    assert again.exit_code == 0
    assert f"job {job['id']} already holds idempotency key 'welcome-42' (queued); nothing enqueued" in again.output

    later = cli_json("enqueue", "reports.build", "--delay", "3600", "--database-url", db)["job"]
    scheduled = datetime.fromisoformat(later["scheduled_at"])
    created = datetime.fromisoformat(later["created_at"])
    assert scheduled - created == timedelta(seconds=3600)
    at = cli_json("enqueue", "reports.build", "--run-at", "2030-01-02T03:04:05+02:00", "--database-url", db)["job"]
    assert datetime.fromisoformat(at["scheduled_at"]) == datetime(2030, 1, 2, 1, 4, 5, tzinfo=UTC)

    listed = cli_json("jobs", "list", "--database-url", db)
    assert [j["id"] for j in listed["jobs"]] == [job["id"], keyed["id"], later["id"], at["id"]]
    assert listed["counts"] == {"queued": 4, "running": 0, "retrying": 0, "completed": 0, "dead": 0, "cancelled": 0}
    assert [j["id"] for j in cli_json("jobs", "list", "--queue", "mail", "--database-url", db)["jobs"]] == [job["id"]]
    assert cli_json("jobs", "list", "--status", "dead", "--database-url", db)["jobs"] == []
    assert len(cli_json("jobs", "list", "--limit", "2", "--offset", "1", "--database-url", db)["jobs"]) == 2

    table = cli("jobs", "list", "--database-url", db)
    assert table.exit_code == 0 and "emails.send" in table.output and "reports.build" in table.output

    shown = cli_json("jobs", "show", str(job["id"]), "--database-url", db)
    assert shown["payload"] == {"to": "a@example.com", "n": 1}
    assert shown["idempotency_key"] == "welcome-42"

    missing = cli("jobs", "show", "999", "--database-url", db)
    assert missing.exit_code == 2 and one_error_line(missing) == "job 999: not found"


def test_environment_variable_is_used_and_a_flag_beats_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env_db, flag_db = tmp_path / "env.db", tmp_path / "flag.db"
    monkeypatch.setenv("TETHER_DATABASE_URL", f"sqlite:///{env_db}")
    assert cli("enqueue", "a").exit_code == 0
    assert cli("enqueue", "b", "--database-url", f"sqlite:///{flag_db}").exit_code == 0
    in_env = [j["job_type"] for j in cli_json("jobs", "list")["jobs"]]
    in_flag = [j["job_type"] for j in cli_json("jobs", "list", "--database-url", f"sqlite:///{flag_db}")["jobs"]]
    assert (in_env, in_flag) == (["a"], ["b"])


def test_jobs_list_into_a_pipe_shows_whole_values(db: str) -> None:
    """CliRunner's output is not a terminal, like a pipe: long names must not be cut to 80 columns."""
    long_type = "billing.invoices.generate_monthly_statement_for_enterprise_accounts"
    long_queue = "enterprise-billing-statements-eu-west"
    assert cli("enqueue", long_type, "--queue", long_queue, "--database-url", db).exit_code == 0
    table = cli("jobs", "list", "--database-url", db)
    assert table.exit_code == 0
    row = next(line for line in table.output.splitlines() if long_type in line)
    assert long_queue in row and "queued" in row and "…" not in row


def test_jobs_list_shows_the_year_of_the_due_time(db: str) -> None:
    """A job due next year must not read as due this year."""
    assert cli("enqueue", "report", "--run-at", "2031-03-04T05:06:07Z", "--database-url", db).exit_code == 0
    table = cli("jobs", "list", "--database-url", db)
    row = next(line for line in table.output.splitlines() if "report" in line)
    assert "2031-03-04 05:06:07" in row


def _run_until_idle(db: str, handlers: dict[str, Any]) -> None:
    tether_app = connect(db)
    try:
        for name, func in handlers.items():
            tether_app.handler(name)(func)
        tether_app.worker(concurrency=1, max_wait=0.05).run(stop_when_idle=True, install_signal_handlers=False)
    finally:
        tether_app.close()


def test_retry_of_a_dead_job_and_of_a_live_one(db: str) -> None:
    job_id = cli_json("enqueue", "charge", "--payload", '{"amount": 5}', "--database-url", db)["job"]["id"]

    def refuse(payload: dict[str, Any]) -> None:
        raise PermanentError("card declined")

    _run_until_idle(db, {"charge": refuse})
    dead = cli_json("jobs", "show", str(job_id), "--database-url", db)
    assert (dead["status"], dead["attempts"]) == ("dead", 1)
    assert dead["last_error"] == "PermanentError: card declined"

    result = cli("retry", str(job_id), "--database-url", db)
    assert result.exit_code == 0 and f"job {job_id} is queued again on queue default" in result.output
    revived = cli_json("jobs", "show", str(job_id), "--database-url", db)
    assert (revived["status"], revived["attempts"]) == ("queued", 0)

    not_dead = cli("retry", str(job_id), "--database-url", db)
    assert not_dead.exit_code == 2
    assert one_error_line(not_dead) == f"job {job_id}: cannot retry a job that is queued"
    assert cli_json("jobs", "show", str(job_id), "--database-url", db)["status"] == "queued"


def test_jobs_cancel_by_id_key_and_filter(db: str) -> None:
    ids = [cli_json("enqueue", "mail", "--queue", "q1" if n < 4 else "q2", "--database-url", db)["job"]["id"] for n in range(6)]
    keyed = cli_json("enqueue", "report", "-k", "monthly-7", "--database-url", db)["job"]["id"]
    done = cli_json("enqueue", "noop", "--database-url", db)["job"]["id"]
    _run_until_idle(db, {"noop": lambda payload: None})

    one = cli("jobs", "cancel", str(ids[0]), str(ids[1]), "--database-url", db)
    assert one.exit_code == 0, one.output
    assert one.output.splitlines() == [f"job {ids[0]} cancelled", f"job {ids[1]} cancelled"]
    by_key = cli_json("jobs", "cancel", "--key", "monthly-7", "--database-url", db)
    assert [(j["id"], j["status"]) for j in by_key] == [(keyed, "cancelled")] and by_key[0]["cancel_requested_at"]
    bulk = cli("jobs", "cancel", "--queue", "q1", "--status", "queued", "--job-type", "mail", "--database-url", db)
    assert bulk.exit_code == 0 and bulk.output.startswith("2 job(s) cancelled"), bulk.output
    assert cli_json("jobs", "cancel", "--all", "--database-url", db) == {"cancelled": 2}
    counts = cli_json("jobs", "list", "--database-url", db)["counts"]
    assert (counts["cancelled"], counts["completed"], counts["queued"]) == (7, 1, 0)

    fresh = cli_json("enqueue", "mail", "--database-url", db)["job"]["id"]
    for args, message in [
        ((str(done),), f"job {done}: cannot cancel a job that is completed"),
        ((str(fresh), str(done)), f"job {done}: cannot cancel a job that is completed"),
        ((str(ids[0]),), f"job {ids[0]}: cannot cancel a job that is cancelled"),
        (("424242",), "job 424242: not found"),
        (("--key", "nobody-has-it"), "--key: no job holds idempotency key 'nobody-has-it'"),
    ]:
        refused = cli("jobs", "cancel", *args, "--database-url", db)
        assert refused.exit_code == 2 and one_error_line(refused) == message
    assert cli_json("jobs", "show", str(done), "--database-url", db)["status"] == "completed"
    assert cli_json("jobs", "show", str(fresh), "--database-url", db)["status"] == "queued"  # nothing written

    result = cli("retry", str(ids[0]), "--database-url", db)  # a cancelled job can be retried
    assert result.exit_code == 0 and f"job {ids[0]} is queued again" in result.output


def test_purge_deletes_only_finished_jobs_older_than_the_cutoff(db: str) -> None:
    done = cli_json("enqueue", "noop", "--database-url", db)["job"]["id"]
    _run_until_idle(db, {"noop": lambda payload: None})
    waiting = cli_json("enqueue", "noop", "--delay", "3600", "--database-url", db)["job"]["id"]

    kept = cli("purge", "--older-than", "3600", "--database-url", db)
    assert kept.exit_code == 0 and "purged 0 finished job(s)" in kept.output
    purged = cli("purge", "--older-than", "0", "--database-url", db)
    assert purged.exit_code == 0 and "purged 1 finished job(s)" in purged.output
    assert [j["id"] for j in cli_json("jobs", "list", "--database-url", db)["jobs"]] == [waiting]
    assert cli("jobs", "show", str(done), "--database-url", db).exit_code == 2


def test_reap_takes_back_an_expired_lease(db: str) -> None:
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    job_id = cli_json("enqueue", "slow", "--run-at", two_hours_ago, "--database-url", db)["job"]["id"]
    tether_app = connect(db)
    try:
        # A worker leased it an hour ago for 60 s and was never heard of again.
        past = datetime.now(UTC) - timedelta(hours=1)
        leased = tether_app.repository.lease(queues=None, worker_id="gone-worker", now=past, lease_timeout=60.0)
        assert [j.id for j in leased] == [job_id]
    finally:
        tether_app.close()
    result = cli("reap", "--database-url", db)
    assert result.exit_code == 0 and "reaped 1 expired lease(s): 1 retrying, 0 dead" in result.output
    shown = cli_json("jobs", "show", str(job_id), "--database-url", db)
    assert (shown["status"], shown["attempts"]) == ("retrying", 1)
    assert cli("reap", "--database-url", db).output.strip().startswith("reaped 0")


def test_jobs_show_of_a_job_released_at_shutdown_then_completed_shows_no_error(db: str) -> None:
    job_id = cli_json("enqueue", "deploy.survivor", "--database-url", db)["job"]["id"]
    tether_app = connect(db)
    try:  # a worker leased it and was stopped past its drain deadline: the job was released
        (leased,) = tether_app.repository.lease(queues=None, worker_id="old", now=datetime.now(UTC),
                                                 lease_timeout=60.0)
        tether_app.repository.release(job_id, leased.lease_token or "", now=datetime.now(UTC))
    finally:
        tether_app.close()
    released = cli_json("jobs", "show", str(job_id), "--database-url", db)
    assert (released["status"], released["attempts"], released["last_error"]) == ("queued", 0, None)
    _run_until_idle(db, {"deploy.survivor": lambda payload: None})
    done = cli_json("jobs", "show", str(job_id), "--database-url", db)
    assert (done["status"], done["attempts"], done["last_error"]) == ("completed", 1, None)


def test_db_init_creates_the_tables_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    for _ in range(2):
        result = cli("db", "init", "--database-url", f"sqlite:///{path}")
        assert result.exit_code == 0, result.output
        assert "tables ready" in result.output
    assert path.exists()
    assert cli_json("jobs", "list", "--database-url", f"sqlite:///{path}")["jobs"] == []
    memory = cli("db", "init", "--database-url", "memory://")
    assert memory.exit_code == 0 and "nothing" in memory.output


def test_worker_runs_the_handlers_of_the_app_it_is_pointed_at(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, db: str) -> None:
    out = tmp_path / "greeted.txt"
    (tmp_path / "greeter_app_for_cli_test.py").write_text(
        "import os\n"
        "import tether\n"
        "app = tether.connect(os.environ['TETHER_DATABASE_URL'])\n"
        "@app.handler('greet', queue='hello')\n"
        "def greet(payload):\n"
        "    with open(os.environ['GREET_OUT'], 'a') as f:\n"
        "        f.write(payload['name'] + '\\n')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("TETHER_DATABASE_URL", db)
    monkeypatch.setenv("GREET_OUT", str(out))
    for name in ("ada", "grace", "edsger"):
        assert cli("enqueue", "greet", "--queue", "hello", "--payload", json.dumps({"name": name})).exit_code == 0
    other = cli_json("enqueue", "greet", "--queue", "elsewhere", "--payload", '{"name": "nobody"}')["job"]["id"]
    try:
        result = cli("worker", "--app", "greeter_app_for_cli_test:app", "--queue", "hello", "--concurrency", "2", "--until-idle")
    finally:
        sys.modules.pop("greeter_app_for_cli_test", None)
    assert result.exit_code == 0, result.output
    assert sorted(out.read_text().split()) == ["ada", "edsger", "grace"]
    counts = cli_json("jobs", "list")["counts"]
    assert counts["completed"] == 3 and counts["queued"] == 1
    assert cli_json("jobs", "show", str(other))["status"] == JobStatus.QUEUED.value


#: App modules that fail while they are imported, and the one line the worker prints for each.
BROKEN_APPS = [
    ("import tether\napp = tether.connect(\n", "importing 'broken_app_for_cli_test' failed: SyntaxError: '(' was never closed"),
    ("raise RuntimeError('config missing')\n", "importing 'broken_app_for_cli_test' failed: RuntimeError: config missing"),
    (
        "import tether\napp = tether.connect('mysql://x')\n",
        "loading 'broken_app_for_cli_test:app' failed: database_url: unsupported URL 'mysql://x'; use memory://",
    ),
    ("import no_such_dependency_of_the_app\n", "cannot import 'broken_app_for_cli_test': No module named 'no_such_dependency"),
    (
        "import tether\ndef make():\n    return tether.connect('mysql://x')\n",
        "calling broken_app_for_cli_test:make() failed: database_url: unsupported URL 'mysql://x'",
    ),
]


@pytest.mark.parametrize(("source", "expected"), BROKEN_APPS, ids=["syntax", "raises", "bad-url", "dependency", "factory"])
def test_an_app_that_fails_to_load_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, source: str, expected: str
) -> None:
    """Whatever the app module raises while it is imported is bad --app input, like a module that
    is missing one of its imports: one line, exit 2, no traceback, and never the flag or variable
    of a setting the worker does not take."""
    (tmp_path / "broken_app_for_cli_test.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    attribute = "make" if "def make" in source else "app"
    try:
        result = cli("worker", "--app", f"broken_app_for_cli_test:{attribute}")
    finally:
        sys.modules.pop("broken_app_for_cli_test", None)
    assert result.exit_code == 2, result.output
    assert one_error_line(result).startswith(f"--app: {expected}")
    assert "TETHER_DATABASE_URL" not in result.output


def test_the_traceback_of_an_app_that_fails_to_import_is_logged_at_debug(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "broken_app_for_cli_test.py").write_text("def helper():\n    raise RuntimeError('config missing')\nhelper()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        quiet = cli("worker", "--app", "broken_app_for_cli_test:app")
        sys.modules.pop("broken_app_for_cli_test", None)
        loud = cli("worker", "--app", "broken_app_for_cli_test:app", "--log-level", "DEBUG")
    finally:
        sys.modules.pop("broken_app_for_cli_test", None)
    assert "Traceback" not in quiet.output
    assert loud.exit_code == 2
    assert "Traceback (most recent call last)" in loud.output and 'broken_app_for_cli_test.py", line 2, in helper' in loud.output
    assert loud.output.strip().splitlines()[-1] == (
        "tether: error: --app: importing 'broken_app_for_cli_test' failed: RuntimeError: config missing"
    )


def test_an_app_whose_store_is_unreachable_at_import_exits_1_naming_the_app(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Exit 1 still means "store unreachable"; the line says it happened while loading the app
    (port 1 refuses at once: no server needed)."""
    (tmp_path / "down_app_for_cli_test.py").write_text(
        "import tether\napp = tether.connect('postgresql+psycopg://postgres@127.0.0.1:1/test')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        result = cli("worker", "--app", "down_app_for_cli_test:app")
        sys.modules.pop("down_app_for_cli_test", None)
        from_env = cli("worker", env={"TETHER_APP": "down_app_for_cli_test:app"})
    finally:
        sys.modules.pop("down_app_for_cli_test", None)
    assert result.exit_code == 1, result.output
    assert one_error_line(result).startswith(
        "--app: loading 'down_app_for_cli_test:app' failed: postgresql+psycopg://postgres@127.0.0.1:1/test: cannot connect ("
    )
    assert from_env.exit_code == 1 and one_error_line(from_env).startswith("TETHER_APP: loading 'down_app_for_cli_test:app' failed: ")
    assert result.output.lower().count("is the server running") == 1  # the driver's hint and ours, said once


def test_an_app_that_requires_an_unreachable_redis_exits_1_naming_the_app(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A required Redis that does not answer is a server being down (exit 1), not bad input
    (port 1 refuses at once: no server needed)."""
    (tmp_path / "no_redis_app_for_cli_test.py").write_text(
        "import tether\n"
        "app = tether.connect('memory://', redis_url='redis://:pw@127.0.0.1:1/0',\n"
        "                      redis_options={'require_connection': True})\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        result = cli("worker", "--app", "no_redis_app_for_cli_test:app")
    finally:
        sys.modules.pop("no_redis_app_for_cli_test", None)
    assert result.exit_code == 1, result.output
    assert one_error_line(result).startswith(
        "--app: loading 'no_redis_app_for_cli_test:app' failed: redis_url redis://:***@127.0.0.1:1/0: cannot connect ("
    )


def test_worker_passes_prefetch_and_concurrency_to_the_pool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, db: str) -> None:
    from tether.entrypoints.service import Tether

    (tmp_path / "prefetch_app_for_cli_test.py").write_text(
        "import os\nimport tether\napp = tether.connect(os.environ['TETHER_DATABASE_URL'])\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("TETHER_DATABASE_URL", db)
    seen: list[dict[str, Any]] = []
    real = Tether.worker

    def recording(self: Tether, **options: Any) -> Any:
        seen.append(options)
        return real(self, **options)

    monkeypatch.setattr(Tether, "worker", recording)
    try:
        assert cli(
            "worker", "--app", "prefetch_app_for_cli_test:app", "--prefetch", "7", "-c", "3", "--job-timeout", "7.5",
            "--async-concurrency", "250", "--until-idle",
        ).exit_code == 0
        sys.modules.pop("prefetch_app_for_cli_test", None)  # the worker closed that app: import it afresh
        monkeypatch.setenv("TETHER_PREFETCH", "0")
        assert cli("worker", "--app", "prefetch_app_for_cli_test:app", "--until-idle").exit_code == 0
        sys.modules.pop("prefetch_app_for_cli_test", None)
        monkeypatch.setenv("TETHER_JOB_TIMEOUT", "90")
        assert cli("worker", "--app", "prefetch_app_for_cli_test:app", "--until-idle").exit_code == 0
    finally:
        sys.modules.pop("prefetch_app_for_cli_test", None)
    assert [(o["prefetch"], o["concurrency"]) for o in seen] == [(7, 3), (0, 4), (0, 4)]
    assert [o["job_timeout"] for o in seen] == [7.5, None, 90.0]
    assert [o["async_concurrency"] for o in seen] == [250, 100, 100]


def test_the_worker_start_line_counts_async_slots_when_the_app_has_async_handlers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, db: str) -> None:
    (tmp_path / "async_app_for_cli_test.py").write_text(
        "import os\nimport tether\napp = tether.connect(os.environ['TETHER_DATABASE_URL'])\n"
        "@app.handler('fetch')\nasync def fetch(payload):\n    pass\n"
    )
    (tmp_path / "plain_app_for_cli_test.py").write_text(
        "import os\nimport tether\napp = tether.connect(os.environ['TETHER_DATABASE_URL'])\n"
        "@app.handler('mail')\ndef mail(payload):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("TETHER_DATABASE_URL", db)
    outputs = []
    try:
        for app_spec, options in (("async_app_for_cli_test:app", ["--async-concurrency", "40"]), ("plain_app_for_cli_test:app", [])):
            result = cli("worker", "--app", app_spec, "-c", "2", *options, "--until-idle", "--log-level", "INFO")
            assert result.exit_code == 0, result.output
            outputs.append(result.output)
    finally:
        sys.modules.pop("async_app_for_cli_test", None)
        sys.modules.pop("plain_app_for_cli_test", None)
    lines = [next(line for line in out.splitlines() if "chosen by the app" in line) for out in outputs]
    assert ": 2 thread(s) and 40 async slot(s), queues" in lines[0]
    assert ": 2 thread(s), queues" in lines[1]


@pytest.mark.parametrize("interrupted, code", [(True, 130), (False, 1)])
def test_a_demo_that_did_not_end_as_designed_exits_130_when_interrupted_else_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, interrupted: bool, code: int
) -> None:
    """The exit code follows the summary the demo wrote (the run itself is tested end to end in e2e)."""
    from tether.entrypoints import demo as demo_module

    def fake_run(options: Any, console: Any = None) -> bool:
        options.out.mkdir(parents=True, exist_ok=True)
        options.summary_path.write_text(json.dumps({"interrupted": interrupted, "as_designed": False}))
        return False

    monkeypatch.setattr(demo_module, "run_demo", fake_run)
    result = cli("demo", "--path", str(tmp_path), "--out", str(tmp_path / "out"))
    assert result.exit_code == code, result.output


def test_version_and_help() -> None:
    import tether

    version = cli("--version")
    assert version.exit_code == 0 and version.output.strip() == f"tether {tether.__version__}"
    bare = cli("jobs")
    assert "list" in bare.output and "show" in bare.output
    assert cli("enqueue", "--help").exit_code == 0
