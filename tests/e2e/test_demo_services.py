"""``tether demo`` and the CLI unchanged on PostgreSQL, with Redis Streams dispatch.

Each test uses a PostgreSQL schema and a Redis key prefix carrying RUN_ID, and removes both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DATABASE_URL, REDIS_URL
from tests.e2e.test_demo import kind, run_demo
from tests.postgres_fixtures import schema_name, scratch_schema
from tests.redis_fixtures import temporary_prefix

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def pg_schema() -> Iterator[str]:
    schema = schema_name("e2e")
    with scratch_schema(schema):
        yield schema


@pytest.fixture
def redis_prefix(redis_client: Any) -> Iterator[str]:
    with temporary_prefix(redis_client, "e2e") as prefix:
        yield prefix


def test_demo_on_postgres_with_redis_dispatch(tmp_path: Path, pg_schema: str, redis_prefix: str) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    rels = [f"mod_{i}.py" for i in range(25)]
    for i, rel in enumerate(rels):
        (tree / rel).write_text(f"x = {i}\n")
    expected_dead = sum(1 for rel in rels if kind(rel) == "dead")
    args = [
        "--path",
        str(tree),
        "--database-url",
        DATABASE_URL,
        "--schema",
        pg_schema,
        "--redis-url",
        REDIS_URL,
        "--redis-prefix",
        redis_prefix,
    ]

    first = run_demo(tmp_path, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    summary = json.loads((tmp_path / "tether-demo" / "summary.json").read_text())
    assert summary["counts"] == {"queued": 0, "running": 0, "retrying": 0, "completed": 25 - expected_dead, "dead": expected_dead,
                                 "cancelled": 0}
    assert summary["new_jobs"] == 25

    second = run_demo(tmp_path, *args)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "0 new job(s), 25 already known" in second.stdout
