"""Hostile input through the public API, on memory, SQLite and PostgreSQL.

For every call (``enqueue``, ``enqueue_many``, ``get``, ``cancel``, ``retry``, ``explain``,
``list``, ``counts``, ``find_by_key``, ``cancel_matching``, ``purge``): either it succeeds, or
it raises a :class:`~tether.TetherError` (a ValidationError naming one of the call's fields) and
the store holds exactly the jobs it held before, in the same states.  No hostile text ever
appears inside a SQL statement: values reach the database as bound parameters only.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from tether import EnqueueRequest, TetherError
from tether.domain.errors import ValidationError
from tether.entrypoints.service import Tether

from tests.fuzz.hostile import (
    FUZZ,
    anything,
    datetimes_and_worse,
    durations_and_worse,
    hostile_text,
    integers_and_worse,
    payloads,
)
from tests.fuzz.stores import STORES, StatementLog, open_app, stored

HUGE = 10**5000
ENQUEUE_FIELDS = ("job_type", "payload", "queue", "priority", "run_at", "delay", "max_attempts", "idempotency_key")


@pytest.fixture(scope="module", params=STORES)
def fuzzed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Tether, StatementLog]]:
    if request.param == "postgresql":
        request.applymarker(pytest.mark.postgres)
    log = StatementLog()
    with open_app(request.param, tmp_path_factory.mktemp(f"fuzz_{request.param}"), log) as app:
        yield app, log


@pytest.fixture(scope="module")
def baseline(fuzzed: tuple[Tether, StatementLog]) -> str:
    """The SQL texts of a benign run of every call the fuzz tests make."""
    app, log = fuzzed
    job = app.enqueue("fuzz.base", {"a": 1}, idempotency_key="baseline-key").job
    app.enqueue("fuzz.base", {"a": 2}, queue="q", priority=3, delay=5, max_attempts=2)
    app.enqueue_many([EnqueueRequest("fuzz.base", {"b": 1}), EnqueueRequest("fuzz.base", idempotency_key="baseline-2")])
    app.get(job.id)
    app.explain(job.id)
    app.list(status="queued", queue="q", limit=5, offset=1)
    app.counts(queue="q")
    app.find_by_key("baseline-key")
    app.cancel_matching(queue="nothing-here", statuses=["queued"], job_type="fuzz.none")
    app.purge(datetime(2000, 1, 1, tzinfo=UTC))
    app.cancel(job.id)
    app.retry(job.id)
    text = "\n".join(log.texts)
    log.clear()
    return text


def good_or(hostile: st.SearchStrategy[Any], good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A valid value most of the time, so that each call has a few bad fields, not all of them."""
    return st.one_of(good, good, hostile)


ENQUEUE_ARGUMENTS = st.fixed_dictionaries(
    {
        "job_type": good_or(st.one_of(hostile_text(), anything()), st.sampled_from(["fuzz.job", "a:b-c_d.e"])),
        "payload": good_or(payloads(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)),
    },
    optional={
        "queue": good_or(st.one_of(hostile_text(), anything()), st.sampled_from(["default", "q-1.x", "Z" * 64])),
        "priority": good_or(integers_and_worse(), st.integers(-(2**31), 2**31 - 1)),
        "run_at": good_or(datetimes_and_worse(), st.datetimes(timezones=st.just(UTC), min_value=datetime(2000, 1, 1))),
        "delay": good_or(durations_and_worse(), st.floats(0, 3600)),
        "max_attempts": good_or(integers_and_worse(), st.integers(1, 10_000)),
        "idempotency_key": good_or(st.one_of(hostile_text(), anything()), st.from_regex(r"key-[a-z0-9]{1,8}", fullmatch=True)),
    },
)


def texts_in(value: Any) -> list[str]:
    """Every string inside ``value`` (keys and values of nested lists and dicts, however deep)."""
    found: list[str] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return found


def snapshot(app: Tether) -> list[tuple[int, str, Any]]:
    """Every stored job's id, status and cancellation request: what a rejected call must not change."""
    return [(job.id, job.status.value, job.cancel_requested_at) for job in app.list(limit=10_000)]


def rejected_cleanly(error: TetherError, fields: tuple[str, ...]) -> None:
    """A ValidationError must name one of the call's own fields (``payload.x``, ``requests[2].queue``)."""
    if isinstance(error, ValidationError):
        field = error.field.split("].", 1)[-1] if error.field.startswith("requests[") else error.field
        assert field.split(".", 1)[0].split("[", 1)[0] in fields, error.field
    assert str(error) and "\n" not in str(error), repr(str(error))


