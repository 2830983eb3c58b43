"""The per-key running limit as pure rules: which candidates a lease takes, what counts as limited, and the validators."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tether.domain.errors import ValidationError
from tether.domain.queues import QueueState, pick_within_key_limit, validate_max_running_per_key
from tether.domain.validation import prepare_job, validate_concurrency_key

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_lease_passes_over_a_key_at_its_limit_and_counts_its_own_picks() -> None:
    candidates = [(1, "a"), (2, "a"), (3, "b"), (4, None), (5, "c"), (6, "b")]
    assert pick_within_key_limit(candidates, 1, {}, None) == [1, 3, 4, 5]
    assert pick_within_key_limit(candidates, 1, {"b": 1}, None) == [1, 4, 5]
    assert pick_within_key_limit(candidates, 2, {"a": 1}, None) == [1, 3, 4, 5, 6]
    assert pick_within_key_limit(candidates, 1, {}, 2) == [1, 3]  # the queue's room cuts in lease order
    assert pick_within_key_limit(candidates, None, {"a": 5}, None) == [1, 2, 3, 4, 5, 6]  # no per-key limit
    assert pick_within_key_limit(candidates, 1, {}, 0) == []


def test_held_counts_are_not_changed_by_a_pick() -> None:
    held = {"a": 0}
    pick_within_key_limit([(1, "a")], 1, held, None)
    assert held == {"a": 0}


def test_a_per_key_limit_makes_a_queue_limited_and_restricted() -> None:
    state = QueueState("api", max_running_per_key=1)
    assert state.limited and state.restricted
    assert not QueueState("api").limited


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2", None, 1_000_001])
def test_a_bad_per_key_limit_names_its_field(bad: object) -> None:
    with pytest.raises(ValidationError) as caught:
        validate_max_running_per_key(bad)
    assert caught.value.field == "max_running_per_key"


@pytest.mark.parametrize("bad", ["", "k" * 256, 7, b"k", "a\x00b", "x\udcff"])
def test_a_bad_concurrency_key_names_its_field(bad: object) -> None:
    with pytest.raises(ValidationError) as caught:
        validate_concurrency_key(bad)
    assert caught.value.field == "concurrency_key"
    with pytest.raises(ValidationError) as caught:
        prepare_job("t", {}, now=NOW, concurrency_key=bad)
    assert caught.value.field == "concurrency_key"


def test_a_concurrency_key_of_1_to_255_characters_is_kept() -> None:
    assert validate_concurrency_key(None) is None
    assert prepare_job("t", {}, now=NOW, concurrency_key="k").concurrency_key == "k"
    assert prepare_job("t", {}, now=NOW, concurrency_key="é" * 255).concurrency_key == "é" * 255
    assert prepare_job("t", {}, now=NOW).concurrency_key is None
