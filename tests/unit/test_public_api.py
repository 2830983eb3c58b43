"""``tether``, ``tether.testing`` and ``tether.testing.contract`` load their public names on first
use; ``dir()`` must list them all the same (tab completion, ``help()``), without loading them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PACKAGES = ["tether", "tether.testing", "tether.testing.contract"]
#: What each package imports for itself: never part of what dir() offers.
HELPERS = {"importlib", "annotations", "Any", "TYPE_CHECKING", "lazy_names", "_lazy_names", "_lazy", "_EXPORTS"}


def fresh_dir(package: str) -> dict[str, object]:
    """dir(package) in a new interpreter (names loaded by earlier tests cannot help), its __all__,
    and whether listing it imported the application modules."""
    code = (
        "import importlib, json, sys\n"
        f"module = importlib.import_module({package!r})\n"
        "listed = dir(module)\n"
        "print(json.dumps({'dir': listed, 'all': list(module.__all__),"
        " 'loaded': 'tether.entrypoints.service' in sys.modules}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout)


@pytest.mark.parametrize("package", PACKAGES)
def test_dir_lists_the_public_api_before_any_name_is_used(package: str) -> None:
    seen = fresh_dir(package)
    listed = set(seen["dir"])  # type: ignore[arg-type]
    assert set(seen["all"]) <= listed, sorted(set(seen["all"]) - listed)  # type: ignore[arg-type]
    assert not listed & HELPERS, sorted(listed & HELPERS)
    assert seen["dir"] == sorted(listed)


def test_dir_of_tether_is_exactly_the_api_and_loads_nothing() -> None:
    seen = fresh_dir("tether")
    public = [name for name in seen["dir"] if not name.startswith("_")]  # type: ignore[union-attr]
    assert public == sorted(name for name in seen["all"] if not name.startswith("_"))  # type: ignore[union-attr]
    assert "Tether" in public and "connect" in public and "__version__" in seen["dir"]  # type: ignore[operator]
    assert seen["loaded"] is False  # listing is not loading: import tether stays light


@pytest.mark.parametrize("package", PACKAGES)
def test_every_listed_name_resolves_and_unknown_ones_raise(package: str) -> None:
    module = __import__(package, fromlist=["_"])
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
        module.nope  # noqa: B018
