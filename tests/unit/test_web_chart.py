"""The endpoint's last-hour chart: bars scaled to the busiest minute, failed above
delivered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from outbox.web.chart import HEIGHT, WIDTH, chart

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_bars_are_scaled_to_the_peak_and_stacked() -> None:
    """The busiest minute fills the height; a minute's failed bar sits on its delivered."""
    drawn = chart([(START + timedelta(minutes=i), d, f)
                   for i, (d, f) in enumerate([(0, 0), (30, 10), (10, 0)] + [(0, 0)] * 57)])
    assert (drawn.peak, drawn.delivered, drawn.failed) == (40, 40, 10)
    busiest = drawn.bars[1]
    assert busiest.x == WIDTH // 60
    assert busiest.delivered_height + busiest.failed_height == HEIGHT
    assert busiest.failed_y + busiest.failed_height == busiest.delivered_y
    assert drawn.bars[2].delivered_height == HEIGHT / 4


def test_an_idle_hour_draws_nothing() -> None:
    """No attempt in the hour: every bar is empty, and nothing divides by zero."""
    drawn = chart([(START + timedelta(minutes=i), 0, 0) for i in range(60)])
    assert drawn.peak == 0
    assert all(b.delivered_height == b.failed_height == 0 for b in drawn.bars)
