"""Error messages show the caller's value safely: a value Python cannot print (an integer past
4,300 digits) or one too long to read is described, never the cause of a second error, for every
field of the public API that takes a number or a name."""

from __future__ import annotations

from typing import Any

import pytest
import tether
from tether import EnqueueRequest, Snooze, ValidationError
from tether.domain.errors import shown
from tether.domain.retry import RetryPolicy

HUGE = 10**5000


@pytest.fixture
def app() -> Any:
    with tether.connect("memory://") as app:
        yield app


def test_shown_cuts_long_values_and_counts_the_digits_of_huge_integers() -> None:
    assert shown("abc") == "'abc'"
    assert shown("x" * 100) == "'" + "x" * 76 + "..."
    assert shown(HUGE) == "an integer of 5,001 digits"
    assert shown(-HUGE) == "a negative integer of 5,001 digits"
    assert shown(10**40) == str(10**40)
    assert shown(10**41) == "an integer of 42 digits"

    class Unprintable:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert shown(Unprintable()) == "<Unprintable>"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"job_type": HUGE}, "job_type: an integer of 5,001 digits is not a job type"),
        ({"queue": HUGE}, "queue: an integer of 5,001 digits is not a queue name"),
        ({"priority": HUGE}, "priority: must be an integer from -2,147,483,648 to 2,147,483,647, got an integer of 5,001 digits"),
        ({"max_attempts": -HUGE}, "max_attempts: must be an integer from 1 to 10,000, got a negative integer of 5,001 digits"),
        ({"idempotency_key": HUGE}, "idempotency_key: must be a string of 1-255 characters, got an integer of 5,001 digits"),
        ({"delay": HUGE}, "delay: must be a finite number of seconds, got an integer of 5,001 digits"),
        ({"payload": {HUGE: 1}}, "payload: has a key of type int (an integer of 5,001 digits)"),
        ({"queue": "q" * 100_000}, "queue: 'qqqq"),
    ],
    ids=["job_type", "queue", "priority", "max_attempts", "idempotency_key", "delay", "payload-key", "long-queue"],
)
def test_enqueue_names_the_field_of_a_value_python_cannot_print(app: Any, arguments: dict[str, Any], message: str) -> None:
    arguments.setdefault("job_type", "emails.send")
    with pytest.raises(ValidationError) as info:
        app.enqueue(**arguments)
    assert str(info.value).startswith(message)
    assert len(str(info.value)) < 300
    with pytest.raises(ValidationError) as info:
        app.enqueue_many([EnqueueRequest("emails.send"), EnqueueRequest(**arguments)])
    assert str(info.value).startswith("requests[1]." + message)
    assert sum(app.counts().values()) == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda app: app.list(status=HUGE), "status: an integer of 5,001 digits is not one of"),
        (lambda app: app.list(limit=HUGE), "limit: must be an integer from 0 to 10,000, got an integer of 5,001 digits"),
        (lambda app: app.cancel_matching(statuses=[HUGE]), "statuses: an integer of 5,001 digits is not a status"),
        (lambda app: app.find_by_key(None), "idempotency_key: must be a string of 1-255 characters, got None"),
        (lambda app: app.worker(queues=HUGE), "queues: must be a non-empty list of queue names or None, got an integer"),
        (lambda app: app.worker(lease_timeout=-HUGE), "lease_timeout: must be a finite number of seconds, got a negative"),
        (lambda app: Snooze(HUGE), "seconds: must be a finite number of seconds, got an integer of 5,001 digits"),
        (lambda app: RetryPolicy(base_seconds=HUGE), "retry_policy.base_seconds: must be at most 3,155,760,000 seconds (100 years), got an integer of 5,001"),
    ],
    ids=["list-status", "list-limit", "cancel-statuses", "find-none", "worker-queues", "worker-lease", "snooze", "retry"],
)
def test_other_calls_name_the_field_of_a_value_python_cannot_print(app: Any, call: Any, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        call(app)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("options", [1, "prefix=x", ["prefix"]])
def test_connect_refuses_redis_options_that_are_not_a_dict(options: Any) -> None:
    with pytest.raises(tether.ConfigurationError) as info:
        tether.connect("memory://", redis_options=options)
    assert str(info.value) == f"redis_options: must be a dict of RedisStreamsDispatcher keywords, got {type(options).__name__}"


def test_settings_name_the_setting_of_a_number_python_cannot_print_or_convert() -> None:
    from tether.entrypoints.settings import InvalidSetting, Settings

    with pytest.raises(InvalidSetting) as info:
        tether.connect("memory://", poll_interval=10**4299)
    assert str(info.value) == "poll_interval: must be a finite number of seconds, got an integer of 4,300 digits"
    with pytest.raises(InvalidSetting) as info:
        Settings(concurrency=HUGE)
    assert "must be an integer from 1 to" in str(info.value) and str(info.value).endswith("got an integer of 5,001 digits")
    with pytest.raises(InvalidSetting) as info:
        Settings(lease_timeout=-HUGE)
    assert "lease_timeout" in str(info.value) and "a negative integer of 5,001 digits" in str(info.value)
