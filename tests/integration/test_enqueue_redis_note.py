"""`tether enqueue` next to a real worker pool on Redis Streams: without a Redis URL it stores the job and
says on stderr that those workers see it only at their sweep; with the URL it publishes and says nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import tether
from tether.adapters.redis_streams.keys import StreamKeys
from tether.entrypoints.cli import app
from typer.testing import CliRunner

from tests.conftest import REDIS_URL
from tests.redis_fixtures import temporary_prefix

pytestmark = pytest.mark.redis


def test_enqueue_names_the_redis_url_only_when_it_is_missing(tmp_path: Path, redis_client: redis.Redis) -> None:
    database_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    with temporary_prefix(redis_client, "note") as prefix, \
            tether.connect(database_url, redis_url=REDIS_URL, redis_options={"prefix": prefix}) as worker_app:

        @worker_app.handler("mail.send")
        def send(payload: dict) -> None:
            return None

        with worker_app.worker(concurrency=1, heartbeat_interval=0.2, lease_timeout=5.0, worker_id="redis-pool"):
            [entry] = worker_app.workers()
            assert (entry.worker_id, entry.dispatcher, entry.gone) == ("redis-pool", "redis", False)
            base = ["enqueue", "mail.send", "--database-url", database_url]
            quiet = CliRunner().invoke(app, [*base, "--redis-url", REDIS_URL, "--redis-prefix", prefix])
            assert quiet.exit_code == 0, quiet.output
            assert quiet.stderr == ""
            noted = CliRunner().invoke(app, base)
            assert noted.exit_code == 0, noted.output
            assert noted.stdout.startswith("enqueued job 2 ")
            assert noted.stderr.splitlines() == [
                ("tether: note: 1 live worker pool of queue default waits on Redis Streams (e.g. redis-pool); without "
                "--redis-url (or TETHER_REDIS_URL) they see this job only at their next sweep, seconds late")]
            stream = [fields["id"] for _, fields in redis_client.xrange(StreamKeys(prefix).stream("default"))]
            assert "1" in stream  # the enqueue with the URL published (the other one waits for a sweep)
        assert worker_app.workers() == []
