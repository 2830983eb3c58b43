"""The per-run id that names test schemas and Redis key prefixes is one value per run."""

from __future__ import annotations

import sys

import tests.conftest


def test_conftest_loaded_by_pytest_and_imported_by_modules_agree_on_the_run_id(run_id: str) -> None:
    loaded_by_pytest = sys.modules["conftest"] if "conftest" in sys.modules else sys.modules["tests.conftest"]
    assert run_id == tests.conftest.RUN_ID == loaded_by_pytest.RUN_ID
