"""Retried transient storage errors cost a bounded number of WARNING lines (issue 3: errors are
logged at a bounded rate during connection loss)."""

from __future__ import annotations

import logging
import math

import pytest
from tether.adapters.sqlalchemy import repository as sql_repository


def test_a_burst_of_transient_errors_logs_one_warning_per_period(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_repository, "_transient_logged_at", -math.inf)
    monkeypatch.setattr(sql_repository, "TRANSIENT_LOG_PERIOD", 3600.0)
    with caplog.at_level(logging.DEBUG, logger="tether.adapters.sqlalchemy"):
        for attempt in range(100):
            sql_repository._log_transient("transient error %d", attempt)
    levels = [r.levelno for r in caplog.records if r.name == "tether.adapters.sqlalchemy"]
    assert levels.count(logging.WARNING) == 1
    assert levels.count(logging.DEBUG) == 99
    assert caplog.records[0].getMessage() == "transient error 0"


def test_a_new_period_logs_a_warning_again(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sql_repository, "_transient_logged_at", -math.inf)
    monkeypatch.setattr(sql_repository, "TRANSIENT_LOG_PERIOD", 0.0)
    with caplog.at_level(logging.DEBUG, logger="tether.adapters.sqlalchemy"):
        for attempt in range(3):
            sql_repository._log_transient("transient error %d", attempt)
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 3
