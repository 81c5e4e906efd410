"""A monotonic clock the test moves by hand, for parts that take their clock as an argument."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock the test moves by hand (``clock.now += 2.0``)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
