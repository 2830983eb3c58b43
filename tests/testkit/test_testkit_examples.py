"""The example downstream projects under examples/ pass their own tests, each run as a separate
pytest session from its own directory with its own ``--strict-markers`` configuration.

This also proves the ``pytest11`` entry point loads the plugin: the shop's tests use the
``tether_app`` and ``tether_clock`` fixtures and the adapter example runs the contract suite
(whose ``slow`` marks must be registered) with no conftest of ours.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_pytest_in(project: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project, check=False, capture_output=True, text=True, timeout=280, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_the_shop_example_passes_its_own_tests() -> None:
    summary = run_pytest_in(EXAMPLES / "shop")
    assert summary.startswith("6 passed"), summary


@pytest.mark.slow
def test_the_adapter_author_example_passes_the_contract_and_the_state_machine() -> None:
    summary = run_pytest_in(EXAMPLES / "adapter_author")
    passed = int(summary.split()[0])
    assert passed >= 60 and "passed" in summary and "failed" not in summary and "skipped" not in summary, summary
