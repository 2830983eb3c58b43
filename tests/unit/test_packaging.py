"""The explicit packages list in pyproject.toml must name every package under src/.

A forgotten subpackage silently vanishes from the wheel while an editable install hides it.
"""

from __future__ import annotations

import json
import os
import re
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


def _imported_top_level_modules(folder: Path) -> set[str]:
    found = set()
    for path in folder.rglob("*.py"):
        for match in re.finditer(r"^\s*(?:import|from)\s+([A-Za-z_][A-Za-z0-9_]*)", path.read_text(encoding="utf-8"), re.MULTILINE):
            found.add(match.group(1))
    return found


#: Dependencies whose import name is not their project name.
IMPORT_NAMES = {"python_json_logger": "pythonjsonlogger"}


def test_every_runtime_dependency_is_imported_by_tether() -> None:
    """A dependency nothing in src/ imports only costs every install (psycopg-pool was one)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    imported = _imported_top_level_modules(ROOT / "src")
    unused = []
    for requirement in config["project"]["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)
        assert name, requirement
        module = name.group(0).lower().replace("-", "_")  # a dependency's import name is its project name
        module = IMPORT_NAMES.get(module, module)  # but for these
        if module not in imported:
            unused.append(requirement)
    assert unused == [], f"listed in [project] dependencies but imported nowhere in src/: {unused}"


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


#: What pip does with a build backend's hook (pyproject_hooks): run it with warnings recorded, the
#: filters of the environment (PYTHONWARNINGS) applied, then show each UserWarning as a BuildBackendWarning.
EDITABLE_HOOK = """
import json, sys, warnings
import setuptools.build_meta as backend
with warnings.catch_warnings(record=True) as caught:
    backend.build_editable(sys.argv[1])
shown = [f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught if issubclass(w.category, UserWarning)]
print("WARNINGS " + json.dumps(shown))
"""


def _pip_install_line(tmp_path: Path) -> str:
    """The command `make install` (run by `make demo` and `make test` on a fresh checkout) installs with."""
    dry = subprocess.run(
        ["make", "-n", "-B", "install", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    [line] = [line for line in dry.stdout.splitlines() if "pip install" in line and " -e " in line]
    return line


def _editable_build_warnings(tree: Path, out: Path, pythonwarnings: str) -> list[str]:
    env = {**os.environ, "PYTHONWARNINGS": pythonwarnings}
    built = subprocess.run(
        [sys.executable, "-c", EDITABLE_HOOK, str(out)], cwd=tree, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert built.returncode == 0, built.stderr
    [report] = [line for line in built.stdout.splitlines() if line.startswith("WARNINGS ")]
    return json.loads(report[len("WARNINGS "):])


@pytest.mark.slow
def test_the_first_make_install_prints_no_build_backend_warning(tmp_path: Path) -> None:
    """`make demo` on a fresh checkout: its editable install used to print setuptools' "Editable
    installation" notice (package-dir renames src to tether) as a BuildBackendWarning.  The
    Makefile's install line silences exactly that notice: setuptools' editable build of a clean
    copy, with the filter the line sets, warns about nothing; without it, the notice is there."""
    line = _pip_install_line(tmp_path)
    match = re.search(r"PYTHONWARNINGS='([^']+)'", line)
    assert match, line
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (tmp_path / "plain").mkdir()
    (tmp_path / "quiet").mkdir()
    assert [w for w in _editable_build_warnings(tree, tmp_path / "plain", "") if "Editable installation" in w]
    assert _editable_build_warnings(tree, tmp_path / "quiet", match.group(1)) == []


def test_no_folder_named_tether_can_shadow_the_editable_install() -> None:
    """What the silenced notice warns about: an editable install of a renamed package imports
    through a finder that a ``tether`` folder in the current directory would shadow (pytest and
    `python -m` run from the checkout root).  There is none, and `tether` here is src/."""
    assert not (ROOT / "tether").exists()
    import tether

    assert Path(tether.__file__).resolve() == ROOT / "src" / "__init__.py"
