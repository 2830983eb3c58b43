"""The explicit packages list in pyproject.toml must name every package under src/.

A forgotten subpackage silently vanishes from the wheel while an editable install hides it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_src_package_is_listed_and_nothing_else() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for init in (ROOT / "src").rglob("__init__.py"):
        parts = init.parent.relative_to(ROOT / "src").parts
        found.add(".".join(("tether", *parts)))
    assert listed == found, f"missing from pyproject: {sorted(found - listed)}; listed but absent: {sorted(listed - found)}"


def test_package_dir_maps_src_to_tether() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["package-dir"] == {"tether": "src"}
    assert (ROOT / "src" / "py.typed").exists()
