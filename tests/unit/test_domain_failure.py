"""describe_failure and sanitize_text: any exception becomes a bounded, storable last_error (C11b, C18)."""

from __future__ import annotations

import pytest
from tether.domain.failure import DEFAULT_MAX_ERROR_CHARS, describe_failure, sanitize_text


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class TwoArgs(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(code, detail)
        self.code, self.detail = code, detail


class StrReturnsNonStr(Exception):
    def __str__(self) -> str:
        return 42  # type: ignore[return-value]  # noqa: PLE0307 - the point of this test


def test_type_name_and_message() -> None:
    assert describe_failure(ValueError("bad input")) == "ValueError: bad input"
    assert describe_failure(KeyError("k")) == "KeyError: 'k'"


def test_empty_message_is_just_the_type() -> None:
    assert describe_failure(RuntimeError()) == "RuntimeError"


def test_nested_class_uses_qualified_name() -> None:
    class Inner(Exception):
        pass

    assert describe_failure(Inner("x")).endswith("Inner: x")
    assert "test_nested_class_uses_qualified_name.<locals>.Inner" in describe_failure(Inner("x"))


def test_c18_str_that_raises_is_marked_unprintable() -> None:
    text = describe_failure(StrRaises())
    assert text == "StrRaises: <unprintable: str() raised RuntimeError>"


def test_c18_str_returning_a_non_string_is_marked_unprintable() -> None:
    assert describe_failure(StrReturnsNonStr()) == "StrReturnsNonStr: <unprintable: str() raised TypeError>"


def test_c18_huge_message_is_bounded_and_says_so() -> None:
    text = describe_failure(ValueError("x" * 5_000_000))
    assert len(text) == DEFAULT_MAX_ERROR_CHARS
    assert text.startswith("ValueError: xxx")
    assert text.endswith("... [truncated from 5000012 chars]")


def test_c18_constructor_needing_two_arguments() -> None:
    assert describe_failure(TwoArgs(7, "boom")) == "TwoArgs: (7, 'boom')"


def test_c11b_nul_is_escaped() -> None:
    text = describe_failure(ValueError("bad\x00byte"))
    assert text == "ValueError: bad\\x00byte" and "\x00" not in text


def test_lone_surrogates_become_storable() -> None:
    text = sanitize_text("a\udcffb")
    assert text == "a\\udcffb"
    text.encode("utf-8")  # would raise if a surrogate were left


@pytest.mark.parametrize("limit", [10, 50, 200])
def test_sanitize_respects_any_limit(limit: int) -> None:
    text = sanitize_text("y" * 1000, max_chars=limit)
    assert len(text) <= limit


def test_short_text_is_unchanged() -> None:
    assert sanitize_text("ValueError: ok ü €") == "ValueError: ok ü €"


def test_custom_limit_for_describe() -> None:
    assert len(describe_failure(ValueError("z" * 500), max_chars=100)) == 100
