"""How long something took, in words: the one formatter of the CLI and the dashboard.

``tether jobs show``, the dashboard (its ``seconds`` template filter: attempts, queue latency,
rate windows) and the ``--log-jobs`` finish line all print a duration with
:func:`format_duration`, so one attempt reads the same everywhere.  JSON output keeps raw
seconds (or timestamps); this is for people only.
"""

from __future__ import annotations

import math
from datetime import timedelta

from tether.domain.explanation import span

#: What a missing duration prints as (an attempt that never started, a queue with nothing due).
MISSING = "—"


def format_duration(seconds: float | None) -> str:
    """``seconds`` at the scale it lives in, rounded to what that scale shows.

    ``0 ms``, ``< 0.1 ms``, ``0.6 ms`` and ``6 ms`` under a second; ``1.5 s`` under a minute;
    beyond, two units worded by :func:`tether.domain.explanation.span` (``2 min 5 s``,
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
    # rounded to the smaller of the two units shown, then worded as `jobs why` words a span
    if round(seconds) < 3_600:
        return span(timedelta(seconds=round(seconds)))
    if round(seconds / 60) < 1_440:
        return span(timedelta(minutes=round(seconds / 60)))
    return span(timedelta(hours=round(seconds / 3_600)))


__all__ = ["MISSING", "format_duration"]
