"""``tether schedules list`` on a SQLite file: the schedules a worker pool declared, their next tick,
last job and its status, as a table and as JSON; a missing table is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tether
from tether.entrypoints.cli import app
from typer.testing import CliRunner

from tests.unit.test_cli import SETTINGS_VARIABLES


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SETTINGS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_schedules_list_of_an_empty_store(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'jobs.db'}"
    tether.connect(db).close()
    result = cli("schedules", "list", "--database-url", db)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "0 schedule(s): 0 declared by a live worker, 0 not"
    assert json.loads(cli("schedules", "list", "--database-url", db, "--json").output) == {"schedules": []}


def test_schedules_list_shows_what_a_pool_declared_and_ticked(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'jobs.db'}"
    with tether.connect(db) as producer:
        producer.register("reports.build", lambda payload: None)
        producer.periodic("nightly", "reports.build", cron="30 2 * * *", tz="Europe/Paris", queue="reports")
        producer.periodic("beat", "reports.build", every=30)
        with producer.worker(concurrency=1, max_wait=0.05):
            pass  # the pool declared both at start and enqueued beat's next tick (at most 30 s ahead)
        [beat, nightly] = producer.schedules()
    result = cli("schedules", "list", "--database-url", db)
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    assert lines[0] == "2 schedule(s): 2 declared by a live worker, 0 not"
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.split() and line.split()[0] in ("beat", "nightly")}
    assert rows["beat"][:5] == ["beat", "reports.build", "every", "30s", "UTC"]
    assert rows["beat"][-2:] == [str(beat.last_job_id), "queued"]
    assert rows["nightly"][:7] == ["nightly", "reports.build", "cron", "30", "2", "*", "*"]
    assert "Europe/Paris" in rows["nightly"]

    data = json.loads(cli("schedules", "list", "--database-url", db, "--json").output)
    by_name = {s["name"]: s for s in data["schedules"]}
    assert by_name["nightly"]["schedule"] == "cron 30 2 * * *" and by_name["nightly"]["queue"] == "reports"
    assert by_name["nightly"]["last_job_id"] is None and by_name["nightly"]["declared"] is True
    assert by_name["beat"]["last_job_status"] == "queued" and by_name["beat"]["last_tick_at"] == by_name["beat"]["next_tick_at"]
    assert nightly.next_tick_at is not None and by_name["nightly"]["next_tick_at"].startswith(nightly.next_tick_at.strftime("%Y-%m-%dT%H:%M"))


def test_schedules_list_without_tables_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = cli("schedules", "list", "--database-url", f"sqlite:///{tmp_path / 'none.db'}")
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "tether db init" in result.output


def test_enqueue_with_a_key_in_the_reserved_namespace_is_one_line_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'jobs.db'}"
    result = cli("enqueue", "reports.build", "--idempotency-key", "tether:tick:nightly:1", "--database-url", db)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "idempotency" in result.output and "reserved" in result.output
    with tether.connect(db) as app:
        assert app.list() == []
