"""The last hour as a small chart drawn on the server: an SVG the page holds inline (no
JavaScript, no style of its own: the stylesheet colours it), one bar a minute, the
delivered stacked under the failed attempts, and the backlog (pending, in flight included)
at each minute's end as a line across them.

The bars count what happened in a minute and the line what waited at its end: two
quantities, two scales. The bars are scaled to the busiest minute and the line to the
largest backlog, each drawn to the full height, and the caption gives both peaks.

Under the bars, a time axis: a tick and its time (UTC, as every time the view
shows) at each ten minutes of the clock, so that "since when" is read off the
chart, not counted in bars.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

WIDTH = 600
"""Drawing units: 10 a minute (each bar 8, and a gap of 2)."""
HEIGHT = 80
"""The bars' and the line's height; the axis's labels go below it."""
BAR = 8
AXIS = 16
"""Drawing units under the bars for the ticks and their times."""
TICK_MINUTES = 10
"""A tick at every minute of the clock that is a multiple of this."""
_EDGE = 16
"""A label this close to either side is anchored at its tick's side, not centred, so that
it is not cut by the drawing's edge."""


@dataclass(frozen=True)
class Tick:
    """A time on the axis: where (the start of its minute's bar), what, and how the label
    hangs from it (SVG ``text-anchor``)."""

    x: int
    label: str
    anchor: str


@dataclass(frozen=True)
class Bar:
    minute: datetime
    delivered: int
    failed: int
    pending: int
    """Pending or in flight at the minute's end."""
    x: int
    delivered_y: float
    delivered_height: float
    failed_y: float
    failed_height: float


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: int
    """The busiest minute's count (delivered plus failed): the bars' scale."""
    delivered: int
    failed: int
    pending_peak: int
    """The largest backlog of the hour: the line's scale."""
    pending_now: int
    """The backlog at the last minute's end (the current minute so far)."""
    line: str
    """The backlog's line as SVG ``points`` (empty when nothing waited all hour)."""
    ticks: list[Tick]
    """The time axis, oldest first."""
    width: int = WIDTH
    height: int = HEIGHT
    """The plot's height: where the axis runs."""
    full_height: int = HEIGHT + AXIS
    """The drawing's height, the axis's labels included."""


def chart(minutes: list[tuple[datetime, int, int, int]]) -> Chart:
    """The chart of ``(minute, delivered, failed, pending)`` rows, oldest first."""
    peak = max((d + f for _, d, f, _ in minutes), default=0)
    pending_peak = max((p for *_, p in minutes), default=0)
    step = WIDTH // max(1, len(minutes))
    scale = HEIGHT / peak if peak else 0.0
    bars = []
    for i, (minute, delivered, failed, pending) in enumerate(minutes):
        low = round(delivered * scale, 1)
        high = round(failed * scale, 1)
        bars.append(Bar(minute, delivered, failed, pending, i * step, HEIGHT - low, low,
                        HEIGHT - low - high, high))
    line = ""
    if pending_peak:
        # Inset by a unit so that a line at the top or the bottom is not cut in half.
        level = (HEIGHT - 2) / pending_peak
        line = " ".join(f"{b.x + BAR / 2:g},{HEIGHT - 1 - round(b.pending * level, 1):g}"
                        for b in bars)
    return Chart(bars, peak, sum(b.delivered for b in bars), sum(b.failed for b in bars),
                 pending_peak, bars[-1].pending if bars else 0, line, ticks(bars))


def ticks(bars: list[Bar]) -> list[Tick]:
    """A tick at the start of each bar whose minute (UTC) is a multiple of
    :data:`TICK_MINUTES`, labelled ``HH:MM``."""
    found = []
    for bar in bars:
        minute = bar.minute.astimezone(UTC)
        if minute.minute % TICK_MINUTES:
            continue
        anchor = ("start" if bar.x < _EDGE else "end" if bar.x > WIDTH - _EDGE
                  else "middle")
        found.append(Tick(bar.x, minute.strftime("%H:%M"), anchor))
    return found
