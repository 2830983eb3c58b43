"""Hostile input with the Redis Streams dispatcher: whatever enqueue, enqueue_many, cancel and
retry are given, Redis only ever sees keys of the validated layout (the prefix's hash tag, then
``queues``, ``sweep-lock``, ``queue:<a validated queue name>`` ...) and stream entries of job ids:
no caller's text reaches it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import tether
from hypothesis import given
from hypothesis import strategies as st
from tether import EnqueueRequest, TetherError
from tether.adapters.redis_streams.keys import StreamKeys
from tether.entrypoints.service import Tether

from tests.conftest import REDIS_URL, redis_connection
from tests.fuzz.hostile import FUZZ
from tests.fuzz.test_api_fuzz import ENQUEUE_ARGUMENTS, JOB_IDS, texts_in
from tests.redis_fixtures import delete_keys, unique_prefix

pytestmark = pytest.mark.redis

#: What may follow ``{prefix}:`` in a key, and what a stream entry's fields and values may hold.
KEY_TAIL = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")
ENTRY_TEXT = re.compile(r"[A-Za-z0-9_.:\-]{0,40}")


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    client = redis_connection()
    yield client
    client.close()


@pytest.fixture(scope="module")
def on_redis(client: redis.Redis) -> Iterator[tuple[Tether, StreamKeys]]:
    prefix = unique_prefix("fuzz")
    keys = StreamKeys(prefix)
    with tether.connect("memory://", redis_url=REDIS_URL, redis_options={"prefix": prefix}) as app:
        yield app, keys
    published = any(client.type(key) == "stream" for key in client.scan_iter(match=keys.pattern()))
    delete_keys(client, prefix)
    assert published, "no enqueue was published: the fuzz test looked at nothing"


def redis_texts(client: redis.Redis, keys: StreamKeys) -> list[str]:
    """Every key of the prefix and every field and value of its streams, each checked against the
    layout on the way."""
    found: list[str] = []
    for key in client.scan_iter(match=keys.pattern(), count=1000):
        assert key.startswith(keys.tag + ":") and KEY_TAIL.fullmatch(key[len(keys.tag) + 1 :]), key
        found.append(key)
        if client.type(key) == "stream":
            for _entry_id, fields in client.xrange(key):
                for text in [*fields.keys(), *fields.values()]:
                    assert ENTRY_TEXT.fullmatch(text), (key, fields)
                    found.append(text)
    return found


@FUZZ
@given(batch=st.lists(ENQUEUE_ARGUMENTS, min_size=1, max_size=3), job_id=JOB_IDS, retry=st.booleans())
def test_redis_sees_only_validated_keys_and_job_ids(
    client: redis.Redis, on_redis: tuple[Tether, StreamKeys], batch: list[dict[str, Any]], job_id: Any, retry: bool
) -> None:
    app, keys = on_redis
    for arguments in batch:
        try:
            app.enqueue(**arguments)
        except TetherError:
            pass
    try:
        app.enqueue_many([EnqueueRequest(**arguments) for arguments in batch])
    except TetherError:
        pass
    try:
        app.retry(job_id) if retry else app.cancel(job_id)
    except TetherError:
        pass
    seen = "\n".join(redis_texts(client, keys))
    hostile = [t for t in texts_in([batch, job_id]) if len(t) >= 6 and not KEY_TAIL.fullmatch(t)]
    assert [t for t in hostile if t in seen] == []
