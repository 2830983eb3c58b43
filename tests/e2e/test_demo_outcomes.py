"""The demo's verdict, in process: it passes only when every job ended as designed, and says
which file did not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tether.entrypoints.demo import DemoOptions, run_demo
from tether.entrypoints.demo import run as run_module
from tether.entrypoints.demo import tasks as tasks_module
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
    real_stats = tasks_module.file_stats

    def broken_stats(path: str | Path) -> dict[str, Any]:
        if str(path).endswith(victim):
            raise OSError(5, "Input/output error")
        return real_stats(path)

    monkeypatch.setattr(tasks_module, "file_stats", broken_stats)
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


def test_an_interrupted_run_reports_the_jobs_left_as_the_table_counts_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped before any job ran (the pool's run replaced by an interrupt at once): the table and
    the 'not finished' line give the same number, with the thousands separator, and the summary's
    problems are one per job of the tree."""
    make_tree(tmp_path / "tree", 1_001)
    monkeypatch.setattr(run_module, "_run_with_progress", lambda app, pool, pending, console: True)
    options = DemoOptions.create(path=str(tmp_path / "tree"), database_url="memory://", out=str(tmp_path / "out"))
    with open(tmp_path / "console.txt", "w") as handle:
        assert run_demo(options, console=Console(file=handle, width=200)) is False
    printed = (tmp_path / "console.txt").read_text()
    assert "1,001" in printed  # the table
    assert "not finished: 1,001 job(s) have not ended yet" in printed
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["counts"]["queued"] == 1_001
    assert summary["problem_count"] == 1_001 and summary["unfinished"] == 1_001


def _tree_with_a_permanent_failure(root: Path) -> str:
    """A few files, one of which the demo's plan sends to dead at once; returns that one."""
    make_tree(root, 6)
    i = 0
    while True:
        rel = f"pkg/dead{i}.py"
        if failure_plan(rel).permanent:
            (root / rel).write_text("doomed = True\n")
            return rel
        i += 1


def test_latency_is_measured_only_for_jobs_this_run_enqueued(tmp_path: Path) -> None:
    """After `tether retry` of a dead demo job the next run starts that job again: its created_at
    is the first run's enqueue, so it is no first attempt of this run and gets no latency line."""
    from tether.entrypoints.container import connect

    doomed = _tree_with_a_permanent_failure(tmp_path / "tree")
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    options = DemoOptions.create(path=str(tmp_path / "tree"), database_url=url, out=str(tmp_path / "out"))
    with open(tmp_path / "first.txt", "w") as handle:
        assert run_demo(options, console=Console(file=handle, width=200)) is True
    assert "latency of the 7 job(s) this run enqueued" in (tmp_path / "first.txt").read_text()
    first = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert first["latency_jobs"] == 7 and first["latency_p50_ms"] is not None

    [letter] = first["dead_letters"]
    assert letter["rel"] == doomed
    app = connect(url)
    try:
        app.retry(letter["id"])
    finally:
        app.close()
    with open(tmp_path / "second.txt", "w") as handle:
        assert run_demo(options, console=Console(file=handle, width=200)) is True
    assert "latency of" not in (tmp_path / "second.txt").read_text()
    second = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert second["finished_this_run"] == 1 and second["new_jobs"] == 0  # the retried job did run
    assert second["latency_p50_ms"] is None and second["latency_jobs"] == 0
