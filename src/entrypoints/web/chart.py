"""The overview's chart, drawn on the server as SVG: jobs completed and failed (dead) per minute over
the last hour.  No script and no inline style: colours come from classes in dashboard.css, and every
text in it is escaped."""

from __future__ import annotations

from datetime import datetime, timedelta
from html import escape

from markupsafe import Markup
from tether.domain.overview import Throughput, minute_of

WIDTH = 720
HEIGHT = 180
LEFT = 44
BOTTOM = 22
MINUTES = 60


def throughput_svg(throughput: Throughput | None, now: datetime) -> Markup:
    """An ``<svg>`` of completed (green) and dead (red) jobs per minute for the hour up to ``now``,
    stacked per minute, with a scale; a note instead when there is nothing to draw."""
    if throughput is None:
        return Markup('<p class="note">This store does not report finished jobs per minute.</p>')
    first = minute_of(now) - timedelta(minutes=MINUTES - 1)
    per_minute = {m.minute: m for m in throughput.minutes}
    slots = [per_minute.get(first + timedelta(minutes=i)) for i in range(MINUTES)]
    peak = max([(m.completed + m.dead) if m else 0 for m in slots] + [1])
    scale = _nice_ceiling(peak)
    plot_w, plot_h = WIDTH - LEFT - 8, HEIGHT - BOTTOM - 8
    slot_w = plot_w / MINUTES
    parts = [
        (f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        f'aria-label="Jobs completed and failed per minute, last hour" xmlns="http://www.w3.org/2000/svg">'),
        f'<line class="axis" x1="{LEFT}" y1="{8 + plot_h}" x2="{LEFT + plot_w}" y2="{8 + plot_h}"/>',
        f'<text class="label" x="{LEFT - 6}" y="14" text-anchor="end">{scale}</text>',
        f'<text class="label" x="{LEFT - 6}" y="{8 + plot_h}" text-anchor="end">0</text>',
        f'<text class="label" x="{LEFT}" y="{HEIGHT - 4}">{escape(first.strftime("%H:%M"))}</text>',
        (f'<text class="label" x="{LEFT + plot_w}" y="{HEIGHT - 4}" text-anchor="end">'
        f'{escape(minute_of(now).strftime("%H:%M"))} UTC</text>'),
    ]
    for i, minute in enumerate(slots):
        if minute is None or minute.completed + minute.dead == 0:
            continue
        x = LEFT + i * slot_w + 1
        base = 8 + plot_h
        for css, count in (("completed", minute.completed), ("dead", minute.dead)):
            if count == 0:
                continue
            h = max(1.0, plot_h * count / scale)
            base -= h
            label = f"{minute.minute:%H:%M} UTC: {count} {css}"
            parts.append(
                f'<rect class="{css}" x="{x:.1f}" y="{base:.1f}" width="{slot_w - 2:.1f}" height="{h:.1f}">'
                f"<title>{escape(label)}</title></rect>"
            )
    parts.append("</svg>")
    if throughput.capped:
        parts.append('<p class="note">More jobs finished this hour than the chart reads: its oldest minutes show fewer.</p>')
    return Markup("".join(parts))


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50 ... that is >= ``value``."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


__all__ = ["throughput_svg"]
