"""``tether worker``'s observability flags refused as bad input before anything starts: one line
naming the flag (exit 2)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from tether.entrypoints.cli import app
from typer.testing import CliRunner


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_METRICS_PORT", "TETHER_LOG_FORMAT", "TETHER_LOG_JOBS", "TETHER_APP"):
        monkeypatch.delenv(name, raising=False)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def one_error_line(result: Any) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def test_metrics_without_prometheus_client_name_the_flag_and_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "tether.entrypoints.observability.metrics", raising=False)
    result = cli("worker", "--app", "nowhere:app", "--metrics-port", "9100")
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "--metrics-port" in line and "tether-jobs[prometheus]" in line


@pytest.mark.parametrize(("args", "flag"), [
    (["--metrics-port", "0"], "--metrics-port"),
    (["--metrics-port", "65536"], "--metrics-port"),
    (["--log-format", "yaml"], "--log-format"),
])
def test_bad_values_name_their_flag(args: list[str], flag: str) -> None:
    result = cli("worker", "--app", "nowhere:app", *args)
    assert result.exit_code == 2
    assert flag in one_error_line(result)
