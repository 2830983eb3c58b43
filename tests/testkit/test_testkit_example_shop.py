"""The example downstream project (examples/shop) passes its own tests, run as a separate pytest
session from its own directory: this also proves the ``pytest11`` entry point loads the plugin
(its tests use the ``tether_app`` and ``tether_clock`` fixtures with no conftest of ours)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SHOP = Path(__file__).resolve().parents[2] / "examples" / "shop"


def test_the_shop_example_passes_its_own_tests() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=SHOP, check=False, capture_output=True, text=True, timeout=240, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith("6 passed"), summary
