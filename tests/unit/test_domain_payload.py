"""The payload rules: canonical UTF-8 JSON, a byte limit, and only values JSON carries faithfully."""

from __future__ import annotations

import enum
import json
import sys
from collections import OrderedDict
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tether.domain.errors import PayloadError
from tether.domain.payload import DEFAULT_MAX_PAYLOAD_BYTES, MAX_DEPTH, encode_payload


class Color(enum.IntEnum):
    RED = 1


def test_canonical_form_sorts_keys_without_spaces_and_keeps_unicode() -> None:
    assert encode_payload({"b": 1, "a": [True, None, 1.5], "€": "日本"}) == '{"a":[true,null,1.5],"b":1,"€":"日本"}'


def test_equal_payloads_encode_equally() -> None:
    assert encode_payload({"x": 1, "y": 2}) == encode_payload({"y": 2, "x": 1})


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"x": float("nan")}, "payload.x"),
        ({"x": float("inf")}, "payload.x"),
        ({"x": float("-inf")}, "payload.x"),
        ({"x": datetime(2026, 1, 1, tzinfo=UTC)}, "payload.x"),
        ({"x": date(2026, 1, 1)}, "payload.x"),
        ({"x": Decimal("1.5")}, "payload.x"),
        ({"x": b"bytes"}, "payload.x"),
        ({"x": {1, 2}}, "payload.x"),
        ({"x": (1, 2)}, "payload.x"),
        ({"x": Color.RED}, "payload.x"),
        ({"x": [1, [2, object()]]}, "payload.x[1][1]"),
        ({1: "int key"}, "payload"),
        ({"a\x00b": 1}, "payload"),
        ({"name": "a\u0000b"}, "payload.name"),
        (OrderedDict(a=1), "payload"),
    ],
)
def test_values_json_cannot_carry_are_rejected_with_their_path(payload: Any, path: str) -> None:
    with pytest.raises(PayloadError) as info:
        encode_payload(payload)
    assert info.value.field == path


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (object(), "is an object, which JSON cannot carry"),
        (OrderedDict(a=1), "is an OrderedDict, which JSON cannot carry"),
        ((1, 2), "is a tuple, which JSON cannot carry"),
        (Color.RED, "is a Color; only plain int is JSON"),
    ],
)
def test_the_type_of_a_refused_value_takes_its_article(value: Any, problem: str) -> None:
    with pytest.raises(PayloadError) as info:
        encode_payload({"x": value} if not isinstance(value, OrderedDict) else value)
    assert info.value.problem.startswith(problem)


def test_nul_is_rejected_with_a_reason() -> None:
    with pytest.raises(PayloadError) as info:
        encode_payload({"name": "a\u0000b"})
    assert "NUL" in info.value.problem


def test_escaped_nul_text_is_fine() -> None:
    assert json.loads(encode_payload({"s": "a\\u0000b"})) == {"s": "a\\u0000b"}


def test_size_limit_counts_utf8_bytes() -> None:
    # C13: the canonical text of {"s": "..."} is 8 bytes of framing plus the string.
    exact = {"s": "x" * (DEFAULT_MAX_PAYLOAD_BYTES - 8)}
    assert len(encode_payload(exact).encode("utf-8")) == 65_536
    with pytest.raises(PayloadError) as info:
        encode_payload({"s": "x" * (DEFAULT_MAX_PAYLOAD_BYTES - 7)})
    assert "65537 bytes" in info.value.problem and "65536" in info.value.problem
    euros = {"s": "€" * 22_000}
    assert len(json.dumps(euros, ensure_ascii=False)) < 65_536
    with pytest.raises(PayloadError) as info:
        encode_payload(euros)
    assert "66008 bytes" in info.value.problem


def test_limit_is_configurable() -> None:
    assert encode_payload({"a": 1}, max_bytes=7) == '{"a":1}'
    with pytest.raises(PayloadError):
        encode_payload({"a": 10}, max_bytes=7)


def test_nesting_depth_is_bounded() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH):
        deep = [deep]
    encode_payload(deep)
    with pytest.raises(PayloadError) as info:
        encode_payload([deep])
    assert "deeper" in info.value.problem


def test_scalars_and_big_ints_round_trip() -> None:
    for payload in (None, True, 0, -1, 2**70, 0.1, "s", [], {}):
        assert json.loads(encode_payload(payload)) == payload


