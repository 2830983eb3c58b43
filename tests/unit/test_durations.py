"""How long something took, in words, as the CLI and the dashboard print it: one formatter."""

from __future__ import annotations

import pytest
from tether.entrypoints.durations import format_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 ms"),
        (0.000_01, "< 0.1 ms"),
        (0.000_6, "0.6 ms"),
        (0.000_96, "1 ms"),  # rounds up into whole milliseconds
        (0.006_09, "6 ms"),
        (0.999, "999 ms"),
        (0.999_6, "1.0 s"),  # 1000 ms is a second
        (1.5, "1.5 s"),
        (2, "2.0 s"),
        (59.9, "59.9 s"),
        (59.96, "1 min"),  # rounds to 60.0 s: a minute
        (60, "1 min"),
        (125, "2 min 5 s"),
        (3_599.6, "1 h"),
        (3_600, "1 h"),
        (11_040, "3 h 4 min"),
        (86_400, "1 d"),
        (183_600, "2 d 3 h"),
        (-0.25, "-250 ms"),
        (float("inf"), "inf s"),  # clocks that disagree: said, not hidden
    ],
)
def test_a_duration_reads_well_at_every_scale(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_no_duration_is_a_dash() -> None:
    assert format_duration(None) == "—"
