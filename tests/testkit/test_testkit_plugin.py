"""The pytest plugin (entry point ``pytest11: tether``): fixtures, markers, a cheap import that
needs no Hypothesis; and the package's lazy exports."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from tether.adapters.clock import FakeClock
from tether.entrypoints.service import Tether
from tether.testing import pytest_plugin

ROOT = Path(__file__).resolve().parents[2]


def test_the_entry_point_names_the_plugin() -> None:
    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins.get("tether") == "tether.testing.pytest_plugin"


def test_the_fixtures_give_a_fake_app_on_the_fake_clock(tether_app: Tether, tether_clock: FakeClock) -> None:
    assert isinstance(tether_app, Tether)
    assert tether_app.clock is tether_clock
    assert tether_clock.now() == datetime(2026, 1, 1, tzinfo=UTC)
    assert tether_app.list() == []


def test_each_test_gets_a_fresh_app(tether_app: Tether) -> None:
    tether_app.enqueue("leftover.check", {})
    assert len(tether_app.list()) == 1  # the previous test's app is not this one


def test_the_markers_are_registered(pytestconfig: pytest.Config) -> None:
    lines = pytestconfig.getini("markers")
    for line in pytest_plugin.MARKERS:
        assert line in lines


def _run(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-c", code, *args], check=False, capture_output=True, text=True, timeout=120, env=env, cwd=cwd or ROOT
    )


def test_importing_the_plugin_loads_no_tether_module_and_no_third_party_library() -> None:
    result = _run(textwrap.dedent("""
        import sys
        before = set(sys.modules)
        import tether.testing.pytest_plugin
        new = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("tether", "hypothesis", "sqlalchemy", "redis", "psycopg", "attrs"))
        print(new)
    """))
    assert result.returncode == 0, result.stderr
    # tether._lazy (standard library only) gives the packages their lazy __getattr__/__dir__
    assert result.stdout.strip() == "['tether', 'tether._lazy', 'tether.testing', 'tether.testing.pytest_plugin']"


BLOCK_HYPOTHESIS = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hypothesis" or name.startswith("hypothesis."):
            raise ModuleNotFoundError("No module named 'hypothesis'", name="hypothesis")
sys.meta_path.insert(0, Block())
"""


def test_the_kit_and_the_plugin_work_without_hypothesis(tmp_path: Path) -> None:
    (tmp_path / "test_downstream.py").write_text(textwrap.dedent("""
        import pytest
        from tether.testing import assert_enqueued, drain

        @pytest.mark.slow
        def test_enqueue_and_drain(tether_app):
            tether_app.register("emails.send", lambda payload: None)
            tether_app.enqueue("emails.send", {"to": "a@b.c"})
            assert_enqueued(tether_app, "emails.send", {"to": "a@b.c"}, count=1)
            assert [r.outcome for r in drain(tether_app)] == ["completed"]
    """))
    code = BLOCK_HYPOTHESIS + textwrap.dedent("""
        import tether.testing
        assert tether.testing.fake_app is not None and tether.testing.RepositoryContract is not None
        try:
            tether.testing.RepositoryStateMachine
        except ModuleNotFoundError as exc:
            print("state machine needs", exc.name)
        import pytest
        # only our plugin (hypothesis's own pytest plugin cannot load here); --strict-markers needs ours
        sys.exit(pytest.main(["-q", "-p", "tether.testing.pytest_plugin", "-p", "no:cacheprovider",
                              "--strict-markers", "--rootdir", sys.argv[1], sys.argv[1]]))
    """)
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "state machine needs hypothesis" in result.stdout
    assert "1 passed" in result.stdout


def test_lazy_exports() -> None:
    import tether.testing as kit

    assert set(kit.__all__) >= {
        "fake_app", "drain", "DrainReport", "assert_enqueued", "assert_not_enqueued", "enqueued_jobs", "FakeClock",
        "RepositoryContract", "DispatcherContract", "RepositoryStateMachine",
    }
    assert sorted(kit.__all__) == sorted(kit._EXPORTS)
    for name in kit.__all__:
        assert getattr(kit, name) is not None, name
    assert kit.FakeClock is FakeClock
    assert callable(kit.drain) and kit.drain.__module__ == "tether.testing.inline"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        kit.nope  # noqa: B018
