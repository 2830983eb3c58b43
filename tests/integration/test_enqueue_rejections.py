"""Values no store can hold, through ``Tether.enqueue`` and ``enqueue_many`` on every store.

Two kinds of bad input, each refused as a ValidationError/PayloadError naming the field before
anything is written, the same on memory, SQLite and PostgreSQL:

- text that has no UTF-8 encoding (a lone surrogate such as ``"\\ud800"``) in a payload string or
  key at any depth, an idempotency key, a job type or a queue name;
- numbers and times outside :mod:`tether.domain.limits` (a delay over 100 years or past the year
  9999, a ``run_at`` outside the years 1-9999 in UTC or more than 100 years away, a payload
  integer of more than 4,300 digits, a priority outside 32 bits, max_attempts over 10,000).

The caller's transaction stays usable: a joined SQLAlchemy transaction (on PostgreSQL, one failed
statement would abort it) goes on to store an order row and good jobs, and commits them.  The
values at the edges of the ranges are stored and read back exactly on every store.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import tether
from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select
from tether.adapters.clock import FakeClock
from tether.domain.errors import PayloadError, ValidationError
from tether.domain.job import JobStatus
from tether.domain.limits import MAX_SECONDS
from tether.entrypoints.service import EnqueueRequest, Tether

from tests.postgres_fixtures import empty_tables, schema_name, temporary_app

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MINUS_5 = timezone(timedelta(hours=-5))
_orders_tables = itertools.count()

#: (enqueue keyword arguments, the field the error names, the error class)
NOT_UTF8: list[tuple[dict[str, Any], str, type[ValidationError]]] = [
    ({"payload": {"s": "\ud800"}}, "payload.s", PayloadError),
    ({"payload": {"a": [1, {"b": "ok \udcff"}]}}, "payload.a[1].b", PayloadError),
    ({"payload": {"a": [{"\udcff": 1}]}}, "payload.a[0]", PayloadError),
    ({"idempotency_key": "order-\ud800"}, "idempotency_key", ValidationError),
    ({"job_type": "emails\udcff"}, "job_type", ValidationError),
    ({"queue": "mail\ud800"}, "queue", ValidationError),
]
OUT_OF_RANGE: list[tuple[dict[str, Any], str, type[ValidationError]]] = [
    ({"delay": 1e15}, "delay", ValidationError),
    ({"delay": timedelta.max}, "delay", ValidationError),
    ({"delay": MAX_SECONDS + 1}, "delay", ValidationError),
    ({"run_at": datetime(9999, 12, 31, 23, 0, tzinfo=MINUS_5)}, "run_at", ValidationError),
    ({"run_at": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))}, "run_at", ValidationError),
    ({"run_at": T0 + timedelta(days=36_525, microseconds=1)}, "run_at", ValidationError),
    ({"payload": {"n": [10**4300]}}, "payload.n[0]", PayloadError),
    ({"priority": 2**31}, "priority", ValidationError),
    ({"priority": -(2**31) - 1}, "priority", ValidationError),
    ({"max_attempts": 10_001}, "max_attempts", ValidationError),
]
BAD = NOT_UTF8 + OUT_OF_RANGE
BAD_IDS = [
    "payload-string", "payload-deep-string", "payload-key", "idempotency-key", "job-type", "queue",
    "delay-1e15", "delay-timedelta.max", "delay-100y+1s", "run_at-9999-at-utc-5", "run_at-year-0-in-utc",
    "run_at-100y+1us", "payload-4301-digits", "priority-2**31", "priority-below", "max_attempts-10001",
]


def _request(kwargs: dict[str, Any]) -> dict[str, Any]:
    request: dict[str, Any] = {"job_type": "emails.send", "payload": {"to": "a@b.c"}}
    request.update(kwargs)
    return request


@pytest.fixture(scope="module")
def postgres_app() -> Iterator[Tether]:
    with temporary_app(schema_name("rejections"), clock=FakeClock(T0)) as app:
        yield app


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tether]:
    if request.param == "postgres":
        shared: Tether = request.getfixturevalue("postgres_app")
        empty_tables(shared.repository)  # type: ignore[arg-type]
        shared.clock.set(T0)  # type: ignore[attr-defined]
        yield shared
        return
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'jobs.db'}"
    with tether.connect(url, clock=FakeClock(T0)) as opened:
        yield opened


def _stored(app: Tether) -> list[Any]:
    return [(j.job_type, j.payload) for j in app.list()]


@pytest.mark.parametrize(("kwargs", "field", "error"), BAD, ids=BAD_IDS)
def test_enqueue_refuses_it_naming_the_field_and_stores_nothing(app: Tether, kwargs: dict[str, Any], field: str,
                                                               error: type[ValidationError]) -> None:
    with pytest.raises(error) as info:
        app.enqueue(**_request(kwargs))
    assert info.value.field == field
    str(info.value).encode("utf-8")  # the message prints anywhere
    assert app.counts() == {status: 0 for status in JobStatus}


@pytest.mark.parametrize(("kwargs", "field", "error"), BAD, ids=BAD_IDS)
def test_enqueue_many_names_the_request_and_stores_none_of_the_batch(app: Tether, kwargs: dict[str, Any], field: str,
                                                                      error: type[ValidationError]) -> None:
    batch = [EnqueueRequest("emails.send", {"n": 0}), EnqueueRequest(**_request(kwargs)), EnqueueRequest("x", {"n": 2})]
    with pytest.raises(error) as info:
        app.enqueue_many(batch)
    assert info.value.field == f"requests[1].{field}"
    assert app.list() == []


def _caller_transaction(app: Tether) -> tuple[AbstractContextManager[Any], Table | None]:
    """The caller's own transaction: a SQLAlchemy ``engine.begin()`` holding an order row on the
    SQL stores (with its ``orders`` table), ``app.transaction()`` in memory."""
    engine = getattr(app.repository, "engine", None)
    if engine is None:
        return app.transaction(), None
    orders = Table(
        f"orders_{next(_orders_tables)}", MetaData(schema=getattr(app.repository, "schema", None)),
        Column("id", Integer, primary_key=True), Column("item", String(40)),
    )
    orders.create(engine)
    return engine.begin(), orders


def test_a_joined_transaction_goes_on_and_commits_after_each_refusal(app: Tether) -> None:
    transaction, orders = _caller_transaction(app)
    with transaction as conn:
        if orders is not None:
            conn.execute(insert(orders).values(item="desk"))
        first = app.enqueue("emails.send", {"n": 1}, connection=conn).job
        for kwargs, field, error in BAD:
            with pytest.raises(error) as info:
                app.enqueue(**_request(kwargs), connection=conn)
            assert info.value.field == field
            with pytest.raises(error) as info:
                app.enqueue_many([EnqueueRequest("ok", {}), EnqueueRequest(**_request(kwargs))], connection=conn)
            assert info.value.field == f"requests[1].{field}"
        rest = app.enqueue_many([EnqueueRequest("emails.send", {"n": 2}), EnqueueRequest("emails.send", {"n": 3})],
                                connection=conn)
        if orders is not None:
            conn.execute(insert(orders).values(item="lamp"))
    assert _stored(app) == [("emails.send", {"n": 1}), ("emails.send", {"n": 2}), ("emails.send", {"n": 3})]
    assert [j.id for j in app.list()] == [first.id, *(r.job.id for r in rest)]
    if orders is not None:
        with app.repository.engine.connect() as conn:  # type: ignore[attr-defined]
            assert [row.item for row in conn.execute(select(orders).order_by(orders.c.id))] == ["desk", "lamp"]


def test_the_edges_of_the_ranges_are_stored_and_read_back_exactly(app: Tether) -> None:
    longest = 10**4300 - 1  # 4,300 digits
    text = {"clef": "\U0001d11e", "mixed": "Zoë € 日本", "n": [longest, -longest]}
    jobs = [
        app.enqueue("edge.priority.high", text, priority=2**31 - 1, max_attempts=10_000).job,
        app.enqueue("edge.priority.low", {}, priority=-(2**31), max_attempts=1, idempotency_key="k-\U0001d11e").job,
        app.enqueue("edge.delay", {}, delay=MAX_SECONDS).job,
        app.enqueue("edge.delay.timedelta", {}, delay=timedelta(days=36_525)).job,
        app.enqueue("edge.ahead", {}, run_at=datetime(2125, 12, 31, 19, 0, tzinfo=MINUS_5)).job,
        app.enqueue("edge.ago", {}, run_at=T0 - timedelta(days=36_525)).job,
    ]
    stored = [app.get(job.id) for job in jobs]
    assert stored == jobs
    high, low, delay, delay_td, ahead, ago = stored
    assert (high.priority, high.max_attempts, high.payload) == (2_147_483_647, 10_000, text)
    assert (low.priority, low.max_attempts, low.idempotency_key) == (-2_147_483_648, 1, "k-\U0001d11e")
    assert delay.scheduled_at == delay_td.scheduled_at == datetime(2126, 1, 2, tzinfo=UTC)
    assert ahead.scheduled_at == datetime(2126, 1, 1, tzinfo=UTC)
    assert ago.scheduled_at == datetime(1926, 1, 1, tzinfo=UTC)
    # lease order over the extremes: the highest priority first, the lowest last, the far-future not at all
    leased = app.repository.lease(queues=None, worker_id="w-1", now=T0, lease_timeout=60, limit=10)
    assert [j.job_type for j in leased] == ["edge.priority.high", "edge.ago", "edge.priority.low"]
