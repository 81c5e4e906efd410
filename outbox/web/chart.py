"""The last hour of an endpoint as a small bar chart drawn on the server: an SVG the page
holds inline (no JavaScript, no style of its own: the stylesheet colours it), one bar a
minute, the delivered stacked under the failed attempts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

WIDTH = 600
"""Drawing units: 10 a minute (each bar 8, and a gap of 2)."""
HEIGHT = 80


@dataclass(frozen=True)
class Bar:
    minute: datetime
    delivered: int
    failed: int
    x: int
    delivered_y: float
    delivered_height: float
    failed_y: float
    failed_height: float


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: int
    """The tallest minute's count (delivered plus failed): the chart's scale."""
    delivered: int
    failed: int
    width: int = WIDTH
    height: int = HEIGHT


def chart(minutes: list[tuple[datetime, int, int]]) -> Chart:
    """Bars for ``(minute, delivered, failed)`` rows, oldest first, scaled to the peak."""
    peak = max((d + f for _, d, f in minutes), default=0)
    step = WIDTH // max(1, len(minutes))
    scale = HEIGHT / peak if peak else 0.0
    bars = []
    for i, (minute, delivered, failed) in enumerate(minutes):
        low = round(delivered * scale, 1)
        high = round(failed * scale, 1)
        bars.append(Bar(minute, delivered, failed, i * step, HEIGHT - low, low,
                        HEIGHT - low - high, high))
    return Chart(bars, peak, sum(b.delivered for b in bars), sum(b.failed for b in bars))