def test_a_cycle_is_refused_as_too_deep_not_a_crash() -> None:
    loop: list[Any] = []
    loop.append(loop)
    ring: dict[str, Any] = {}
    ring["self"] = {"back": ring}
    for payload in (loop, ring, {"ok": 1, "bad": loop}):
        with pytest.raises(PayloadError) as info:
            encode_payload(payload)
        assert "deeper" in info.value.problem


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")), inner, max_size=4),
    max_leaves=20,
)


@given(_json_values)
def test_the_text_is_the_canonical_json_dumps_text(payload: Any) -> None:
    """Whatever encoder runs underneath, the text is exactly the module docstring's canonical form."""
    assert encode_payload(payload) == json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# -- text that is not UTF-8, integers too long to read back --------------------------------------
@pytest.mark.parametrize(
    ("payload", "field", "problem"),
    [
        ({"s": "\ud800"}, "payload.s", "holds a lone surrogate (U+D800 at index 0), which has no UTF-8 encoding"),
        ({"s": "ok \udcff"}, "payload.s", "holds a lone surrogate (U+DCFF at index 3), which has no UTF-8 encoding"),
        ({"a": [1, {"b": ["x", "\udfff"]}]}, "payload.a[1].b[1]", "holds a lone surrogate (U+DFFF at index 0), which has no UTF-8 encoding"),
        ("\ud800", "payload", "holds a lone surrogate (U+D800 at index 0), which has no UTF-8 encoding"),
        ({"\ud800": 1}, "payload", "has a key ('\\ud800') that holds a lone surrogate (U+D800 at index 0), which has no UTF-8 encoding"),
        ({"a": {"k\udc80": None}}, "payload.a", "has a key ('k\\udc80') that holds a lone surrogate (U+DC80 at index 1), which has no UTF-8 encoding"),
    ],
    ids=["string", "after-text", "deep", "top-level", "key", "deep-key"],
)
def test_text_that_is_not_utf8_is_a_payload_error_naming_its_path(payload: Any, field: str, problem: str) -> None:
    with pytest.raises(PayloadError) as info:
        encode_payload(payload)
    assert (info.value.field, info.value.problem) == (field, problem)
    str(info.value).encode("utf-8")  # the message itself prints anywhere


def test_a_surrogate_pair_written_as_one_character_is_fine() -> None:
    """U+1D11E is one code point: valid UTF-8 (4 bytes), unlike its two halves apart."""
    assert encode_payload({"clef": "\U0001d11e"}).encode("utf-8") == '{"clef":"𝄞"}'.encode()


def test_integers_up_to_4300_digits_are_accepted_one_more_is_not() -> None:
    largest = 10**4300 - 1  # 4,300 nines
    for value in (largest, -largest):
        assert json.loads(encode_payload({"n": value})) == {"n": value}
    for value in (10**4300, -(10**4300), 10**10_000):
        with pytest.raises(PayloadError) as info:
            encode_payload({"x": [0, value]})
        assert (info.value.field, info.value.problem) == (
            "payload.x[1]", "is an integer of more than 4,300 digits, which cannot be read back"
        )


@pytest.mark.parametrize("process_limit", [0, 100_000])
def test_the_4300_digit_limit_holds_where_the_process_raised_its_own(process_limit: int) -> None:
    """A process that lifted Python's limit still refuses what a default process could not read."""
    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(process_limit)
    try:
        assert json.loads(encode_payload({"n": 10**4300 - 1})) == {"n": 10**4300 - 1}
        with pytest.raises(PayloadError) as info:
            encode_payload({"n": 10**4300})
        assert info.value.field == "payload.n"
    finally:
        sys.set_int_max_str_digits(saved)


def test_a_process_with_a_lower_digit_limit_names_its_own() -> None:
    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(1000)
    try:
        assert encode_payload({"n": 10**1000 - 1}) == '{"n":' + "9" * 1000 + "}"
        with pytest.raises(PayloadError) as info:
            encode_payload({"n": 10**1000})
        assert (info.value.field, info.value.problem) == (
            "payload.n", "is an integer of more than 1,000 digits, which cannot be read back"
        )
    finally:
        sys.set_int_max_str_digits(saved)
