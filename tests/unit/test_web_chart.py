"""The last-hour chart: bars scaled to the busiest minute, failed above delivered, and the
backlog's line scaled to its own peak."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from outbox.web.chart import BAR, HEIGHT, WIDTH, chart

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_bars_are_scaled_to_the_peak_and_stacked() -> None:
    """The busiest minute fills the height; a minute's failed bar sits on its delivered."""
    drawn = chart([(START + timedelta(minutes=i), d, f, 0)
                   for i, (d, f) in enumerate([(0, 0), (30, 10), (10, 0)] + [(0, 0)] * 57)])
    assert (drawn.peak, drawn.delivered, drawn.failed) == (40, 40, 10)
    busiest = drawn.bars[1]
    assert busiest.x == WIDTH // 60
    assert busiest.delivered_height + busiest.failed_height == HEIGHT
    assert busiest.failed_y + busiest.failed_height == busiest.delivered_y
    assert drawn.bars[2].delivered_height == HEIGHT / 4


def test_the_backlog_is_a_line_on_its_own_scale() -> None:
    """The line has a point a minute at the bar's middle, the largest backlog at the top
    and none at the bottom, whatever the bars' scale; the caption's figures are its peak
    and its last minute."""
    drawn = chart([(START + timedelta(minutes=i), 1, 0, p)
                   for i, p in enumerate([0, 500, 250] + [100] * 57)])
    points = [tuple(float(v) for v in p.split(",")) for p in drawn.line.split()]
    assert len(points) == 60
    assert points[0] == (BAR / 2, HEIGHT - 1)
    assert points[1] == (WIDTH // 60 + BAR / 2, 1)
    assert points[2][1] == HEIGHT - 1 - (HEIGHT - 2) / 2
    assert (drawn.pending_peak, drawn.pending_now) == (500, 100)


def test_an_idle_hour_draws_nothing() -> None:
    """No attempt and no backlog in the hour: every bar is empty, no line, and nothing
    divides by zero."""
    drawn = chart([(START + timedelta(minutes=i), 0, 0, 0) for i in range(60)])
    assert drawn.peak == drawn.pending_peak == 0
    assert all(b.delivered_height == b.failed_height == 0 for b in drawn.bars)
    assert drawn.line == ""


def test_the_time_axis_marks_each_ten_minutes_in_utc() -> None:
    """Under the bars, a tick at each ten minutes of the clock, at its minute's bar, named
    HH:MM in UTC whatever the zone the database answered in; a label at either edge hangs
    inwards; the drawing is taller than the plot by the labels' room."""
    zone = timezone(timedelta(hours=2))
    first = datetime(2026, 1, 1, 16, 0, tzinfo=zone)  # 14:00 UTC
    drawn = chart([(first + timedelta(minutes=i), 1, 0, 0) for i in range(60)])
    assert [(t.x, t.label) for t in drawn.ticks] == [
        (i * (WIDTH // 60), f"14:{i:02d}") for i in range(0, 60, 10)]
    assert drawn.ticks[0].anchor == "start"
    assert {t.anchor for t in drawn.ticks[1:]} == {"middle"}
    assert drawn.full_height > drawn.height == HEIGHT
    late = chart([(first + timedelta(minutes=i + 1), 1, 0, 0) for i in range(60)])
    assert (late.ticks[-1].label, late.ticks[-1].anchor) == ("15:00", "end")
