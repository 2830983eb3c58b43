"""The next tick a reader shows is computed from the schedule's spec and zone when read, not the
one the last declaring pool stored (which falls behind between its heartbeats): ``app.schedules()``,
``tether schedules list`` and the dashboard agree, and none shows a tick in the past."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import tether
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.schedules import ScheduleState, upcoming_tick
from tether.domain.ticks import cadence_of
from tether.entrypoints.cli import app as cli_app
from tether.testing import fake_app
from typer.testing import CliRunner

from tests.unit.test_cli import SETTINGS_VARIABLES
from tests.web_support import client

NOW = datetime(2026, 3, 28, 23, 58, 30, tzinfo=UTC)  # the night before Paris springs forward


def stale(name: str, spec: str, tz: str = "UTC", *, now: datetime = NOW, **changes: object) -> ScheduleState:
    """A live declaration whose stored next tick is the tick of ten minutes ago."""
    try:
        old = cadence_of(spec, tz).latest_at_or_before(now - timedelta(minutes=10))
    except ValidationError:
        old = now - timedelta(minutes=10)
    fields: dict[str, object] = {
        "name": name, "job_type": "reports.build", "queue": None, "spec": spec, "tz": tz, "fingerprint": "f" * 32,
        "next_tick_at": old, "declared_by": "host-1-abc", "declared_at": now - timedelta(minutes=11),
        "declared_until": now + timedelta(hours=1),
    }
    fields.update(changes)
    return ScheduleState(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "tz", "expected"),
    [
        ("every 30s", "UTC", datetime(2026, 3, 28, 23, 59, 0, tzinfo=UTC)),
        ("every 3600s", "UTC", datetime(2026, 3, 29, 0, 0, tzinfo=UTC)),
        ("cron */15 * * * *", "UTC", datetime(2026, 3, 29, 0, 0, tzinfo=UTC)),
        ("cron 30 2 * * *", "Europe/Paris", datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),  # 02:30 skipped: 03:00 CEST
    ],
)
def test_the_next_tick_is_computed_from_the_spec_and_zone(spec: str, tz: str, expected: datetime) -> None:
    assert upcoming_tick(stale("s", spec, tz), NOW) == expected


def test_a_tick_already_enqueued_ahead_is_the_next_one_and_an_unreadable_spec_keeps_the_stored_one() -> None:
    ahead = NOW + timedelta(seconds=20)
    assert upcoming_tick(stale("s", "every 30s", last_tick_at=ahead, next_tick_at=ahead), NOW) == ahead
    assert upcoming_tick(stale("s", "fortnightly"), NOW) == NOW - timedelta(minutes=10)
    # a period the spec shows rounded (1234567 s reads "every 1.23457e+06s"): the stored tick stays
    odd = datetime(2026, 3, 1, tzinfo=UTC)
    assert upcoming_tick(stale("s", "every 1.23457e+06s", next_tick_at=odd), NOW) == odd


def test_app_schedules_the_cli_and_the_dashboard_show_the_tick_computed_when_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = fake_app(FakeClock(NOW))
    app.schedule_store.record_schedule(stale("beat", "every 30s"), now=NOW)  # type: ignore[union-attr]
    [beat] = app.schedules()
    assert beat.next_tick_at == datetime(2026, 3, 28, 23, 59, 0, tzinfo=UTC)
    page = client(app).get("/schedules")
    assert page.status_code == 200 and "23:59:00" in page.text and "23:48:30" not in page.text

    for name in SETTINGS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    db = f"sqlite:///{tmp_path / 'jobs.db'}"
    now = datetime.now(UTC)
    with tether.connect(db) as stored:
        stored.schedule_store.record_schedule(stale("beat", "every 30s", now=now), now=now)  # type: ignore[union-attr]
    data = json.loads(CliRunner().invoke(cli_app, ["schedules", "list", "--database-url", db, "--json"]).output)
    [row] = data["schedules"]
    shown = datetime.fromisoformat(row["next_tick_at"])
    assert now < shown <= datetime.now(UTC) + timedelta(seconds=30)
