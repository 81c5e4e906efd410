"""The horizon gauges: the age as measured, and how long the same horizon has held."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from dispatcher.observe.metrics import Metrics
from tests.support.clock import FakeClock

AGE = "outbox_db_horizon_age_xids"
HELD = "outbox_db_horizon_held_seconds"


def gauges(metrics: Metrics) -> dict[str, float]:
    text = metrics.render().decode()
    return {s.name: float(s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name in (AGE, HELD) and not s.labels}


def test_no_series_before_the_first_measurement() -> None:
    """Until the horizon is measured, neither gauge has a sample (nothing is claimed)."""
    assert gauges(Metrics()) == {}


def test_the_same_horizon_counts_its_time_and_a_new_one_starts_at_zero() -> None:
    """Held seconds grow while the oldest xid stays the same, and restart when it moves."""
    clock = FakeClock()
    metrics = Metrics(clock=clock)
    metrics.horizon.observe(731, 12)
    assert gauges(metrics) == {AGE: 12.0, HELD: 0.0}
    clock.now += 15
    metrics.horizon.observe(731, 4_012)
    assert gauges(metrics) == {AGE: 4_012.0, HELD: 15.0}
    clock.now += 15
    metrics.horizon.observe(5_000, 3)
    assert gauges(metrics) == {AGE: 3.0, HELD: 0.0}


def test_nothing_held_reads_zero_and_forgets_the_horizon() -> None:
    """No holder reports 0 and 0; the same xid seen again afterwards counts from then."""
    clock = FakeClock()
    metrics = Metrics(clock=clock)
    metrics.horizon.observe(731, 12)
    clock.now += 30
    metrics.horizon.observe(None, 0)
    assert gauges(metrics) == {AGE: 0.0, HELD: 0.0}
    clock.now += 30
    metrics.horizon.observe(731, 90)
    assert gauges(metrics)[HELD] == 0.0


def test_a_stale_reading_is_dropped() -> None:
    """A horizon not measured for longer than stale_after is no longer reported."""
    clock = FakeClock()
    metrics = Metrics(clock=clock, stale_after=300)
    metrics.horizon.observe(731, 12)
    clock.now += 301
    assert gauges(metrics) == {}
