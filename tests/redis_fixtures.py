"""Redis key prefixes for tests: each test's dispatcher keys live under a prefix of its own that
carries this run's RUN_ID, and are deleted when the test is done, so runs and tests never collide
on the shared Redis test server.

- :func:`unique_prefix`: ``tt-<RUN_ID>-<tag><n>``, a new one on every call.
- :func:`delete_keys`: delete every key written under a prefix (``{prefix}:*``) from one node.
- :func:`temporary_prefix`: a :func:`unique_prefix` whose keys are deleted on exit (a fixture body)::

      @pytest.fixture
      def prefix(redis_client):
          with temporary_prefix(redis_client, "i") as name:
              yield name
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from tether.adapters.redis_streams.keys import StreamKeys

from tests.conftest import RUN_ID

_counter = itertools.count()


def unique_prefix(tag: str) -> str:
    """A dispatcher key prefix no other test of any run uses: ``tt-<RUN_ID>-<tag><n>`` (``tag``:
    letters and digits naming the test module)."""
    return f"tt-{RUN_ID}-{tag}{next(_counter)}"


def delete_keys(client: redis.Redis, prefix: str) -> None:
    """Delete the keys of ``prefix`` (``{prefix}:*``, see :meth:`StreamKeys.pattern`) that
    ``client``'s node holds.  On a cluster pass a client of the node that owns the prefix's slot."""
    keys = list(client.scan_iter(match=StreamKeys(prefix).pattern(), count=1000))
    if keys:
        client.delete(*keys)


@contextmanager
def temporary_prefix(client: redis.Redis, tag: str) -> Iterator[str]:
    """Yield a :func:`unique_prefix`; on exit delete its keys through ``client``."""
    prefix = unique_prefix(tag)
    try:
        yield prefix
    finally:
        delete_keys(client, prefix)
