"""Hypothesis strategies of hostile input: values at and beyond every limit of the public API.

Each strategy mixes well-formed values (so that some calls succeed and the stores are exercised)
with the kinds of values that have broken job queues before: lone surrogates, NUL and other control
characters, very long text, integers past Python's digit limit and past 64 bits, NaN and the
infinities, floats that overflow a ``timedelta``, datetimes at the ends of the calendar in odd
time zones, naive datetimes, booleans where numbers are expected, and objects of no JSON type.
"""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: ``FUZZ_EXAMPLES=N`` in the environment: a longer run of N random examples per test, for hunting.
EXAMPLES = os.environ.get("FUZZ_EXAMPLES")

#: One fixed budget for every fuzz test: the same examples on every run (derandomized), no
#: deadline (the first call to a store opens connections), and a size that keeps the whole fuzz
#: suite well under a minute on a loaded machine.
FUZZ = settings(
    max_examples=int(EXAMPLES) if EXAMPLES else 120,
    derandomize=not EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

def budget(examples: int) -> settings:
    """:data:`FUZZ` with a smaller fixed budget, for a test whose every example is slow (a whole CLI
    command); ``FUZZ_EXAMPLES`` still overrides it."""
    return settings(FUZZ, max_examples=int(EXAMPLES) if EXAMPLES else examples)


#: Text that no store can hold as UTF-8, or that is merely awkward: lone surrogates of both
#: halves, NUL, control and formatting characters, right-to-left marks, very long strings.
SURROGATES = st.sampled_from(["\ud800", "\udfff", "\udcff", "a\ud83d", "\ude00b"])
AWKWARD_CHARACTERS = st.sampled_from(
    ["\x00", "\x1b[31m", "\r\n", "\t", "\u202e", "\ufeff", "'", '"', ";", "--", "%", "_", "\\", "*", "?", "{", "$1", "\u2028"]
)


def hostile_text(max_size: int = 40) -> st.SearchStrategy[str]:
    """Short text of any code point (surrogates included), pieces of awkward characters, and very
    long runs."""
    pieces = st.one_of(
        st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=max_size),
        SURROGATES,
        AWKWARD_CHARACTERS,
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,20}", fullmatch=True),
    )
    joined = st.lists(pieces, min_size=1, max_size=4).map("".join)
    long = st.sampled_from(["x" * 64, "x" * 65, "x" * 200, "x" * 201, "k" * 255, "k" * 256, "é" * 300, "y" * 100_000])
    return st.one_of(joined, long)


#: Integers at the ends of 32 and 64 bits and around Python's 4,300-digit str limit (built lazily:
#: Hypothesis describes a sampled strategy by the repr of its elements, which such an int has not).
HUGE_INTS = st.sampled_from(
    [(2, 31, -1), (2, 31, 0), (-2, 31, 0), (-2, 31, -1), (2, 63, -1), (2, 63, 0), (-2, 63, -1),
     (10, 4299, 0), (10, 4300, 0), (-10, 4300, 0), (10, 5000, 0)]
).map(lambda spec: (1 if spec[0] > 0 else -1) * abs(spec[0]) ** spec[1] + spec[2])
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e15, 1e300, 5e-324, 3_155_760_000.0, 3_155_760_000.5]),
)


def integers_and_worse() -> st.SearchStrategy[Any]:
    """Numbers where an integer is expected: small and huge ints, booleans, floats, NaN, strings,
    Decimals."""
    return st.one_of(
        st.integers(min_value=-5, max_value=12_000),
        HUGE_INTS,
        st.booleans(),
        FLOATS,
        st.just("3"),
        st.just(Decimal("NaN")),
        st.none(),
    )


#: Time zones from the far west to the far east, with seconds and microseconds in the offset.
ZONES = st.sampled_from(
    [
        UTC,
        timezone(timedelta(hours=-23, minutes=-59)),
        timezone(timedelta(hours=23, minutes=59, seconds=59, microseconds=999_999)),
        timezone(timedelta(hours=5, minutes=30)),
        timezone(timedelta(seconds=-1)),
    ]
)


def datetimes_and_worse() -> st.SearchStrategy[Any]:
    """Due times: aware datetimes of every year in odd zones (the ends of the calendar included),
    naive ones, dates-as-text, numbers."""
    ends = st.sampled_from([datetime.min, datetime.max, datetime(9999, 12, 31, 23), datetime(1, 1, 1, 1)])
    return st.one_of(
        st.datetimes(timezones=ZONES),
        st.builds(lambda dt, tz: dt.replace(tzinfo=tz), ends, ZONES),
        st.datetimes(),  # naive
        st.just("2026-01-01T00:00:00Z"),
        st.just(0),
        st.none(),
    )


def durations_and_worse() -> st.SearchStrategy[Any]:
    """Seconds: small, negative, huge, non-finite, timedeltas to their ends, booleans, text."""
    return st.one_of(
        st.floats(min_value=-10, max_value=1e4, allow_nan=False),
        FLOATS,
        HUGE_INTS,
        st.sampled_from([timedelta.max, timedelta.min, timedelta(0), timedelta(days=36_525), timedelta(days=36_526)]),
        st.timedeltas(),
        st.booleans(),
        st.just("5"),
        st.none(),
    )


def payloads() -> st.SearchStrategy[Any]:
    """JSON-like payloads whose leaves are hostile: surrogates in keys and values, huge ints,
    NaN, non-JSON objects, non-string keys, deep nesting."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        integers_and_worse(),
        hostile_text(20),
        st.just(b"bytes"),
        st.just(object()),
        st.just({1, 2}),
        st.just(Decimal("1.5")),
        st.datetimes(),
    )
    keys = st.one_of(hostile_text(10), st.integers(), st.just(None), st.just((1, 2)))
    tree = st.recursive(
        leaves,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)),
        max_leaves=12,
    )
    deep = st.integers(min_value=1, max_value=3_000).map(_nested)
    return st.one_of(tree, deep)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def anything() -> st.SearchStrategy[Any]:
    """Values of any of the kinds above, for arguments that take one narrow kind."""
    return st.one_of(hostile_text(), integers_and_worse(), datetimes_and_worse(), st.just([]), st.just({}))
