"""The event loop's lag: sampled by a timer, summed over an attempt, exported as a gauge."""

from __future__ import annotations

import asyncio
import time

from dispatcher.observe.loop_lag import LoopLag
from dispatcher.observe.metrics import Metrics


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_lag_lost_since_a_moment_sums_the_samples_after_it() -> None:
    """lost_since sums the lag of the samples taken from that moment on; recent is the
    largest of the last ten seconds."""
    clock = _Clock()
    lag = LoopLag(clock)
    for at, late in ((100.0, 0.5), (101.0, 0.01), (102.0, 0.2), (103.0, 0.3)):
        lag.record(late, at)
    clock.now = 103.0
    assert lag.lost_since(101.5) == 0.5
    assert abs(lag.lost_since(100.0) - 1.01) < 1e-9
    assert lag.recent() == 0.5
    clock.now = 111.5
    assert lag.recent() == 0.3


def test_the_timer_measures_a_blocked_loop() -> None:
    """A callback that holds the loop for 0.3 s shows as lag of about that much."""
    lag = LoopLag()

    async def run() -> None:
        task = asyncio.create_task(lag.run(interval=0.01))
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        started = loop.time()
        loop.call_soon(time.sleep, 0.3)  # a callback that blocks the loop: the timer wakes late
        await asyncio.sleep(0.1)
        task.cancel()
        assert lag.lost_since(started) >= 0.25

    asyncio.run(run())


def test_the_gauge_is_exported() -> None:
    """outbox_event_loop_lag_seconds is on /metrics, the largest recent lag."""
    metrics = Metrics()
    metrics.loop_lag.record(0.25)
    text = metrics.render().decode()
    assert "# TYPE outbox_event_loop_lag_seconds gauge" in text
    assert "outbox_event_loop_lag_seconds 0.25" in text
