"""One rule for ``TETHER_*`` variables that are set but empty: they count as unset, for the commands
and for an app built as the embedding guide shows (``tether.connect_from_env()``); the snippet of
the guide runs as printed with every variable set to the empty string."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tether
from tether.entrypoints.cli import app as cli_app
from tether.entrypoints.container import connect, connect_from_env
from tether.entrypoints.service import Tether
from tether.entrypoints.settings import InvalidSetting
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
#: The variables the guide's snippet (and ``connect_from_env``) read, all set but empty.
EMPTY = {
    name: ""
    for name in (
        "TETHER_DATABASE_URL", "TETHER_REDIS_URL", "TETHER_REDIS_PREFIX", "TETHER_REDIS_CLUSTER", "TETHER_SCHEMA",
        "TETHER_POLL_INTERVAL", "TETHER_MAX_PAYLOAD_BYTES", "TETHER_CONCURRENCY", "TETHER_JOB_TIMEOUT",
    )
}


def guide_snippet() -> str:
    """The first Python block under "One module for the app" in docs/embedding.md."""
    text = (ROOT / "docs" / "embedding.md").read_text(encoding="utf-8")
    section = text.split("## One module for the app", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.DOTALL).group(1)  # type: ignore[union-attr]


def database_file(app: Tether) -> Path:
    return Path(app.repository.engine.url.database).resolve()  # type: ignore[attr-defined]


def test_the_guides_snippet_runs_with_every_variable_set_but_empty(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name, value in EMPTY.items():
        monkeypatch.setenv(name, value)
    namespace: dict[str, object] = {}
    exec(compile(guide_snippet(), "embedding.md", "exec"), namespace)  # noqa: S102 - the documented code, as printed
    app = namespace["app"]
    assert isinstance(app, Tether)
    try:
        assert database_file(app) == (tmp_path / "tether.db").resolve()  # the commands' default store
        assert set(app.handlers) >= {"emails.send", "reports.build"}
    finally:
        app.close()


def test_the_commands_and_connect_from_env_agree_on_empty_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli_app, ["enqueue", "hello", "--json"], env=EMPTY)
    assert result.exit_code == 0, result.output
    with connect_from_env(environ=EMPTY) as app:
        assert database_file(app) == (tmp_path / "tether.db").resolve()
        assert [job.job_type for job in app.list()] == ["hello"]  # the job the command enqueued


def test_connect_from_env_reads_the_variables_as_the_commands_do(tmp_path: Path) -> None:
    assert tether.connect_from_env is connect_from_env
    environ = {**EMPTY, "TETHER_DATABASE_URL": f"sqlite:///{tmp_path / 'jobs.db'}", "TETHER_MAX_PAYLOAD_BYTES": "100"}
    with connect_from_env(environ=environ, default_queue="mail") as app:
        assert database_file(app) == (tmp_path / "jobs.db").resolve()
        assert (app.max_payload_bytes, app.default_queue) == (100, "mail")
    with pytest.raises(InvalidSetting, match=r"^schema \(--schema, TETHER_SCHEMA\): must be 1-63"):
        connect_from_env(environ={"TETHER_DATABASE_URL": "memory://", "TETHER_SCHEMA": "no-dashes"})


def test_connect_takes_an_empty_redis_url_or_schema_as_not_given() -> None:
    with connect("memory://", redis_url="", schema=" ") as app:
        assert type(app.dispatcher).__name__ == "PollingDispatcher"
    with pytest.raises(InvalidSetting, match="^database_url: "):  # an empty store URL is never guessed
        connect("")
