"""Shared fixtures: service URLs, per-run isolation, and the skip-or-fail rule for services.

``TETHER_TEST_DATABASE_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``) and
``TETHER_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) name the servers.  Where one is
unreachable its tests skip with the reason, unless ``TETHER_REQUIRE_SERVICES=1`` (set by .ci/run),
which turns the skip into a failure.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

# Helper modules whose asserts should explain their failures like a test's own (before any import).
pytest.register_assert_rewrite("tests.executions", "tests.integration.sql_repository_checks", "tests.postgres_fixtures")

from tests.redis_cluster import ThrowawayRedisCluster
from tests.throwaway_redis import binaries_missing

DATABASE_URL = os.environ.get("TETHER_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE_SERVICES = os.environ.get("TETHER_REQUIRE_SERVICES") == "1"
#: Unique per test run: PostgreSQL schemas and Redis key prefixes carry it so runs never collide.
#: Kept in the environment because pytest loads this file as ``conftest`` while test modules import
#: it again as ``tests.conftest``: both copies (and subprocesses) must agree on one value.
RUN_ID = os.environ.setdefault("TETHER_TEST_RUN_ID", uuid.uuid4().hex[:10])


def service_unavailable(what: str, reason: str) -> None:
    """Skip the test (or fail it when services are required) because ``what`` is unreachable."""
    message = f"{what} unreachable: {reason}"
    if REQUIRE_SERVICES:
        pytest.fail(message + " (TETHER_REQUIRE_SERVICES=1)")
    pytest.skip(message)


@pytest.fixture(autouse=True)
def restore_root_logging() -> Iterator[None]:
    """Undo a test's ``logging.basicConfig(force=True)`` (``tether worker`` configures logging): its
    handler writes to a stream that is closed once the test ends, and its level would let INFO
    lines of later tests into their captured output."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def run_id() -> str:
    return RUN_ID


def redis_connection(url: str = REDIS_URL) -> redis.Redis:
    """A client of the Redis server at ``url`` (replies decoded to ``str``); the caller closes it.

    Skips (or fails, under ``TETHER_REQUIRE_SERVICES=1``) when the server does not answer PING.
    """
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_unavailable("Redis", str(exc))
    return client


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """A :func:`redis_connection` to the Redis test server (``REDIS_URL``), closed afterwards."""
    client = redis_connection()
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ThrowawayRedisCluster]:
    """A private three-master Redis Cluster (real ``redis-server`` processes on free ports, see
    tests/redis_cluster.py), started once per session and killed at the end.

    Skips (or fails, under ``TETHER_REQUIRE_SERVICES=1``) when ``redis-server``/``redis-cli`` are missing.
    """
    missing = binaries_missing()
    if missing:
        service_unavailable("Redis Cluster", missing)
    cluster = ThrowawayRedisCluster(masters=3)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


def wait_for(condition: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``condition`` every 10 ms until it holds; AssertionError naming ``what`` after
    ``timeout`` seconds (a bound against hanging, never a measurement)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)
