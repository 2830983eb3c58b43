"""Retried transient storage errors cost a bounded number of WARNING lines (issue 3: errors are
logged at a bounded rate during connection loss)."""

from __future__ import annotations

import logging

import pytest
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.sqlalchemy import transactions as sql_transactions


def frozen_limit(monkeypatch: pytest.MonkeyPatch, times: list[float]) -> None:
    """Give the repository a fresh limiter of its own period, reading ``times[0]`` as now."""
    limit = RateLimitedLog(sql_transactions.log, sql_transactions.TRANSIENT_LOG_PERIOD, clock=lambda: times[0])
    monkeypatch.setattr(sql_transactions, "_transient_limit", limit)


def test_the_repository_limits_transient_warnings_to_one_per_period() -> None:
    assert sql_transactions._transient_limit.period == sql_transactions.TRANSIENT_LOG_PERIOD == 1.0
    assert sql_transactions._transient_limit.logger is sql_transactions.log


def test_a_burst_of_transient_errors_logs_one_warning_per_period(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen_limit(monkeypatch, [50.0])
    with caplog.at_level(logging.DEBUG, logger="tether.adapters.sqlalchemy"):
        for attempt in range(100):
            sql_transactions._log_transient("transient error %d", attempt)
    levels = [r.levelno for r in caplog.records if r.name == "tether.adapters.sqlalchemy"]
    assert levels.count(logging.WARNING) == 1
    assert levels.count(logging.DEBUG) == 99
    assert caplog.records[0].getMessage() == "transient error 0"
    assert caplog.records[-1].getMessage() == "transient error 99"  # held back lines go out at DEBUG, unchanged


def test_a_new_period_logs_a_warning_again(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [50.0]
    frozen_limit(monkeypatch, now)
    with caplog.at_level(logging.DEBUG, logger="tether.adapters.sqlalchemy"):
        for attempt in range(3):
            sql_transactions._log_transient("transient error %d", attempt)
            now[0] += sql_transactions.TRANSIENT_LOG_PERIOD
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 3
