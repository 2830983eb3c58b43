"""``tether worker`` given a store option of the other commands (``--database-url``, ...): one
line naming the flag and saying where the store is chosen instead (exit 2), before the app is
loaded or anything is opened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from tether.entrypoints.cli import app
from tether.entrypoints.cli.values import STORE_FLAGS
from tether.entrypoints.cli.worker import NOT_WORKER_OPTIONS
from typer.testing import CliRunner

STORE_OPTIONS = [
    ("--database-url", "sqlite:///{path}", "tether.connect(URL)", "TETHER_DATABASE_URL"),
    ("--schema", "jobs", "schema=S", "TETHER_SCHEMA"),
    ("--redis-url", "redis://localhost:6379/0", "redis_url=R", "TETHER_REDIS_URL"),
    ("--redis-prefix", "myapp", '"prefix": P', "TETHER_REDIS_PREFIX"),
    ("--redis-cluster", None, '"cluster": True', "TETHER_REDIS_CLUSTER"),
]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_APP", raising=False)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def one_error_line(result: Any) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("tether: error: "), result.output
    return lines[0][len("tether: error: ") :]


@pytest.mark.parametrize(("flag", "value", "call", "variable"), STORE_OPTIONS, ids=[o[0] for o in STORE_OPTIONS])
def test_a_store_option_says_the_app_chooses_the_store(
    tmp_path: Path, flag: str, value: str | None, call: str, variable: str
) -> None:
    path = tmp_path / "jobs.db"
    given = [flag] if value is None else [flag, value.format(path=path)]
    result = cli("worker", "--app", "tether.testing:fake_app", *given)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert line.startswith(f"{flag}: tether worker uses the store and Redis of the app it loads (--app); ")
    assert call in line and f"tether.connect_from_env() with {variable} set" in line
    assert not path.exists()


def test_the_database_url_message_in_full_and_with_an_equals_sign(tmp_path: Path) -> None:
    result = cli("worker", f"--database-url=sqlite:///{tmp_path / 'jobs.db'}", "--app", "tether.testing:fake_app")
    assert result.exit_code == 2
    assert one_error_line(result) == (
        "--database-url: tether worker uses the store and Redis of the app it loads (--app); set the database URL "
        "where the app is made: tether.connect(URL), or tether.connect_from_env() with TETHER_DATABASE_URL set"
    )


def test_it_is_reported_even_without_an_app() -> None:
    result = cli("worker", "--database-url", "memory://")
    assert result.exit_code == 2
    assert one_error_line(result).startswith("--database-url: tether worker uses the store")


def test_any_other_unknown_option_is_still_no_such_option() -> None:
    result = cli("worker", "--app", "tether.testing:fake_app", "--databse-url", "memory://")
    assert result.exit_code == 2
    assert one_error_line(result) == "--databse-url: no such option"


def test_the_refused_options_are_the_store_options_the_other_commands_take() -> None:
    """Each is an option of some other command and not of the worker; every store option of
    ``tether enqueue`` (the commands' full set) is among them, and they are the store flags an
    extra-argument message leaves out of its hint."""
    root = typer.main.get_command(app)
    commands = root.commands  # type: ignore[attr-defined]

    def flags(command: Any) -> set[str]:
        return {opt for param in command.params for opt in getattr(param, "opts", ())}

    worker_flags = flags(commands["worker"])
    others = set().union(*(flags(c) for name, c in commands.items() if name != "worker"))
    assert set(NOT_WORKER_OPTIONS) <= others - worker_flags
    store_flags = {f for f in flags(commands["enqueue"]) if f in ("--schema",) or f.startswith(("--database", "--redis"))}
    assert store_flags == set(NOT_WORKER_OPTIONS) == STORE_FLAGS
