"""``tether demo`` and the CLI unchanged on PostgreSQL, with Redis Streams dispatch.

Each test uses a PostgreSQL schema and a Redis key prefix carrying RUN_ID, and removes both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DATABASE_URL, REDIS_URL, RUN_ID, service_unavailable
from tests.e2e.test_demo import kind, run_demo

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def pg_schema() -> Iterator[str]:
    from tether.adapters.sqlalchemy import open_repository
    from tether.domain.errors import TetherError

    schema = f"tether_e2e_{RUN_ID}"
    try:
        repository = open_repository(DATABASE_URL, schema=schema, create=False)
    except TetherError as exc:
        if "missing" not in str(exc):  # a server we cannot reach, not just an empty schema
            service_unavailable("PostgreSQL", str(exc))
        repository = None
    try:
        yield schema
    finally:
        cleanup = open_repository(DATABASE_URL, schema=schema, create=True)
        cleanup.drop_schema()
        cleanup.close()
        if repository is not None:
            repository.close()


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_unavailable("Redis", str(exc))
    prefix = f"tether-e2e-{RUN_ID}"
    try:
        yield prefix
    finally:
        for key in client.scan_iter(match="{" + prefix + "}*"):
            client.delete(key)
        client.close()


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
    assert summary["counts"] == {"queued": 0, "running": 0, "retrying": 0, "completed": 25 - expected_dead, "dead": expected_dead}
    assert summary["new_jobs"] == 25

    second = run_demo(tmp_path, *args)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "0 new job(s), 25 already known" in second.stdout
