"""The explicit packages list in pyproject.toml must name every package under src/.

A forgotten subpackage silently vanishes from the wheel while an editable install hides it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_a_built_wheel_holds_every_module_and_data_file_of_src(tmp_path: Path) -> None:
    """Built from a clean copy of pyproject.toml, README.md and src/ (no egg-info left by an editable
    install to fill gaps; no build isolation: the dev extra brings setuptools), the wheel must hold
    every file under src/ as tether/..., including Alembic's script directory (env.py,
    script.py.mako and each revision): an installed Tether can upgrade a database."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "-q",
         "-w", str(tmp_path), str(tree)],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = list(tmp_path.glob("tether_jobs-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if name.startswith("tether/")}
    expected = {
        "tether/" + path.relative_to(ROOT / "src").as_posix()
        for path in (ROOT / "src").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert expected - shipped == set()
    revisions = {name for name in shipped if name.startswith("tether/adapters/sqlalchemy/alembic_scripts/versions/0")}
    assert len(revisions) >= 2 and "tether/adapters/sqlalchemy/alembic_scripts/script.py.mako" in shipped
