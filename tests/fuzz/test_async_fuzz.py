"""Hostile input through the async API (memory, SQLite and PostgreSQL): ``await app.aenqueue(...)`` and
``await app.aenqueue_many(...)`` refuse exactly what their sync namesakes refuse, with the same
error class and the same field, and a refusal writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from tether import EnqueueRequest, TetherError
from tether.entrypoints.service import Tether

from tests.fuzz.hostile import budget
from tests.fuzz.stores import STORES, StatementLog, open_app
from tests.fuzz.test_api_fuzz import ENQUEUE_ARGUMENTS, snapshot

HUGE = 10**5000


@pytest.fixture(scope="module", params=STORES)
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tether]:
    if request.param == "postgresql":  # the one store whose async calls run on their own (native async) path
        request.applymarker(pytest.mark.postgres)
    with open_app(request.param, tmp_path_factory.mktemp(f"async_{request.param}"), StatementLog()) as app:
        yield app


def outcome(call: Any) -> tuple[str, str | None] | None:
    """None when ``call()`` succeeds, else the class and field of the TetherError it raised."""
    try:
        call()
    except TetherError as error:
        return type(error).__name__, getattr(error, "field", None)
    return None


def refused_alike(app: Tether, sync_call: Any, async_call: Any) -> None:
    before = snapshot(app)
    refused = outcome(sync_call)
    if refused is not None:
        assert snapshot(app) == before
    before = snapshot(app)
    assert outcome(lambda: asyncio.run(async_call())) == refused
    if refused is not None:
        assert snapshot(app) == before


@budget(50)
@given(arguments=ENQUEUE_ARGUMENTS)
@example(arguments={"job_type": HUGE, "payload": {}})
@example(arguments={"job_type": "fuzz.job", "payload": {}, "idempotency_key": "tether:tick:nightly:0"})
@example(arguments={"job_type": "fuzz.job", "payload": [float("nan")]})
def test_aenqueue_refuses_what_enqueue_refuses_naming_the_same_field(app: Tether, arguments: dict[str, Any]) -> None:
    refused_alike(app, lambda: app.enqueue(**arguments), lambda: app.aenqueue(**arguments))


@budget(20)
@given(batch=st.lists(ENQUEUE_ARGUMENTS, min_size=1, max_size=3))
def test_aenqueue_many_refuses_what_enqueue_many_refuses_naming_the_same_field(
    app: Tether, batch: list[dict[str, Any]]
) -> None:
    requests = [EnqueueRequest(**arguments) for arguments in batch]
    refused_alike(app, lambda: app.enqueue_many(requests), lambda: app.aenqueue_many(requests))
