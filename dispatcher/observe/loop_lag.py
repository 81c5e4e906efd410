"""The event loop's lag: how late a cheap periodic timer wakes, as a gauge and for the breaker.

A timer asks to wake every ``interval``; however much later it wakes is the
lag, the time the loop could not run what was due: its own callbacks took
the CPU, or the machine gave the process none. The gauge
``outbox_event_loop_lag_seconds`` is the largest lag of the last ten
seconds (this project's own metric, beside the documented ones).

The circuit breaker asks :meth:`LoopLag.lost_since`: the lag summed over
the samples taken since an attempt started. A request that timed out while
the loop lost a good share of its timeout was timed by a starved process:
the answer may have come in time and waited for the loop to read it. Such
a timeout says little about the endpoint, so it does not vote (see
``dispatcher.deliver``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

INTERVAL = 0.1
"""Seconds between the timer's wake-ups: ten a second costs nothing measurable."""
_KEPT = 6000
"""Samples kept: ten minutes, longer than the longest timeout (300 s)."""
_GAUGE_SPAN = 10.0


class LoopLag:
    """Samples of the loop's lag, newest last, on the monotonic clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque(maxlen=_KEPT)  # (taken at, lag)

    def record(self, lag: float, at: float | None = None) -> None:
        """One sample: the timer woke ``lag`` seconds late."""
        self._samples.append((self._clock() if at is None else at, max(lag, 0.0)))

    def lost_since(self, start: float) -> float:
        """The lag summed over the samples taken since ``start`` (monotonic seconds)."""
        lost = 0.0
        for at, lag in reversed(self._samples):
            if at < start:
                break
            lost += lag
        return lost

    def recent(self) -> float:
        """The largest lag of the last ten seconds (0 before the first sample)."""
        return max((lag for at, lag in self._samples
                    if at >= self._clock() - _GAUGE_SPAN), default=0.0)

    async def run(self, interval: float = INTERVAL) -> None:
        """Sample until cancelled."""
        while True:
            asked = self._clock()
            await asyncio.sleep(interval)
            woke = self._clock()
            self.record(woke - asked - interval, woke)


class LoopLagCollector(Collector):
    """``outbox_event_loop_lag_seconds`` from a :class:`LoopLag`."""

    def __init__(self, lag: LoopLag) -> None:
        self._lag = lag

    def describe(self) -> Iterable[Metric]:
        return self.collect()

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily(
            "outbox_event_loop_lag_seconds",
            "The largest lag of the dispatcher's event loop over the last 10 s: how late a "
            "100 ms timer woke (the loop busy, or the machine's CPU taken).")
        gauge.add_metric([], self._lag.recent())
        yield gauge
