"""Text from the store reaches the terminal shown, never obeyed: an idempotency key, a payload and
a last error holding escape sequences (7- and 8-bit), a right-to-left override, a line break and
Rich markup are printed by ``jobs list``, ``jobs show`` and ``jobs why`` with those characters
escaped and the markup as literal text, one line per field."""

from __future__ import annotations

from pathlib import Path

import pytest
import tether
from tether.domain.failure import describe_failure
from tether.entrypoints.cli import app as cli_app
from tether.entrypoints.cli.output import printable
from typer.testing import CliRunner

HOSTILE = "k\x1b[2J\x9b31m\u202eevil\n[red]x[/red] [link=http://example.invalid]y[/link]"
SHOWN = "k\\x1b[2J\\x9b31m\\u202eevil\\n[red]x[/red] [link=http://example.invalid]y[/link]"


@pytest.fixture
def database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    with tether.connect(url) as app:
        job = app.enqueue("emails.send", {"s": HOSTILE}, idempotency_key=HOSTILE).job
        leased = app.repository.lease_job(job.id, worker_id="w", now=app.clock.now(), lease_timeout=60)
        assert leased is not None and leased.lease_token is not None
        app.repository.dead_letter(job.id, leased.lease_token, now=app.clock.now(), error=describe_failure(ValueError(HOSTILE)))
    return url


def output_of(*args: str) -> str:
    result = CliRunner().invoke(cli_app, list(args), env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    for line in result.output.splitlines():
        assert line.isprintable(), repr(line)
    return result.output


def test_printable_escapes_controls_format_characters_and_line_breaks_only() -> None:
    assert printable(HOSTILE) == SHOWN
    assert printable("café ☃ [bold]") == "café ☃ [bold]"
    assert printable("a\tb\r\u2028c\x00") == "a\\tb\\r\\u2028c\\x00"


def test_jobs_show_prints_the_key_payload_and_error_escaped(database: str) -> None:
    shown = output_of("jobs", "show", "1", "--database-url", database)
    assert f"idempotency_key      {SHOWN}" in shown
    assert f"ValueError: {SHOWN}" in shown
    assert '"s": "k\\u001b[2J\\x9b31m\\u202eevil\\n[red]x[/red]' in shown  # JSON escapes ESC and \n itself


def test_jobs_list_and_why_print_the_error_escaped(database: str) -> None:
    assert "ValueError: k\\x1b[2J" in output_of("jobs", "list", "--database-url", database)
    assert "k\\x1b[2J\\x9b31m\\u202eevil" in output_of("jobs", "why", "1", "--database-url", database)
