"""Hostile input to handler registration (with its timeout), ``tether.Snooze`` and
``app.worker``: only TetherErrors come out, a refused registration registers nothing, and
whatever is accepted is within its documented range."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import tether
from hypothesis import example, given
from hypothesis import strategies as st
from tether import Snooze, TetherError
from tether.domain.errors import ValidationError
from tether.domain.validation import SNOOZE_MAX_SECONDS
from tether.entrypoints.service import Tether

from tests.fuzz.hostile import FUZZ, anything, durations_and_worse, hostile_text, integers_and_worse


@pytest.fixture(scope="module")
def app() -> Iterator[Tether]:
    with tether.connect("memory://") as app:
        yield app


def handler(payload: Any) -> None:
    return None


REGISTRATIONS = st.fixed_dictionaries(
    {"name": st.one_of(hostile_text(), anything(), st.from_regex(r"[a-z][a-z0-9_.:\-]{0,30}", fullmatch=True))},
    optional={
        "queue": st.one_of(hostile_text(), anything(), st.just("q")),
        "max_attempts": st.one_of(integers_and_worse(), st.integers(1, 10_000)),
        "timeout": st.one_of(durations_and_worse(), st.floats(0.001, 3600)),
    },
)


@FUZZ
@given(registration=REGISTRATIONS)
def test_a_registration_is_taken_whole_or_refused_naming_its_field(app: Tether, registration: dict[str, Any]) -> None:
    before = dict(app.handlers)
    name = registration.pop("name")
    try:
        spec = app.register(name, handler, **registration)
    except ValidationError as error:
        assert error.field in ("job_type", "queue", "max_attempts", "timeout"), error.field
        assert dict(app.handlers) == before
    else:
        assert app.handlers[spec.name] is spec and len(app.handlers) == len(before) + 1
        assert spec.timeout is None or (math.isfinite(spec.timeout) and spec.timeout > 0)


@FUZZ
@given(seconds=st.one_of(durations_and_worse(), anything()))
def test_snooze_takes_a_delay_from_zero_to_a_year_or_names_seconds(seconds: Any) -> None:
    try:
        snooze = Snooze(seconds)
    except ValidationError as error:
        assert error.field == "seconds"
    else:
        assert isinstance(snooze.seconds, float) and 0 <= snooze.seconds <= SNOOZE_MAX_SECONDS


WORKER_ARGUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "concurrency": st.one_of(integers_and_worse(), st.integers(1, 8)),
        "queues": st.one_of(st.lists(st.one_of(hostile_text(), anything()), max_size=3), anything()),
        "lease_timeout": durations_and_worse(),
        "heartbeat_interval": durations_and_worse(),
        "reap_interval": durations_and_worse(),
        "drain_timeout": durations_and_worse(),
        "worker_id": st.one_of(hostile_text(), anything()),
        "max_wait": durations_and_worse(),
        "prefetch": integers_and_worse(),
        "job_timeout": durations_and_worse(),
    },
)


@FUZZ
@given(arguments=WORKER_ARGUMENTS)
def test_a_worker_pool_is_built_or_refused_naming_its_argument(app: Tether, arguments: dict[str, Any]) -> None:
    try:
        app.worker(**arguments)
    except TetherError as error:
        assert isinstance(error, ValidationError) and error.field.split("[", 1)[0] in WORKER_FIELDS, error
        assert "\n" not in str(error)


WORKER_FIELDS = (
    "concurrency", "queues", "lease_timeout", "heartbeat_interval", "reap_interval", "drain_timeout", "worker_id",
    "max_wait", "prefetch", "job_timeout",
)


CONNECT_OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "poll_interval": durations_and_worse(),
        "pool_size": integers_and_worse(),
        "max_payload_bytes": integers_and_worse(),
        "default_queue": st.one_of(hostile_text(), anything()),
        "default_max_attempts": integers_and_worse(),
        "schema": st.one_of(hostile_text(), anything()),
        "redis_options": st.one_of(anything(), st.dictionaries(hostile_text(10), anything(), max_size=2)),
    },
)
RETRY_POLICIES = st.fixed_dictionaries(
    {}, optional={"base_seconds": durations_and_worse(), "cap_seconds": durations_and_worse(), "jitter": durations_and_worse()}
)


@FUZZ
@example(database_url="memory://", options={"redis_options": 1}, policy=None)  # found: a TypeError
@example(database_url="memory://", options={"poll_interval": 10**4299}, policy={"base_seconds": 10**5000})
@given(database_url=st.one_of(st.just("memory://"), hostile_text(), anything()), options=CONNECT_OPTIONS,
       policy=st.one_of(st.none(), RETRY_POLICIES))
def test_connect_opens_an_app_or_refuses_its_options_with_a_tether_error(
    database_url: Any, options: dict[str, Any], policy: dict[str, Any] | None
) -> None:
    try:
        if policy is not None:
            options["retry_policy"] = tether.RetryPolicy(**policy)
        app = tether.connect(database_url, **options)
    except TetherError as error:
        assert "\n" not in str(error), str(error)
    else:
        app.close()
