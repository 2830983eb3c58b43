"""End to end: ``tether demo`` as a subprocess (the installed console script) on a small real tree.

The demo's failure plan is documented in tether.entrypoints.demo.tasks; this test recomputes it
independently from that documented rule, builds a tree holding files of every kind, and checks
the exact outcome: exit code, counts, dead letters, stored results and a second run adding nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def bucket(relative_path: str) -> int:
    """The documented rule: first 4 bytes of SHA-256 of the relative path, big-endian, mod 1000."""
    return int.from_bytes(hashlib.sha256(relative_path.encode()).digest()[:4], "big") % 1000


def kind(relative_path: str) -> str:
    b = bucket(relative_path)
    return "dead" if b < 5 else "twice" if b < 35 else "once" if b < 105 else "ok"


def pick_tree() -> dict[str, str]:
    """40 relative paths: 3 permanent failures, 3 failing twice, 4 failing once, 30 fine."""
    wanted = {"dead": 3, "twice": 3, "once": 4, "ok": 30}
    chosen: dict[str, str] = {}
    i = 0
    while any(wanted.values()):
        rel = f"pkg{i % 4}/sub{i % 3}/module_{i}.py"
        k = kind(rel)
        if wanted[k]:
            wanted[k] -= 1
            chosen[rel] = k
        i += 1
    return chosen


def tether_command() -> list[str]:
    script = Path(sys.executable).parent / "tether"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tether.entrypoints.cli"]


def run_demo(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["COLUMNS"] = "200"
    return subprocess.run(  # noqa: PLW1510 - callers assert on the exit code
        [*tether_command(), "demo", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )


def test_demo_on_a_small_tree_ends_as_designed_and_is_idempotent(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    plan = pick_tree()
    contents: dict[str, bytes] = {}
    for n, rel in enumerate(sorted(plan)):
        body = f"# file {n}\nvalue = {n * n}\n\ndef f():\n    return 'word ' * {n}\n".encode()
        if n % 5 == 0:
            body += b"last line without newline"
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        contents[rel] = body
    # Files the demo must not take: another pattern, a __pycache__ folder, a symlink.
    (tree / "README.txt").write_text("not python\n")
    (tree / "pkg0" / "__pycache__").mkdir()
    (tree / "pkg0" / "__pycache__" / "cached.py").write_text("x = 1\n")
    (tree / "link.py").symlink_to(tree / min(plan))

    first = run_demo(tmp_path, "--path", str(tree), "--workers", "4")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "40 new job(s), 0 already known" in first.stdout
    assert "every job ended as designed" in first.stdout
    assert "[bold" not in first.stdout and "[/bold" not in first.stdout  # markup rendered, never printed raw

    out = tmp_path / "tether-demo"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["files"] == 40
    assert summary["new_jobs"] == 40 and summary["known_jobs"] == 0
    assert summary["counts"] == {"queued": 0, "running": 0, "retrying": 0, "completed": 37, "dead": 3, "cancelled": 0}
    assert summary["retried_then_completed"] == 7
    assert summary["planned_dead"] == 3 and summary["dead_as_designed"] == 3
    assert summary["finished_this_run"] == 40
    assert summary["latency_p50_ms"] is not None and summary["latency_p99_ms"] >= summary["latency_p50_ms"]
    assert sorted(letter["rel"] for letter in summary["dead_letters"]) == sorted(r for r, k in plan.items() if k == "dead")
    assert all(letter["last_error"].startswith("PermanentError") for letter in summary["dead_letters"])
    assert (out / "demo.db").exists()

    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_rel = {r["rel"]: r for r in records}
    assert set(by_rel) == {r for r, k in plan.items() if k != "dead"}
    for rel, record in by_rel.items():
        body = contents[rel]
        assert record["sha256"] == hashlib.sha256(body).hexdigest()
        assert record["bytes"] == len(body)
        assert record["lines"] == len(body.splitlines())
        assert record["words"] == len(body.split())
        assert record["attempt"] == {"ok": 1, "once": 2, "twice": 3}[plan[rel]]
        assert record["path"] == str((tree / rel).resolve())
    one = min(by_rel)
    assert by_rel[one]["sha256"] == hashlib.sha256((tree / one).read_bytes()).hexdigest()

    second = run_demo(tmp_path, "--path", str(tree))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "0 new job(s), 40 already known" in second.stdout
    again = json.loads((out / "summary.json").read_text())
    assert again["new_jobs"] == 0 and again["known_jobs"] == 40
    assert again["counts"] == summary["counts"]
    assert again["finished_this_run"] == 0
    assert len((out / "results.jsonl").read_text().splitlines()) == len(records)  # nothing ran again


def test_demo_fresh_starts_over(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(3):
        (tree / f"m{i}.py").write_text(f"x = {i}\n")
    assert run_demo(tmp_path, "--path", str(tree)).returncode == 0
    fresh = run_demo(tmp_path, "--path", str(tree), "--fresh")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert "3 new job(s), 0 already known" in fresh.stdout
