"""DatabaseClock logs failed measurements at most once per LOG_EVERY seconds of its own local
source (no server needed: SQLite has no clock_timestamp(), so every measurement fails)."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import create_engine
from tether.adapters.sqlalchemy.clock import LOG_EVERY, DatabaseClock

LOGGER = "tether.adapters.sqlalchemy.clock"


def test_failed_measurements_warn_once_per_log_every_on_the_local_source(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    engine = create_engine("sqlite://")
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            clock = DatabaseClock(engine, refresh_interval=1.0, local=lambda: now[0], wall=lambda: 0.0)
            for _ in range(10):  # ten more failures inside one LOG_EVERY: counted, not logged
                now[0] += 1.0
                assert not clock.refresh()
            now[0] = 1000.0 + LOG_EVERY
            assert not clock.refresh()
    finally:
        engine.dispose()
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(warnings) == 2
    assert "keeping the local wall clock's offset (1 failure(s) in a row, next try in 1.0 s)" in warnings[0]
    assert "(12 failure(s) in a row" in warnings[1]
    assert not clock.synced
