"""PostgreSQL ``LISTEN``/``NOTIFY`` wake-ups for the polling dispatcher (PostgreSQL without Redis).

- :mod:`.listener`: one dedicated psycopg connection, outside the engine's pool, that ``LISTEN``\\ s
  on the schema's channel in a thread, re-established with backoff after a loss (:class:`PgListener`);
- :mod:`.due_timer`: the earliest due times a worker was told of, fired when they come (:class:`DueTimer`);
- :mod:`.dispatcher`: the polling dispatcher, woken by both (:class:`ListeningDispatcher`).

The notifications themselves are sent by the repository's writes
(:mod:`tether.adapters.sqlalchemy.pg_wakeups`); the channel name is passed in by the container.
"""

from tether.adapters.pg_notify.dispatcher import ListeningDispatcher
from tether.adapters.pg_notify.due_timer import DueTimer
from tether.adapters.pg_notify.listener import PgListener

__all__ = ["DueTimer", "ListeningDispatcher", "PgListener"]
