"""The container picks the PostgreSQL repository and the Redis Streams dispatcher from the URLs.

Real servers; a schema and a key prefix carrying RUN_ID, removed afterwards.
"""

from __future__ import annotations

import pytest
from tether.domain.errors import ConfigurationError, StorageUnavailable, TetherError
from tether.domain.job import JobStatus
from tether.entrypoints.container import connect

from tests.conftest import DATABASE_URL, REDIS_URL, RUN_ID, service_unavailable
from tests.redis_fixtures import delete_keys


def test_postgresql_url_with_redis_url_wires_both_and_runs_a_job() -> None:
    import redis

    schema = f"tether_c_{RUN_ID}"
    prefix = f"tether-c-{RUN_ID}"
    try:
        app = connect(
            DATABASE_URL, schema=schema, redis_url=REDIS_URL, redis_options={"prefix": prefix, "require_connection": True}
        )
    except (StorageUnavailable, ConfigurationError) as exc:
        service_unavailable("PostgreSQL or Redis", str(exc))
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert type(app.repository).__name__ == "PostgresJobRepository"
        assert type(app.dispatcher).__name__ == "RedisStreamsDispatcher"
        done: list[int] = []
        app.handler("count")(lambda payload: done.append(payload["n"]))
        for n in range(3):
            app.enqueue("count", {"n": n})
        assert client.exists("{" + prefix + "}:queue:default")  # published after commit
        app.worker(concurrency=2, max_wait=0.1).run(stop_when_idle=True, install_signal_handlers=False)
        assert sorted(done) == [0, 1, 2]
        assert app.counts()[JobStatus.COMPLETED] == 3
    finally:
        drop = app.repository.drop_schema
        drop()
        app.close()
        delete_keys(client, prefix)
        client.close()


def test_unreachable_postgresql_names_the_url_without_its_password() -> None:
    with pytest.raises(TetherError) as caught:
        connect("postgresql+psycopg://app:hunter2@127.0.0.1:1/nowhere")
    assert "hunter2" not in str(caught.value)
    assert "127.0.0.1:1" in str(caught.value)