@FUZZ
@given(arguments=ENQUEUE_ARGUMENTS)
@example(arguments={"job_type": HUGE, "payload": {}})  # found: no repr of an int past 4,300 digits
@example(arguments={"job_type": "fuzz.job", "payload": {HUGE: 1}, "delay": HUGE})
def test_enqueue_succeeds_or_refuses_naming_a_field_and_writes_nothing(
    fuzzed: tuple[Tether, StatementLog], baseline: str, arguments: dict[str, Any]
) -> None:
    app, log = fuzzed
    before = snapshot(app)
    try:
        result = app.enqueue(**arguments)
    except TetherError as error:
        rejected_cleanly(error, ENQUEUE_FIELDS)
        assert snapshot(app) == before
    else:
        assert stored(app) == len(before) + (1 if result.created else 0)
        assert app.get(result.job.id) == result.job
    assert log.leaks(texts_in(arguments), baseline) == []


@FUZZ
@given(batch=st.lists(ENQUEUE_ARGUMENTS, min_size=1, max_size=4))
def test_enqueue_many_stores_all_or_none(
    fuzzed: tuple[Tether, StatementLog], baseline: str, batch: list[dict[str, Any]]
) -> None:
    app, log = fuzzed
    before = snapshot(app)
    requests = [EnqueueRequest(**arguments) for arguments in batch]
    try:
        results = app.enqueue_many(requests)
    except TetherError as error:
        rejected_cleanly(error, ENQUEUE_FIELDS)
        assert snapshot(app) == before
    else:
        assert stored(app) == len(before) + sum(r.created for r in results)
    assert log.leaks(texts_in(batch), baseline) == []


JOB_IDS = st.one_of(st.integers(-3, 50), integers_and_worse(), anything())


@FUZZ
@given(call=st.sampled_from(["get", "cancel", "retry", "explain"]), job_id=JOB_IDS)
def test_calls_by_job_id_refuse_bad_ids_and_write_nothing(
    fuzzed: tuple[Tether, StatementLog], baseline: str, call: str, job_id: Any
) -> None:
    app, log = fuzzed
    before = snapshot(app)
    try:
        getattr(app, call)(job_id)
    except TetherError as error:
        rejected_cleanly(error, ("job_id",))
        assert snapshot(app) == before
    assert log.leaks(texts_in(job_id), baseline) == []


READ_CALLS = st.one_of(
    st.tuples(
        st.just("list"),
        st.fixed_dictionaries(
            {},
            optional={
                "status": good_or(anything(), st.sampled_from(["queued", "dead", "cancelled"])),
                "queue": good_or(anything(), st.just("q")),
                "limit": good_or(integers_and_worse(), st.integers(0, 10)),
                "offset": good_or(integers_and_worse(), st.integers(0, 10)),
            },
        ),
    ),
    st.tuples(st.just("counts"), st.fixed_dictionaries({}, optional={"queue": anything()})),
    st.tuples(st.just("find_by_key"), st.fixed_dictionaries({"idempotency_key": anything()})),
    st.tuples(
        st.just("cancel_matching"),
        st.fixed_dictionaries(
            {"queue": good_or(anything(), st.just("no-such-queue"))},
            optional={
                "statuses": good_or(st.lists(anything(), max_size=3), st.just(["queued"])),
                "job_type": good_or(anything(), st.just("fuzz.none")),
                "batch_size": good_or(integers_and_worse(), st.integers(1, 5)),
            },
        ),
    ),
    st.tuples(st.just("purge"), st.fixed_dictionaries({"older_than": st.one_of(datetimes_and_worse(), durations_and_worse())})),
)


@FUZZ
@given(call=READ_CALLS)
@example(call=("find_by_key", {"idempotency_key": None}))  # found: an AssertionError
def test_reads_and_bulk_calls_refuse_bad_filters_and_write_nothing(
    fuzzed: tuple[Tether, StatementLog], baseline: str, call: tuple[str, dict[str, Any]]
) -> None:
    app, log = fuzzed
    name, arguments = call
    before = snapshot(app)
    try:
        getattr(app, name)(**arguments)
    except TetherError as error:
        rejected_cleanly(error, (*arguments, "filters"))
        assert snapshot(app) == before
    assert log.leaks(texts_in(arguments), baseline) == []
