"""The demo's verdict, in process: it passes only when every job ended as designed, and says
which file did not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tether.entrypoints import demo
from tether.entrypoints.demo import DemoOptions, run_demo
from tether.entrypoints.demo_tasks import failure_plan


def make_tree(root: Path, count: int) -> list[str]:
    rels = []
    for i in range(count):
        rel = f"pkg/m{i}.py"
        (root / "pkg").mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"value = {i}\n")
        rels.append(rel)
    return rels


def test_an_unplanned_failure_fails_the_demo_and_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rels = make_tree(tmp_path / "tree", 12)
    victim = next(rel for rel in rels if not failure_plan(rel).permanent and failure_plan(rel).transient_failures == 0)
    real_stats = demo.file_stats

    def broken_stats(path: str | Path) -> dict[str, Any]:
        if str(path).endswith(victim):
            raise OSError(5, "Input/output error")
        return real_stats(path)

    monkeypatch.setattr(demo, "file_stats", broken_stats)
    options = DemoOptions.create(path=str(tmp_path / "tree"), database_url="memory://", out=str(tmp_path / "out"), workers=2)
    console = Console(file=open(tmp_path / "console.txt", "w"), width=200)  # noqa: SIM115 - closed below
    ok = run_demo(options, console=console)
    console.file.close()
    assert ok is False
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["as_designed"] is False
    assert summary["problems"] == [f"{victim}: should be completed, is dead (OSError: [Errno 5] Input/output error)"]
    expected_dead = 1 + sum(1 for rel in rels if failure_plan(rel).permanent)
    assert summary["counts"]["dead"] == expected_dead
    assert summary["counts"]["completed"] == 12 - expected_dead
    assert "1 job(s) did not end as designed" in (tmp_path / "console.txt").read_text()


def test_a_clean_run_in_process_passes(tmp_path: Path) -> None:
    make_tree(tmp_path / "tree", 8)
    options = DemoOptions.create(path=str(tmp_path / "tree"), database_url="memory://", out=str(tmp_path / "out"))
    with open(tmp_path / "console.txt", "w") as handle:
        assert run_demo(options, console=Console(file=handle, width=200)) is True
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["problems"] == [] and summary["counts"]["queued"] == 0
