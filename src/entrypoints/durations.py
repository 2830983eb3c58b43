"""How long something took, in words: the one formatter of the CLI and the dashboard.

``tether jobs show``, the dashboard (its ``seconds`` template filter: attempts, queue latency,
rate windows) and the ``--log-jobs`` finish line all print a duration with
:func:`format_duration`, so one attempt reads the same everywhere.  JSON output keeps raw
seconds (or timestamps); this is for people only.
"""

from __future__ import annotations

import math

#: What a missing duration prints as (an attempt that never started, a queue with nothing due).
MISSING = "—"


def format_duration(seconds: float | None) -> str:
    """``seconds`` at the scale it lives in, rounded to what that scale shows.

    ``0 ms``, ``< 0.1 ms``, ``0.6 ms`` and ``6 ms`` under a second; ``1.5 s`` under a minute;
    beyond, two units as :func:`tether.domain.explanation.span` words them (``2 min 5 s``,
    ``1 min``, ``3 h 4 min``, ``2 d 3 h``).  A value is rounded before its unit is chosen, so
    0.9996 s is ``1.0 s``, never ``1000 ms``.  A negative value (clocks that disagree) keeps its
    sign; None is :data:`MISSING`; an infinite one is ``inf s``.
    """
    if seconds is None:
        return MISSING
    if not math.isfinite(seconds):
        return f"{seconds} s"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    milliseconds = seconds * 1000
    if round(milliseconds, 1) < 1:
        if milliseconds == 0:
            return "0 ms"
        return "< 0.1 ms" if round(milliseconds, 1) == 0 else f"{milliseconds:.1f} ms"
    if round(milliseconds) < 1000:
        return f"{round(milliseconds)} ms"
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    if round(seconds) < 3_600:
        return _two_units(round(seconds), 60, "min", "s")
    if round(seconds / 60) < 1_440:
        return _two_units(round(seconds / 60), 60, "h", "min")
    return _two_units(round(seconds / 3_600), 24, "d", "h")


def _two_units(count: int, per: int, big: str, small: str) -> str:
    """``count`` small units as ``<big> <big-unit> <rest> <small-unit>`` (the rest left out when 0)."""
    whole, rest = divmod(count, per)
    return f"{whole} {big}" + (f" {rest} {small}" if rest else "")


__all__ = ["MISSING", "format_duration"]
