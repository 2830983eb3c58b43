"""The shared rate-limited log (issue 3: errors are logged at a bounded rate during an outage).

Time comes from an injected clock: no sleeps, no timed assertions."""

from __future__ import annotations

import logging
import math

import pytest
from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import ValidationError

LOGGER = "tether.test.log_limits"


class ManualClock:
    """A monotonic source that moves only when a test sets it (seconds)."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def limited(clock: ManualClock, period: float = 1.0) -> RateLimitedLog:
    return RateLimitedLog(logging.getLogger(LOGGER), period, clock=clock)


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_one_line_a_period_per_key_goes_out_and_the_next_one_counts_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(100.0)
    log = limited(clock)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert log("a", logging.WARNING, "a failed %d", 1)  # first line of "a": out
        assert log("b", logging.WARNING, "b failed")  # another key is not held back by "a"
        clock.now = 100.5
        assert not log("a", logging.WARNING, "a failed %d", 2)  # held
        assert not log("a", logging.WARNING, "a failed %d", 3)  # held
        clock.now = 101.0
        assert log("a", logging.WARNING, "a failed %d", 4)  # a period later: out, with the count
        clock.now = 102.0
        assert log("a", logging.WARNING, "a failed %d", 5)  # the count started again
    assert messages(caplog) == [
        "a failed 1",
        "b failed",
        "a failed 4 (2 similar messages suppressed)",
        "a failed 5",
    ]


def test_admit_reports_what_it_held_back_per_key() -> None:
    clock = ManualClock(0.0)
    log = limited(clock, period=60.0)
    assert log.admit("clock") == 0
    assert [log.admit("clock") for _ in range(3)] == [None, None, None]
    assert log.admit("other") == 0
    clock.now = 59.9
    assert log.admit("clock") is None
    clock.now = 60.0
    assert log.admit("clock") == 4
    assert log.admit("clock") is None


def test_the_first_line_goes_out_whatever_the_clock_reads() -> None:
    log = limited(ManualClock(-1e6), period=3600.0)  # e.g. a skewed local source
    assert log.admit() == 0


def test_period_zero_lets_every_line_through() -> None:
    log = limited(ManualClock(5.0), period=0)
    assert [log.admit() for _ in range(3)] == [0, 0, 0]


def test_the_count_is_added_as_text_so_a_message_without_args_may_hold_a_percent_sign(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    log = limited(clock)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        log("k", logging.INFO, "disk 100% full")
        log("k", logging.INFO, "disk 100% full")
        clock.now += 1.0
        log("k", logging.INFO, "disk 100% full")
    assert messages(caplog) == ["disk 100% full", "disk 100% full (1 similar messages suppressed)"]


def test_a_line_keeps_its_level_exception_and_the_callers_location(caplog: pytest.LogCaptureFixture) -> None:
    log = limited(ManualClock())
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        try:
            raise ConnectionError("refused")
        except ConnectionError:
            log("k", logging.ERROR, "pass failed", exc_info=True)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and record.exc_info[0] is ConnectionError
    assert record.funcName == "test_a_line_keeps_its_level_exception_and_the_callers_location"


@pytest.mark.parametrize("period", [-1.0, math.nan, math.inf, "1", True])
def test_a_bad_period_is_refused_by_name(period: object) -> None:
    with pytest.raises(ValidationError, match="period"):
        RateLimitedLog(logging.getLogger(LOGGER), period)  # type: ignore[arg-type]
