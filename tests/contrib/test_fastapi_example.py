"""The FastAPI example (examples/fastapi_app) passes its own tests, run as a separate pytest
session from its own directory (its own configuration, and no clash between its test modules'
names and ours), on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app"


@pytest.mark.slow
@pytest.mark.postgres
def test_the_fastapi_example_passes_its_own_tests_on_sqlite_and_postgresql() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=EXAMPLE, check=False, capture_output=True, text=True, timeout=280, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    # 6 tests, each on SQLite and PostgreSQL; a skip would mean PostgreSQL was not reached
    assert summary.startswith("12 passed") and "skipped" not in summary, summary
