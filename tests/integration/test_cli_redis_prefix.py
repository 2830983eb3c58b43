"""`tether enqueue --redis-prefix P` publishes to the streams of prefix P, where workers of that
application read (a producer on the default prefix would leave them waiting for the sweep)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from tether.adapters.redis_streams.keys import StreamKeys
from tether.entrypoints.cli import app
from typer.testing import CliRunner

from tests.conftest import REDIS_URL, RUN_ID
from tests.redis_fixtures import delete_keys


@pytest.mark.parametrize("how", ["flag", "env"])
def test_enqueue_publishes_under_the_configured_prefix(tmp_path: Path, redis_client: redis.Redis, how: str) -> None:
    prefix = f"cli{RUN_ID}{how}"
    database_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    args = ["enqueue", "mail.send", "--payload", '{"to": "a@b.c"}', "--database-url", database_url, "--redis-url", REDIS_URL]
    env = {"TETHER_REDIS_PREFIX": prefix} if how == "env" else {}
    if how == "flag":
        args += ["--redis-prefix", prefix]
    try:
        result = CliRunner().invoke(app, args, env=env)
        assert result.exit_code == 0, result.output
        entries = redis_client.xrange(StreamKeys(prefix).stream("default"))
        assert [fields["id"] for _, fields in entries] == ["1"]
    finally:
        delete_keys(redis_client, prefix)


def test_a_bad_prefix_is_refused_naming_the_setting(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    result = CliRunner().invoke(
        app, ["enqueue", "x", "--database-url", database_url, "--redis-url", REDIS_URL, "--redis-prefix", "a b"]
    )
    assert result.exit_code == 2
    assert "redis_prefix" in result.output
    assert not (tmp_path / "jobs.db").exists()
