"""The finish line of ``tether worker --log-jobs``: its number is how long the attempt ran, and the
words say so for every outcome (a retry's delay is the ``tether.worker`` line's to give)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import attrs
import pytest
from tether.domain import transitions
from tether.domain.job import Job
from tether.domain.validation import prepare_job
from tether.entrypoints.execution import Outcome
from tether.entrypoints.job_logs import JobLogObserver

NOW = datetime(2026, 12, 2, 5, 6, tzinfo=UTC)


def leased_job() -> Job:
    new = prepare_job("flaky", {}, now=NOW, run_at=NOW)
    return attrs.evolve(transitions.create(new, job_id=4, now=NOW), attempts=1, leased_by="w-1")


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        (Outcome.COMPLETED, "job 4 (flaky) completed in 10 ms"),
        (Outcome.RETRYING, "job 4 (flaky) failed after 10 ms, retrying"),
        (Outcome.DEAD, "job 4 (flaky) failed after 10 ms, now dead"),
        (Outcome.CANCELLED, "job 4 (flaky) cancelled after running 10 ms"),
        (Outcome.SNOOZED, "job 4 (flaky) snoozed after running 10 ms"),
        (Outcome.NO_HANDLER, "job 4 (flaky) handed back after 10 ms (no handler here)"),
    ],
)
def test_the_finish_line_says_the_number_is_the_attempts_duration(
    outcome: Outcome, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="tether.jobs"):
        JobLogObserver().job_finished(leased_job(), outcome, 0.010_2)
    [line] = [r for r in caplog.records if r.name == "tether.jobs"]
    assert line.getMessage() == message
    assert line.levelno == (logging.WARNING if outcome is Outcome.DEAD else logging.INFO)
    assert (line.outcome, line.duration_seconds) == (outcome.value, 0.0102)  # type: ignore[attr-defined]
    assert (line.job_id, line.attempt, line.worker_id) == (4, 1, "w-1")  # type: ignore[attr-defined]
