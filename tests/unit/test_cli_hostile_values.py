"""Values found by the CLI fuzz tests: each is one error line naming the flag or variable, exit 2,
and nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tether.entrypoints.cli import app as cli_app
from typer.testing import CliRunner


@pytest.fixture
def database(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


def error_line(*args: str, env: dict[str, str] | None = None) -> str:
    result: Any = CliRunner().invoke(cli_app, list(args), env={"TETHER_DATABASE_URL": "", **(env or {})})
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and result.stdout == "", result.output
    return lines[0]


def test_a_payload_nested_past_the_json_parsers_stack_is_refused_like_any_too_deep_one(database: str) -> None:
    deep = "[" * 5000 + "]" * 5000
    assert error_line("enqueue", "x", "--payload", deep, "--database-url", database) == (
        "tether: error: --payload: nests deeper than 64 levels"
    )
    assert not Path(database.removeprefix("sqlite:///")).exists()


def test_a_schema_with_a_sqlite_url_names_the_flag_and_the_variable(database: str) -> None:
    expected = "tether: error: schema (--schema, TETHER_SCHEMA): SQLite has no schemas; leave it unset for sqlite:// URLs"
    assert error_line("enqueue", "x", "--database-url", database, env={"TETHER_SCHEMA": "nan"}) == expected
    assert error_line("jobs", "list", "--database-url", database, "--schema", "jobs") == expected


def test_a_long_run_at_is_quoted_short(database: str) -> None:
    line = error_line("enqueue", "x", "--run-at", "2026-01-01T00:00:00" + "9" * 10_000, "--database-url", database)
    assert line.startswith("tether: error: --run-at: '2026-01-01T00:00:00999") and len(line) < 300
